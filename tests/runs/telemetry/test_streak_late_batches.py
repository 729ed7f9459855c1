"""A late batch behind a GPU whose latest sample is in no streak changes nothing and reads no raw samples;
any order of batches leaves the streaks a rebuild from the raw samples finds."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.choices import RunStatus
from runs.models import GpuSample, GpuStreak, Node, Run
from runs.telemetry import streaks
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(minutes=30)
HUNG = {"utilization_gpu": 100.0, "sm_active": 1.0}
BUSY = {"utilization_gpu": 100.0, "sm_active": 80.0}
IDLE = {"utilization_gpu": 0.0, "processes": []}
# The raw-sample read a recompute makes (blocks.raw_rows_of_runs selects the stall fields).
RAW_READ = '"runs_gpusample"."sm_active"'


def _run(world: World) -> Run:
    return make_run(world.vision, "live-1", status=RunStatus.RUNNING, ended_at=None)


def _sample(run: Run, seconds_before_now: int, gpu: int, values: dict) -> GpuSample:
    node = Node.objects.get(attempt__run=run)
    return GpuSample(run=run, node=node, gpu_index=gpu, ts=NOW - timedelta(seconds=seconds_before_now), **values)


def _streaks() -> list[tuple]:
    return sorted(GpuStreak.objects.values_list("gpu_index", "last_ts", "hung_since", "no_process_since"))


def test_a_late_batch_behind_a_latest_sample_in_no_streak_reads_nothing(world: World) -> None:
    run = _run(world)
    store_gpu_samples([_sample(run, s, g, BUSY) for g in range(2) for s in range(1500, -1, -10)])
    kept = _streaks()
    assert [row[2:] for row in kept] == [(None, None), (None, None)]
    # Delayed samples between the stored ones, hung and process-less ones among them.
    late = [_sample(run, s, g, HUNG if s % 20 == 5 else IDLE) for g in range(2) for s in range(1495, 0, -10)]
    with CaptureQueriesContext(connection) as queries:
        assert store_gpu_samples(late).inserted == len(late)
    assert not [q["sql"] for q in queries.captured_queries if RAW_READ in q["sql"]]
    assert _streaks() == kept
    streaks.rebuild([run.pk], NOW)
    assert _streaks() == kept  # what the raw samples say


def test_a_late_batch_behind_a_streak_is_still_recomputed(world: World) -> None:
    run = _run(world)
    store_gpu_samples([_sample(run, s, 0, HUNG) for s in range(1200, -1, -10)])
    with CaptureQueriesContext(connection) as queries:
        store_gpu_samples([_sample(run, 305, 0, BUSY)])
    assert [q for q in queries.captured_queries if RAW_READ in q["sql"]]
    assert GpuStreak.objects.get(run=run).hung_since == NOW - timedelta(seconds=300)


@pytest.mark.parametrize("seed", range(4))
def test_batches_in_any_order_leave_what_a_rebuild_finds(world: World, seed: int) -> None:
    run = _run(world)
    shuffle = random.Random(seed)
    kinds = [BUSY, HUNG, IDLE]
    # Four GPUs, 25 minutes at 5 s, in runs of one kind; cut into 12 batches stored in a random order.
    values = {g: [kinds[(s // 150 + g + seed) % 3] for s in range(0, 1500, 5)] for g in range(4)}
    samples = [_sample(run, 1500 - s, g, values[g][s // 5]) for s in range(0, 1500, 5) for g in range(4)]
    batches = [samples[i : i + 100] for i in range(0, len(samples), 100)]
    shuffle.shuffle(batches)
    for batch in batches:
        store_gpu_samples(batch)
    kept = _streaks()
    streaks.rebuild([run.pk], NOW)
    assert _streaks() == kept
