"""runs.telemetry.underuse: a run under AIRBOARD_UNDERUSED_PERCENT, and a GPU far below the others."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from runs.choices import RunStatus
from runs.models import Attempt, GpuHour, GpuMinute, Node, Run
from runs.telemetry import gpu_life
from runs.telemetry.underuse import GpuMean, lagging_gpus, underuse, underuse_of_runs
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(hours=2)


def running(world: World, name: str = "live-1", gpus: int = 8, started: timedelta = timedelta(hours=2)) -> Run:
    return make_run(world.vision, name, status=RunStatus.RUNNING, started_at=NOW - started, ended_at=None,
                    num_accelerators=gpus)  # fmt: skip


def minutes(run: Run, utils: dict[int, float], last: int = 30, first: int = 1, node: Node | None = None) -> None:
    """GPU -> utilization, one minute row each from `last` to `first` minutes before NOW."""
    node = node or Node.objects.filter(attempt__run=run).first()
    GpuMinute.objects.bulk_create(
        GpuMinute(run=run, node=node, gpu_index=g, minute=NOW - timedelta(minutes=m), samples=60,
                  utilization_gpu_avg=u)
        for g, u in utils.items() for m in range(first, last + 1)
    )  # fmt: skip


def test_lagging_gpu_is_named_against_the_other_gpus_of_the_run() -> None:
    means = [GpuMean(n, g, 78.0, 3600) for n in range(8) for g in range(8) if (n, g) != (5, 3)]
    means.append(GpuMean(5, 3, 15.0, 3600))
    [gpu] = lagging_gpus(means)
    assert gpu.message == "GPU 3 on node 5 averaged 15% while the other 63 averaged 78%"


@pytest.mark.parametrize(
    ("low", "others", "flagged"),
    [
        (15.0, 78.0, True),
        (30.0, 60.0, False),  # exactly half is not under half
        (39.0, 80.0, True),
        (60.0, 85.0, False),  # a slower rank, not an idle one
        (5.0, 11.0, False),  # an idle run: the run flag says it, not a GPU
        (0.0, 24.0, False),  # 24 points only
        (0.0, 25.0, True),
    ],
)
def test_far_below_needs_half_and_twenty_five_points(low: float, others: float, flagged: bool) -> None:
    means = [GpuMean(0, g, others, 60) for g in range(1, 8)] + [GpuMean(0, 0, low, 60)]
    assert bool(lagging_gpus(means)) is flagged


def test_a_single_gpu_run_has_nothing_to_lag_behind() -> None:
    assert lagging_gpus([GpuMean(0, 0, 0.0, 60)]) == []


@pytest.mark.django_db
def test_running_run_judged_on_its_last_thirty_minutes(world: World) -> None:
    busy_then_idle = running(world, "idle-now")
    minutes(busy_then_idle, dict.fromkeys(range(8), 95.0), last=90, first=31)  # before the window: not counted
    minutes(busy_then_idle, dict.fromkeys(range(8), 30.0))
    busy = running(world, "busy")
    minutes(busy, dict.fromkeys(range(8), 60.0))
    found = underuse_of_runs([busy_then_idle, busy], NOW)
    assert found[busy_then_idle.pk].under_used and found[busy_then_idle.pk].mean == pytest.approx(30.0)
    assert found[busy_then_idle.pk].message == "Under-used: its 8 GPUs averaged 30% over the last 30 minutes, under 40%"
    assert not found[busy.pk].flagged


@pytest.mark.django_db
def test_the_threshold_is_the_setting(world: World, settings) -> None:
    run = running(world)
    minutes(run, dict.fromkeys(range(8), 60.0))
    assert not underuse(run, NOW).under_used
    settings.AIRBOARD_UNDERUSED_PERCENT = 70
    assert underuse(run, NOW).under_used


@pytest.mark.django_db
def test_ended_run_judged_on_its_whole_life_by_samples(world: World) -> None:
    run = make_run(world.vision, "done")  # T0 to T0 + 1 h
    node = Node.objects.get(attempt__run=run)
    # Half an hour at 90% and a full hour at 10%: weighted by samples, 36.7%.
    GpuHour.objects.create(run=run, node=node, gpu_index=0, hour=T0, samples=1800, utilization_gpu_avg=90.0)
    GpuHour.objects.create(run=run, node=node, gpu_index=0, hour=T0 + timedelta(hours=1), samples=3600,
                           utilization_gpu_avg=10.0)  # fmt: skip
    # Hours written outside the ingest path get their GPUs' sums as the benchmark's COPY does.
    assert underuse(run, NOW) is None
    gpu_life.rebuild([run.pk])
    found = underuse(run, NOW)
    assert found.whole_life and found.mean == pytest.approx((90 * 1800 + 10 * 3600) / 5400)
    assert found.under_used and "over its whole life" in found.message


@pytest.mark.django_db
def test_young_or_silent_runs_are_not_judged(world: World) -> None:
    young = running(world, "young", started=timedelta(minutes=5))
    minutes(young, {0: 2.0}, last=4)
    silent = running(world, "silent")
    assert underuse_of_runs([young, silent], NOW) == {}


@pytest.mark.django_db
def test_one_idle_gpu_among_two_nodes_is_named(world: World) -> None:
    run = running(world, gpus=16)
    second = Node.objects.create(attempt=Attempt.objects.get(run=run), index=1, host="10.0.0.2", status=run.status)
    minutes(run, dict.fromkeys(range(8), 80.0))
    minutes(run, {g: (2.0 if g == 6 else 80.0) for g in range(8)}, node=second)
    found = underuse(run, NOW)
    assert not found.under_used and found.flagged
    assert [g.message for g in found.lagging] == ["GPU 6 on node 1 averaged 2% while the other 15 averaged 80%"]


@pytest.mark.django_db
def test_two_queries_whatever_the_runs(world: World, django_assert_num_queries) -> None:
    runs = [running(world, f"live-{i}") for i in range(5)] + [make_run(world.vision, f"done-{i}") for i in range(5)]
    for run in runs[:5]:
        minutes(run, dict.fromkeys(range(8), 50.0))
    with django_assert_num_queries(2), time_machine.travel(NOW, tick=False):
        underuse_of_runs(runs)


@pytest.mark.django_db
def test_run_page_overview_and_runs_table_show_the_flags(world: World) -> None:
    lagging = running(world, "one-idle")
    minutes(lagging, {g: (1.0 if g == 3 else 90.0) for g in range(8)})
    idle = running(world, "all-idle")
    minutes(idle, dict.fromkeys(range(8), 12.0))
    fine = running(world, "fine")
    minutes(fine, dict.fromkeys(range(8), 90.0))
    client = world.client_for(world.alice)
    with time_machine.travel(NOW, tick=False):
        page = client.get(f"/runs/{lagging.pk}/").content.decode()
        fine_page = client.get(f"/runs/{fine.pk}/").content.decode()
        overview = client.get("/").content.decode()
        table = client.get("/runs/").content.decode()
    assert 'id="underuse"' in page and "GPU 3 on node 0 averaged 1% while the other 7 averaged 90%" in page
    assert 'id="underuse"' not in fine_page
    for html in (overview, table):
        assert html.count("data-underuse") == 2
        assert "under-used</span>" in html and "1 GPU lagging</span>" in html
