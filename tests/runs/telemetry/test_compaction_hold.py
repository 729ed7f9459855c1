"""Compaction keeps a short hot window, held back while GPU-sample batches wait for a worker (issue 30).

A live run's page pays per hot row (every GPU's every second), so the window is 3 minutes. A
worker backlog must not turn that into reopened blocks: while a GPU-sample batch is pending, a
pass stops COMPACT_AFTER minutes before it was received, and never holds back more than
AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES, whoever's batch it is (runs/telemetry/blocks.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from runs.choices import BatchKind, BatchStatus
from runs.models import GpuSample, GpuSampleBlock, IngestBatch
from runs.telemetry import blocks
from runs.telemetry.store import store_gpu_samples
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db


def _minute(ts: datetime) -> datetime:
    return ts.replace(second=0, microsecond=0)


def pending(world: World, received: datetime, kind: str = BatchKind.GPU_SAMPLES, status: str = BatchStatus.PENDING,
            n: int = 0) -> IngestBatch:  # fmt: skip
    batch = IngestBatch.objects.create(team=world.nlp, kind=kind, content_hash=f"{n:064d}", rows=[], row_count=0,
                                       status=status)  # fmt: skip
    IngestBatch.objects.filter(pk=batch.pk).update(received_at=received)  # auto_now_add on create
    return batch


def test_the_default_window_is_three_minutes_with_nothing_pending(world: World) -> None:
    now = timezone.now()
    assert blocks.held_cutoff(now) == blocks.compact_cutoff(now) == _minute(now - timedelta(minutes=3))


def test_a_pending_batch_holds_the_cutoff_before_it_was_received(world: World) -> None:
    now = timezone.now()
    pending(world, now - timedelta(minutes=5))
    assert blocks.held_cutoff(now) == _minute(now - timedelta(minutes=8))
    # The store path's bound stays the latest cutoff any pass may use.
    assert blocks.compact_cutoff(now) == _minute(now - timedelta(minutes=3))


def test_the_hold_is_bounded_whoever_is_stuck(world: World, settings) -> None:
    now = timezone.now()
    pending(world, now - timedelta(hours=2))
    assert blocks.held_cutoff(now) == _minute(now - timedelta(minutes=10))
    settings.AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES = 6
    assert blocks.held_cutoff(now) == _minute(now - timedelta(minutes=6))
    # A bound shorter than the window itself never compacts sooner than the window.
    settings.AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES = 2
    assert blocks.held_cutoff(now) == _minute(now - timedelta(minutes=3))


def test_only_pending_gpu_sample_batches_hold(world: World) -> None:
    now = timezone.now()
    pending(world, now - timedelta(minutes=7), kind=BatchKind.METRICS, n=1)
    pending(world, now - timedelta(minutes=7), status=BatchStatus.DONE, n=2)
    pending(world, now - timedelta(minutes=7), status=BatchStatus.FAILED, n=3)
    assert blocks.held_cutoff(now) == _minute(now - timedelta(minutes=3))
    pending(world, now - timedelta(minutes=7), n=4)
    assert blocks.held_cutoff(now) == _minute(now - timedelta(minutes=10))


def test_a_backlog_lands_in_hot_minutes_not_reopened_blocks(world: World) -> None:
    """Samples of 6 minutes ago, the rest of whose minute still waits in a pending batch, stay rows."""
    now = timezone.now()
    run = make_run(world.vision, "held", num_accelerators=1, started_at=now - timedelta(minutes=30))
    node = run.attempts.get().nodes.get()
    old, recent = _minute(now - timedelta(minutes=20)), _minute(now - timedelta(minutes=6))
    store_gpu_samples([GpuSample(run=run, node=node, gpu_index=0, ts=old + timedelta(seconds=s), utilization_gpu=50.0)
                       for s in range(0, 60, 10)])  # fmt: skip
    store_gpu_samples([GpuSample(run=run, node=node, gpu_index=0, ts=recent + timedelta(seconds=s),
                                 utilization_gpu=50.0) for s in range(0, 30, 10)])  # fmt: skip
    batch = pending(world, now - timedelta(minutes=5))
    blocks.compact_samples(now=now)
    # The old minute is folded; the one the pending batch may still add to stays hot.
    assert list(GpuSampleBlock.objects.filter(run=run).values_list("minute", flat=True)) == [old]
    assert GpuSample.objects.filter(run=run).count() == 3
    # Once the batch is stored, the next pass folds the minute: three minutes after now again.
    IngestBatch.objects.filter(pk=batch.pk).update(status=BatchStatus.DONE)
    blocks.compact_samples(now=now)
    assert sorted(GpuSampleBlock.objects.filter(run=run).values_list("minute", flat=True)) == [old, recent]
    assert not GpuSample.objects.filter(run=run).exists()
