"""runs/telemetry/store.py on PostgreSQL: a batch of new series-spans is COPYed straight into the
table; anything that may conflict goes through staging + ON CONFLICT, with exact counts either way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runs.models import GpuMinute, GpuSample, Node
from runs.telemetry import store
from tests.conftest import T0, World, make_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY and the staging table are PostgreSQL's"),
]


def _samples(run, node, seconds: range, gpus: int = 2) -> list[GpuSample]:
    return [GpuSample(run=run, node=node, gpu_index=g, ts=T0 + timedelta(seconds=s), utilization_gpu=float(s % 97))
            for s in seconds for g in range(gpus)]  # fmt: skip


def _staged(queries: CaptureQueriesContext) -> bool:
    return any(store.STAGING_TABLE in q["sql"] for q in queries.captured_queries)


def test_new_batch_is_copied_directly_with_exact_minute_counts(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    with CaptureQueriesContext(connection) as queries:
        result = store.store_gpu_samples(_samples(run, node, range(90)))
    assert not _staged(queries)
    assert (result.inserted, result.duplicates) == (180, 0)
    assert GpuSample.objects.count() == 180
    minutes = dict(GpuMinute.objects.filter(gpu_index=0).values_list("minute", "samples"))
    assert minutes == {T0: 60, T0 + timedelta(minutes=1): 30}


def test_resent_or_overlapping_batch_takes_the_conflict_path(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store.store_gpu_samples(_samples(run, node, range(60)))
    with CaptureQueriesContext(connection) as queries:
        again = store.store_gpu_samples(_samples(run, node, range(60)))
        overlap = store.store_gpu_samples(_samples(run, node, range(30, 120)))
    assert _staged(queries)
    assert (again.inserted, again.duplicates) == (0, 120)
    assert (overlap.inserted, overlap.duplicates) == (120, 60)
    assert GpuSample.objects.count() == 240
    assert dict(GpuMinute.objects.filter(gpu_index=1).values_list("minute", "samples")) == {
        T0: 60, T0 + timedelta(minutes=1): 60,
    }  # fmt: skip


def test_a_conflicting_direct_copy_writes_nothing_and_leaves_the_transaction_usable(world: World) -> None:
    """The probe cannot see a concurrent writer's uncommitted rows: the COPY then hits the key."""
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store.store_gpu_samples(_samples(run, node, range(1, 2), gpus=1))
    table = connection.ops.quote_name(GpuSample._meta.db_table)
    # Two rows, the second one stored already: the whole COPY is undone.
    text = "".join(f"{run.pk}\t{node.pk}\t0\t{T0 + timedelta(seconds=s)}\tapi\n" for s in (0, 1))
    with transaction.atomic():
        assert store.copy_direct(table, "run_id, node_id, gpu_index, ts, source", text) is False
        assert GpuSample.objects.count() == 1
    fresh = "".join(f"{run.pk}\t{node.pk}\t0\t{T0 + timedelta(seconds=s)}\tapi\n" for s in (5, 6))
    with transaction.atomic():
        assert store.copy_direct(table, "run_id, node_id, gpu_index, ts, source", fresh) is True
    assert GpuSample.objects.count() == 3
