"""runs/telemetry/retention.py: raw samples whose run or node is gone are swept and counted.

GpuSample's run and node have no database foreign keys (runs/models/telemetry.py), so raw rows
naming a deleted run or node are not refused by the database; retention removes them. (The
store path's rollups still have foreign keys, so such rows are written here as bare inserts.)
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from runs.models import Attempt, GpuSample, Node
from runs.telemetry.retention import prune_orphan_samples, prune_raw_samples
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def _samples(run_id: int, node_id: int, count: int) -> list[GpuSample]:
    return [GpuSample(run_id=run_id, node_id=node_id, gpu_index=0, ts=T0 + timedelta(seconds=s), utilization_gpu=50.0)
            for s in range(count)]  # fmt: skip


def test_samples_of_a_deleted_run_or_node_are_swept_and_counted(world: World) -> None:
    kept = make_run(world.vision)
    kept_node = Node.objects.get(attempt__run=kept)
    store_gpu_samples(_samples(kept.pk, kept_node.pk, 30))
    gone = make_run(world.vision, external_id="gone")
    gone_node = Node.objects.get(attempt__run=gone)
    gone_ids = (gone.pk, gone_node.pk)
    gone.delete()  # Django's cascade: nothing of it is left yet
    assert not GpuSample.objects.filter(run_id=gone_ids[0]).exists()
    # Rows of the deleted run: nothing in the database refuses them.
    GpuSample.objects.bulk_create(_samples(*gone_ids, 25))
    # A node removed under a run that stays (raw SQL: Django's cascade would take its samples).
    spare = Node.objects.create(attempt=Attempt.objects.get(run=kept), index=1)
    GpuSample.objects.bulk_create(_samples(kept.pk, spare.pk, 7))
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_node WHERE id = %s", [spare.pk])

    assert prune_orphan_samples(batch_size=10) == 32
    assert GpuSample.objects.count() == 30
    assert set(GpuSample.objects.values_list("run_id", "node_id").distinct()) == {(kept.pk, kept_node.pk)}
    assert prune_orphan_samples() == 0


def test_retention_pass_reports_the_orphans(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    ids = (run.pk, node.pk)
    run.delete()
    GpuSample.objects.bulk_create(_samples(*ids, 12))
    result = prune_raw_samples(now=T0 + timedelta(days=1))
    assert (result.orphans_deleted, result.deleted) == (12, 0)
    assert not GpuSample.objects.exists()
