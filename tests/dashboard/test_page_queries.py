"""Pages and API reads issue the same number of queries whatever the number of runs (issue 21).

Each page is rendered over a small workspace, then over one with four times the runs (finished,
failed and running, with telemetry rollups), and must cost the same queries both times: a
query per run or per row is how a page that takes 30 ms at 50 runs takes seconds at 100,000.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.choices import RunStatus
from runs.models import Attempt, FailureAnalysis, GpuHour, GpuMinute, Node, Run
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

PAGES = [
    "/",
    "/runs/",
    "/runs/?format=csv",
    "/runs/?status=failed",
    "/runs/fleet/",
    "/runs/advice/",
    "/runs/failures/",
    "/runs/postmortems/",
    "/costs/",
    "/api/v1/runs",
]


def _runs(world: World, start: int, count: int) -> list[Run]:
    runs = []
    for i in range(start, start + count):
        status = [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.RUNNING][i % 3]
        ended = None if status == RunStatus.RUNNING else T0 + timedelta(hours=1)
        run = make_run(world.vision, f"run-{i}", status=status, ended_at=ended)
        node = Node.objects.get(attempt__run=run)
        for minute in range(3):
            GpuMinute.objects.create(
                run=run, node=node, gpu_index=0, minute=T0 + timedelta(minutes=minute), samples=60,
                utilization_gpu_avg=90.0, utilization_gpu_max=99.0, utilization_gpu_min=80.0,
            )  # fmt: skip
        GpuHour.objects.create(run=run, node=node, gpu_index=0, hour=T0, samples=180, utilization_gpu_avg=90.0)
        if status == RunStatus.FAILED:
            # The failures overview reads stored verdicts and prices their failed attempts.
            FailureAnalysis.objects.create(
                run=run, class_id="cuda_oom", title="CUDA out of memory", attempt_number=1, failed_at=ended
            )
        runs.append(run)
    return runs


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
    assert response.status_code == 200, (url, response.status_code)
    return len(captured.captured_queries)


def test_every_page_costs_the_same_queries_at_four_times_the_runs(world: World) -> None:
    client = world.client_for(world.alice)
    _runs(world, 0, 6)
    small = {url: _queries(client, url) for url in PAGES}
    _runs(world, 6, 18)
    large = {url: _queries(client, url) for url in PAGES}
    assert large == small


def test_a_run_page_costs_the_same_queries_whatever_else_is_stored(world: World) -> None:
    client = world.client_for(world.alice)
    first = _runs(world, 0, 3)
    small = [_queries(client, f"/runs/{run.pk}/") for run in first]
    _runs(world, 3, 12)
    assert [_queries(client, f"/runs/{run.pk}/") for run in first] == small


def test_failures_overview_reads_the_stored_costs_in_the_same_queries(world: World, monkeypatch) -> None:
    """After a cost rollup pass the overview reads the failed runs' stored cost (no engine), and
    its queries still do not grow with the runs."""
    from billing.costs import failed, rollups

    client = world.client_for(world.alice)
    _runs(world, 0, 6)
    rollups.refresh_changed(timezone.now() + timedelta(minutes=5))
    engine = failed.breakdowns_for_runs
    monkeypatch.setattr(failed, "breakdowns_for_runs", lambda *a, **k: pytest.fail("priced by the engine"))
    small = _queries(client, "/runs/failures/")
    monkeypatch.setattr(failed, "breakdowns_for_runs", engine)
    _runs(world, 6, 18)
    rollups.refresh_changed(timezone.now() + timedelta(minutes=10))
    monkeypatch.setattr(failed, "breakdowns_for_runs", lambda *a, **k: pytest.fail("priced by the engine"))
    assert _queries(client, "/runs/failures/") == small


def test_spend_pages_after_a_pass_cost_the_same_queries(world: World) -> None:
    """After a cost rollup pass the overview and costs read the accrual baseline the pass stored,
    and price by the engine as of the pass a run retried since (it has no stored rows): with one
    such run each time, four times the runs cost the same queries."""
    from billing.costs import rollups

    def retried_since_the_pass(runs: list[Run]) -> None:
        done = next(run for run in runs if run.status == RunStatus.SUCCEEDED)
        Run.objects.filter(pk=done.pk).update(status=RunStatus.RUNNING, ended_at=None)
        Attempt.objects.create(run=done, number=2, status=RunStatus.RUNNING, started_at=timezone.now())

    client = world.client_for(world.alice)
    runs = _runs(world, 0, 6)
    rollups.refresh_changed(timezone.now() - timedelta(minutes=2))
    retried_since_the_pass(runs)
    small = {url: _queries(client, url) for url in ("/", "/costs/")}
    runs = _runs(world, 6, 18)
    rollups.refresh_changed(timezone.now() - timedelta(minutes=1))
    retried_since_the_pass(runs)
    assert {url: _queries(client, url) for url in ("/", "/costs/")} == small
