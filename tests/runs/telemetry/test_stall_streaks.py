"""runs.telemetry.streaks: ingest keeps each GPU's stall streaks, in order, late or re-sent alike."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.choices import RunStatus, StallKind
from runs.models import GpuSample, GpuStreak, Node, Run
from runs.telemetry import streaks
from runs.telemetry.stalls import gpu_stalls, stalls_of_runs
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(minutes=30)
HUNG = {"utilization_gpu": 100.0, "sm_active": 1.0}
BUSY = {"utilization_gpu": 100.0, "sm_active": 80.0}


def running(world: World, name: str = "live-1") -> Run:
    return make_run(world.vision, name, status=RunStatus.RUNNING, ended_at=None)


def sample(run: Run, seconds_before_now: int, gpu: int = 0, **values: object) -> GpuSample:
    node = Node.objects.get(attempt__run=run)
    return GpuSample(run=run, node=node, gpu_index=gpu, ts=NOW - timedelta(seconds=seconds_before_now), **values)


def test_batches_in_order_fold_into_one_streak(world: World) -> None:
    run = running(world)
    store_gpu_samples([sample(run, s, **BUSY) for s in range(1500, 1200, -10)])
    store_gpu_samples([sample(run, s, **HUNG) for s in range(1200, 600, -10)])
    store_gpu_samples([sample(run, s, **HUNG) for s in range(600, -1, -10)])
    row = GpuStreak.objects.get(run=run)
    assert row.last_ts == NOW and row.hung_since == NOW - timedelta(seconds=1200) and row.no_process_since is None
    [stall] = gpu_stalls(run, NOW)
    assert stall.kind == StallKind.HUNG and stall.minutes == 20


def test_a_late_unflagged_sample_splits_the_streak(world: World) -> None:
    run = running(world)
    store_gpu_samples([sample(run, s, **HUNG) for s in range(1200, -1, -10)])
    assert gpu_stalls(run, NOW)
    # A sample from 5 minutes ago, delayed: the GPU did work then, so the stall is 5 minutes old.
    store_gpu_samples([sample(run, 305, **BUSY)])
    assert GpuStreak.objects.get(run=run).hung_since == NOW - timedelta(seconds=300)
    assert gpu_stalls(run, NOW) == []


def test_a_late_flagged_sample_extends_the_streak_and_a_resend_changes_nothing(world: World) -> None:
    run = running(world)
    store_gpu_samples([sample(run, s, **BUSY) for s in range(1500, 900, -10)])
    store_gpu_samples([sample(run, s, **HUNG) for s in range(800, -1, -10)])
    assert GpuStreak.objects.get(run=run).hung_since == NOW - timedelta(seconds=800)
    store_gpu_samples([sample(run, s, **HUNG) for s in range(890, 800, -10)])  # the delayed batch between
    assert GpuStreak.objects.get(run=run).hung_since == NOW - timedelta(seconds=890)
    before = list(GpuStreak.objects.values())
    store_gpu_samples([sample(run, s, **HUNG) for s in range(890, 800, -10)])
    assert list(GpuStreak.objects.values()) == before


def test_process_less_and_hung_are_kept_apart(world: World) -> None:
    run = running(world)
    store_gpu_samples([sample(run, s, gpu=1, utilization_gpu=0.0, processes=[]) for s in range(900, -1, -60)])
    store_gpu_samples([sample(run, s, gpu=2, utilization_gpu=0.0, processes=None) for s in range(900, -1, -60)])
    rows = {r.gpu_index: r for r in GpuStreak.objects.filter(run=run)}
    assert rows[1].no_process_since == NOW - timedelta(seconds=900) and rows[1].hung_since is None
    assert rows[2].no_process_since is None  # not collected: unknown, not idle


def test_rebuild_matches_what_ingest_kept(world: World) -> None:
    run = running(world)
    store_gpu_samples([sample(run, s, gpu=g, **(HUNG if g else BUSY)) for g in range(4) for s in range(1500, -1, -5)])
    kept = sorted(GpuStreak.objects.values_list("gpu_index", "last_ts", "hung_since", "no_process_since"))
    assert streaks.rebuild([run.pk], NOW) == 4
    assert sorted(GpuStreak.objects.values_list("gpu_index", "last_ts", "hung_since", "no_process_since")) == kept


def test_reading_stalls_costs_one_query_whatever_the_samples(world: World) -> None:
    runs = [running(world, f"live-{i}") for i in range(3)]
    store_gpu_samples([sample(run, s, gpu=g, **HUNG) for run in runs for g in range(8) for s in range(900, -1, -60)])
    with CaptureQueriesContext(connection) as few:
        found = stalls_of_runs(runs, NOW)
    # An hour more of samples behind the same GPUs, ten times denser.
    store_gpu_samples([sample(run, s, gpu=g, **HUNG) for run in runs for g in range(8) for s in range(4500, 900, -6)])
    with CaptureQueriesContext(connection) as many:
        longer = stalls_of_runs(runs, NOW)
    assert [len(found[r.pk]) for r in runs] == [len(longer[r.pk]) for r in runs] == [8, 8, 8]
    assert {g.minutes for stalls in found.values() for g in stalls} == {15}
    assert {g.minutes for stalls in longer.values() for g in stalls} == {60}  # capped at LOOKBACK
    assert len(few.captured_queries) == len(many.captured_queries) == 1
    assert "gpusample" not in many.captured_queries[0]["sql"].lower()


def test_rebuild_command_restores_running_runs_streaks(world: World) -> None:
    run = running(world)
    store_gpu_samples([sample(run, s, **HUNG) for s in range(900, -1, -30)])
    kept = list(GpuStreak.objects.values_list("hung_since", "last_ts"))
    GpuStreak.objects.all().delete()  # as after the upgrade that added the table
    out = StringIO()
    with time_machine.travel(NOW, tick=False):
        call_command("rebuild_stall_streaks", stdout=out)
    assert "1 GPUs in 1 runs" in out.getvalue()
    assert list(GpuStreak.objects.values_list("hung_since", "last_ts")) == kept
