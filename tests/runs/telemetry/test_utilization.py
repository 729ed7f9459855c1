"""runs/telemetry/utilization.py: a run's RunUtilization equals the aggregate of its minute rollups.

The summary is kept by the rollup path (refresh_minutes) and by retention; every test compares
it with the mean computed from the stored GpuMinute rows, as advice computed it before
(`Avg("utilization_gpu_avg")`, `Count`), after each way minutes change.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.db.models import Avg, Count

from runs.clusters.advice import findings_for
from runs.models import GpuMinute, GpuSample, Node, Run, RunUtilization
from runs.telemetry import utilization
from runs.telemetry.retention import prune_raw_samples
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def samples(run: Run, node: Node, seconds: range, value, gpus: int = 2) -> list[GpuSample]:
    return [
        GpuSample(run=run, node=node, gpu_index=g, ts=T0 + timedelta(seconds=s), utilization_gpu=value(g, s))
        for g in range(gpus)
        for s in seconds
    ]


def from_minutes(run: Run) -> tuple[int, float | None]:
    """(GPU-minutes, mean utilization) as advice averaged the minute rollups before the summary."""
    found = GpuMinute.objects.filter(run=run, utilization_gpu_avg__isnull=False).aggregate(
        n=Count("id"), mean=Avg("utilization_gpu_avg")
    )
    return found["n"], found["mean"]


def assert_summary_matches(run: Run) -> None:
    summary = RunUtilization.objects.filter(run=run).first()
    n, mean = from_minutes(run)
    if n == 0:
        assert summary is None or summary.gpu_minutes == 0
        return
    assert summary.gpu_minutes == n
    assert summary.mean == pytest.approx(mean, abs=1e-6)
    # Exact: the integer sum of the stored minutes' means in millionths of a percent.
    values = GpuMinute.objects.filter(run=run, utilization_gpu_avg__isnull=False).values_list(
        "utilization_gpu_avg", flat=True
    )
    assert summary.utilization_sum == sum(math.floor(v * 1_000_000 + 0.5) for v in values)


def test_ingest_keeps_the_summary_equal_to_the_minutes(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    # Utilization as NVML reports it (whole percent), varying within each minute: means like 33.35.
    store_gpu_samples(samples(run, node, range(0, 150), lambda g, s: float((s * 7 + g * 13) % 101)))
    assert from_minutes(run)[0] == 6  # 2 GPUs x 3 minutes (the third one half full)
    assert_summary_matches(run)

    # The rest of the third minute arrives later: its rollup is rewritten, not counted twice.
    store_gpu_samples(samples(run, node, range(150, 180), lambda g, s: 100.0))
    assert from_minutes(run)[0] == 6
    assert_summary_matches(run)

    # Re-sending a batch changes nothing.
    before = RunUtilization.objects.get(run=run)
    store_gpu_samples(samples(run, node, range(0, 180), lambda g, s: 1.0))
    after = RunUtilization.objects.get(run=run)
    assert (after.gpu_minutes, after.utilization_sum) == (before.gpu_minutes, before.utilization_sum)
    assert_summary_matches(run)


def test_minutes_without_utilization_are_not_counted(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    # GPU 1 never reports utilization (a field NVML lacks is stored as NULL, never zero).
    store_gpu_samples(samples(run, node, range(0, 120), lambda g, s: 40.0 if g == 0 else None))
    assert RunUtilization.objects.get(run=run).gpu_minutes == 2
    assert_summary_matches(run)


def test_pruned_minutes_leave_the_summary(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_MINUTE_DAYS = 30
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples(samples(run, node, range(0, 600), lambda g, s: float(s % 97)))
    assert_summary_matches(run)
    # The minute cutoff falls at T0 + 5 minutes: half the minutes go.
    result = prune_raw_samples(now=T0 + timedelta(days=30, minutes=5))
    assert result.minutes_deleted == 10
    assert from_minutes(run)[0] == 10
    assert_summary_matches(run)


def test_rebuild_recomputes_minutes_written_elsewhere(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples(samples(run, node, range(0, 120), lambda g, s: 55.5))
    # Minutes written outside the rollup path (a seed, a COPY, a repair by hand), and one deleted.
    GpuMinute.objects.bulk_create(
        GpuMinute(run=run, node=node, gpu_index=0, minute=T0 + timedelta(minutes=m), utilization_gpu_avg=12.25)
        for m in range(10, 20)
    )
    GpuMinute.objects.filter(run=run, minute=T0, gpu_index=1).delete()
    assert RunUtilization.objects.get(run=run).gpu_minutes == 4
    assert utilization.rebuild([run.pk]) == 1
    assert_summary_matches(run)
    # With every minute gone, rebuilding all runs zeroes it.
    GpuMinute.objects.filter(run=run).delete()
    utilization.rebuild()
    assert RunUtilization.objects.get(run=run).gpu_minutes == 0


def test_advice_reads_the_summary(world: World) -> None:
    """The low-utilization finding from ingested telemetry, its mean the minutes' mean."""
    low = make_run(world.vision, "low")
    node = Node.objects.get(attempt__run=low)
    store_gpu_samples(samples(low, node, range(0, 12 * 60), lambda g, s: float(s % 41), gpus=8))
    n, mean = from_minutes(low)
    assert n == 96 and mean < 40
    found = findings_for([low], [], now=T0 + timedelta(hours=1))
    assert [f.rule for f in found] == ["low_util_multi_gpu"]
    assert f"Mean GPU utilization was {mean:.0f}% over 8 GPUs" in found[0].why
