"""The failure page, live log tail, cross-log search and failures overview: content and scoping."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest

from billing.models import AcceleratorPrice
from runs.choices import AcceleratorType, RunStatus
from runs.failures.classify_pass import classify_run
from runs.models import Attempt, GpuSample, Node, Run
from tests.conftest import T0, World, make_run
from tests.runs.failures.test_postmortem import NCCL_WATCHDOG, OOM, add_log, failed_run

pytestmark = pytest.mark.django_db


def price() -> None:
    AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=T0 - timedelta(days=400),
        usd_per_hour="10", kind="list", source="test",
    )  # fmt: skip


def oom_run(world: World, external_id: str = "failed-1", team=None, **fields: object) -> Run:
    run = make_run(team or world.vision, external_id, status=RunStatus.FAILED, **fields)
    Node.objects.filter(attempt__run=run).delete()
    body = "".join(f"2026-11-02T09:{m:02d}:00Z step {m}\n" for m in range(40))
    add_log(run, 1, 0, body + f"2026-11-02T09:40:00Z {OOM}\n" + "after 1\nafter 2\n")
    add_log(run, 1, 1, NCCL_WATCHDOG.format(rank=1) + "\n")
    node = Node.objects.get(attempt__run=run, index=0)
    GpuSample.objects.create(run=run, node=node, gpu_index=0, ts=T0 + timedelta(minutes=35), utilization_gpu=97)
    classify_run(run)
    return run


def test_failure_page_content(world: World) -> None:
    price()
    run = oom_run(world)
    other = oom_run(world, "failed-2")
    body = world.client_for(world.alice).get(f"/runs/{run.pk}/failure/").content.decode()
    assert "GPU out of memory" in body and "cuda_oom" in body
    assert f"/runs/{run.pk}/?attempt=1&amp;node=0#L41" in body  # jump to the evidence line
    assert "step 11" in body and "step 10\n" not in body  # ±30 lines around line 41
    assert "<mark>2026-11-02T09:40:00Z torch.OutOfMemoryError" in body
    assert "fig-timeline" in body and "fig-pm-utilization" in body and '"shapes"' in body
    assert "$80.00" in body  # one failed attempt: 1 h x 8 accelerators x $10
    assert other.external_id in body  # similar failure, same class and team


def test_failure_page_is_team_scoped(world: World) -> None:
    run = oom_run(world)
    assert world.client_for(world.charlie).get(f"/runs/{run.pk}/failure/").status_code == 404
    assert world.client_for(world.sam).get(f"/runs/{run.pk}/failure/").status_code == 200


def test_similar_failures_stay_in_the_users_teams(world: World) -> None:
    # Same class and experiment in another team: listed for a user of both teams, never for
    # a user of one (the scope is on the joined run's team, not a subquery of visible runs).
    run = oom_run(world)
    mine = oom_run(world, "failed-mine", experiment_name="/Workspace/Users/alice/other")
    theirs = oom_run(world, "failed-theirs", team=world.nlp)  # same experiment name as `run`
    body = world.client_for(world.alice).get(f"/runs/{run.pk}/failure/").content.decode()
    assert mine.external_id in body and theirs.external_id not in body
    world.bob.groups.add(world.nlp)
    body = world.client_for(world.bob).get(f"/runs/{run.pk}/failure/").content.decode()
    assert mine.external_id in body and theirs.external_id in body
    body = world.client_for(world.charlie).get(f"/runs/{theirs.pk}/failure/").content.decode()
    assert run.external_id not in body and mine.external_id not in body


def test_run_page_links_failure_and_postmortem(world: World) -> None:
    run = oom_run(world)
    body = world.client_for(world.alice).get(f"/runs/{run.pk}/").content.decode()
    assert "Root cause: GPU out of memory" in body
    assert f"/runs/{run.pk}/failure/" in body and f"/runs/{run.pk}/postmortem/new/" in body


def test_tail_returns_only_new_complete_lines(world: World) -> None:
    run = make_run(world.vision, "live", status=RunStatus.RUNNING, ended_at=None)
    node = Node.objects.get(attempt__run=run)
    from runs.models import LogChunk

    LogChunk.objects.create(node=node, seq=0, text="one\ntwo\nthr", line_count=3)
    client = world.client_for(world.alice)
    url = f"/runs/{run.pk}/log/tail.json?attempt=1&node=0"
    first = client.get(url + "&after=0").json()
    assert [line["n"] for line in first["lines"]] == [1, 2] and first["last"] == 2 and first["active"]
    LogChunk.objects.create(node=node, seq=1, text="ee\nfour\n", line_count=2)
    second = client.get(url + f"&after={first['last']}").json()
    assert [(line["n"], line["text"]) for line in second["lines"]] == [(3, "three"), (4, "four")]
    assert client.get(url + "&after=4").json()["lines"] == []
    assert client.get(url + "&after=x").status_code == 400
    assert client.get(f"/runs/{run.pk}/log/tail.json?attempt=9&node=0").status_code == 404
    assert world.client_for(world.charlie).get(url + "&after=0").status_code == 404


def test_search_across_attempts_and_nodes(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, "ok\nNCCL error here\n")
    add_log(run, 1, 2, "nccl ERROR again\n")
    add_log(run, 2, 0, "fine\nfine\nNCCL Error third\n")
    client = world.client_for(world.alice)
    body = client.get(f"/runs/{run.pk}/search/?q=nccl error").content.decode()
    assert "3 matching lines" in body
    for attempt, node, line in ((1, 0, 2), (1, 2, 1), (2, 0, 3)):
        assert f"?attempt={attempt}&amp;node={node}#L{line}" in body
    assert world.client_for(world.charlie).get(f"/runs/{run.pk}/search/?q=nccl").status_code == 404


def test_failures_overview_numbers_and_csv(world: World) -> None:
    price()
    oom_run(world, "f-1")
    oom_run(world, "f-2")
    retried = make_run(world.vision, "f-3", status=RunStatus.FAILED, max_retries=1)
    Attempt.objects.filter(run=retried).update(status=RunStatus.FAILED)
    Attempt.objects.create(
        run=retried, number=2, status=RunStatus.FAILED, started_at=T0 + timedelta(hours=2),
        ended_at=T0 + timedelta(hours=2, minutes=30), exit_code=137,
    )  # fmt: skip
    classify_run(retried)
    oom_run(world, "nlp-f", team=world.nlp)
    client = world.client_for(world.alice)

    body = client.get("/runs/failures/").content.decode()
    assert "nlp-f" not in body
    assert "$280.00" in body  # (1 h + 1 h + 1 h + 0.5 h) x 8 accelerators x $10

    response = client.get("/runs/failures/?format=csv")
    assert response["Content-Disposition"] == 'attachment; filename="failures.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    by_class = {r["class"]: r for r in rows}
    assert by_class["cuda_oom"]["failed_runs"] == "2" and by_class["cuda_oom"]["team"] == "vision"
    assert by_class["host_oom"]["failed_runs"] == "1"
    assert by_class["cuda_oom"]["week"] == "2026-11-02"

    only_oom = client.get("/runs/failures/?format=csv&failure_class=host_oom").content.decode()
    assert "cuda_oom" not in only_oom and "host_oom" in only_oom
    later = client.get("/runs/failures/?format=csv&start=2026-11-10").content.decode()
    assert later.strip().count("\n") == 0  # header only
    staff = world.client_for(world.sam).get("/runs/failures/?format=csv").content.decode()
    assert "nlp" in staff


def test_overview_weeks_start_on_monday_utc_as_week_of(world: World) -> None:
    """The database's week (failure_stats) is `week_of` of the failure time, or of the
    classification time when the failure time is unknown, at the Sunday/Monday edge too."""
    from datetime import UTC, datetime

    from runs.failures import stats
    from runs.models import FailureAnalysis

    monday = datetime(2026, 11, 2, tzinfo=UTC)
    times = [monday - timedelta(seconds=1), monday, monday + timedelta(days=6, hours=23, minutes=59), None]
    for i, at in enumerate(times):
        run = make_run(world.vision, f"w-{i}", status=RunStatus.FAILED)
        verdict = FailureAnalysis.objects.create(run=run, class_id="cuda_oom", title="OOM", failed_at=at)
        if at is None:
            FailureAnalysis.objects.filter(pk=verdict.pk).update(classified_at=monday - timedelta(days=3))
    expected = {stats.week_of(t or monday - timedelta(days=3)) for t in times}
    result = stats.failure_stats(stats.failures_for(world.alice))
    assert {row.week: row.failures for row in result.rows} == {
        stats.week_of(monday - timedelta(seconds=1)): 2, stats.week_of(monday): 2,
    }  # fmt: skip
    assert {row.week for row in result.rows} == expected == {monday.date() - timedelta(days=7), monday.date()}
