"""A late batch and the compaction pass folding its minute wait for each other (runs/telemetry/blocks.minute_lock).

So no hot row is ever left beside a block, and readers skip the hot table wherever a block covers
the node-minute. Another connection holds the lock here as the other party would; the waiting side
gives up after a short lock_timeout instead of waiting, which is what shows it waited.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import OperationalError, connection

from runs.models import GpuSample, GpuSampleBlock, Node
from runs.telemetry import blocks
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="advisory locks are PostgreSQL's; SQLite: one writer"),
]
LATER = T0 + timedelta(days=1)
T0_MINUTE = int(T0.timestamp()) // 60


@pytest.fixture
def other():
    """A second session on the test database, as a concurrent worker would hold one."""
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}, autocommit=True) as conn:
        yield conn


def short_lock_timeout() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '300ms'")


def sample(run, node, second: int, util: float) -> GpuSample:
    return GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=second), utilization_gpu=util)


def test_a_late_batch_waits_for_the_pass_folding_its_minute(world: World, other) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    other.execute("SELECT pg_advisory_lock(%s, %s)", [blocks.MINUTE_LOCK, T0_MINUTE])  # a pass folds T0's minute
    short_lock_timeout()
    with pytest.raises(OperationalError, match="lock timeout"):
        store_gpu_samples([sample(run, node, 5, 40.0)])
    # A sample of another minute does not wait for it.
    assert store_gpu_samples([sample(run, node, 65, 40.0)]).inserted == 1
    other.execute("SELECT pg_advisory_unlock(%s, %s)", [blocks.MINUTE_LOCK, T0_MINUTE])
    assert store_gpu_samples([sample(run, node, 5, 40.0)]).inserted == 1


def test_the_pass_waits_for_a_batch_writing_into_its_minute_then_folds_it_whole(world: World, other) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples([sample(run, node, s, 40.0) for s in range(60)])
    other.execute("SELECT pg_advisory_lock_shared(%s, %s)", [blocks.MINUTE_LOCK, T0_MINUTE])  # a batch writes into it
    short_lock_timeout()
    with pytest.raises(OperationalError, match="lock timeout"):
        blocks.compact_samples(now=LATER)
    assert not GpuSampleBlock.objects.exists()
    other.execute("SELECT pg_advisory_unlock_shared(%s, %s)", [blocks.MINUTE_LOCK, T0_MINUTE])
    assert blocks.compact_samples(now=LATER).samples == 60
    assert GpuSampleBlock.objects.get().samples == 60 and not GpuSample.objects.exists()
