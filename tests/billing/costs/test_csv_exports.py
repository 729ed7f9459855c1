"""`?format=csv` on every table: content type, header row, team scoping, and formula escaping."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from billing.models import PriceChange, UsagePolicy
from dashboard.kit.csv_export import STREAM_CHUNK_ROWS, cell, csv_response, csv_streaming_response
from runs.choices import RunStatus
from runs.models import Cluster, CollectorState, GpuSample, Node, Run
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(minutes=10)


def download(world: World, user: User, url: str, **params: str) -> list[dict[str, str]]:
    with time_machine.travel(NOW, tick=False):
        response = world.client_for(user).get(url, {"format": "csv", **params})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="')
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def page(world: World, user: User, url: str) -> str:
    with time_machine.travel(NOW, tick=False):
        return world.client_for(user).get(url).content.decode()


def running(team, external_id: str, **fields: object):
    """A running run with a minute of telemetry on GPU 0, up to NOW."""
    run = make_run(team, external_id, status=RunStatus.RUNNING, ended_at=None, **fields)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples(
        [GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=s), utilization_gpu=90.0)
         for s in range(0, 600, 5)]
    )  # fmt: skip
    return run


# --- The helper ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["=1+2", "+1", "-1+2", "@SUM(A1)", "\tx", '=HYPERLINK("http://evil")'])
def test_formula_leading_text_is_escaped(text: str) -> None:
    assert cell(text) == "'" + text


def test_plain_values_pass_through() -> None:
    assert cell("vision-train") == "vision-train" and cell(-3) == -3 and cell(None) == ""
    assert cell(Decimal("12.50")) == "12.5" and cell(Decimal("1E+1")) == "10"
    assert cell(T0) == "2026-11-02T09:00:00+00:00"
    # The fraction of a second as long as it needs (Databricks times are milliseconds).
    assert cell(T0 + timedelta(milliseconds=120)) == "2026-11-02T09:00:00.12+00:00"
    assert cell(T0 + timedelta(microseconds=7)) == "2026-11-02T09:00:00.000007+00:00"
    assert cell(datetime(2026, 1, 2, 3, 4, 5, 600_000)) == "2026-01-02T03:04:05.6"  # naive: no offset


def test_csv_response_writes_header_and_rows() -> None:
    response = csv_response('a"b.csv', ["name", "usd"], [["=cmd", Decimal("1.50")]])
    assert response["Content-Disposition"] == 'attachment; filename="a_b.csv"'
    assert response.content.decode().splitlines() == ["name,usd", "'=cmd,1.5"]


def test_streamed_csv_is_the_same_file_in_chunks() -> None:
    """csv_streaming_response writes what csv_response writes (cells, escaping, line ends), a
    chunk per STREAM_CHUNK_ROWS rows, so a long download starts before its last row is read."""
    rows = [[f"=run-{i}", i, -i, True, None, Decimal("2.50"), T0 + timedelta(seconds=i), "plain"] for i in range(2500)]
    header = ["name", "n", "neg", "flag", "none", "usd", "at", "text"]
    streamed = csv_streaming_response('r"uns.csv', header, iter(rows))
    chunks = list(streamed.streaming_content)
    assert len(chunks) == 2500 // STREAM_CHUNK_ROWS + 1
    assert b"".join(chunks) == csv_response('r"uns.csv', header, rows).content
    assert streamed["Content-Disposition"] == 'attachment; filename="r_uns.csv"'
    assert b"".join(chunks).decode().splitlines()[1] == f"'=run-0,0,0,true,,2.5,{cell(T0)},plain"


def test_run_list_times_are_the_stored_instants(world: World) -> None:
    """The run list's CSV (COPY on PostgreSQL, the Python writer on SQLite): the cells
    are the stored instants to the microsecond, as `cell()` writes the ORM's datetimes, and the
    duration of a running run counts up to the download."""
    started = T0 + timedelta(seconds=1, microseconds=806124)
    make_run(world.vision, "done", submitted_at=T0 - timedelta(microseconds=1), started_at=started,
             ended_at=started + timedelta(hours=2, microseconds=999_999))  # fmt: skip
    make_run(world.vision, "running", status=RunStatus.RUNNING, started_at=started, ended_at=None)
    with time_machine.travel(NOW, tick=False):
        response = world.client_for(world.alice).get("/runs/", {"format": "csv"})
        body = b"".join(response.streaming_content).decode()
    rows = {r["external_id"]: r for r in csv.DictReader(io.StringIO(body))}
    done = Run.objects.get(external_id="done")
    assert rows["done"]["submitted_at"] == cell(done.submitted_at) == (T0 - timedelta(microseconds=1)).isoformat()
    assert rows["done"]["started_at"] == cell(done.started_at) == started.isoformat()
    assert started.isoformat().endswith(".806124+00:00")
    assert rows["done"]["ended_at"] == cell(done.ended_at) and rows["done"]["duration_seconds"] == "7200"
    assert rows["running"]["ended_at"] == "" and rows["running"]["duration_seconds"] == str(10 * 60 - 2)


# --- Overview -----------------------------------------------------------------------------------


def test_overview_active_runs(world: World) -> None:
    make_run(world.vision, "vision-active", status=RunStatus.RUNNING, ended_at=None, experiment_name="=evil()")
    make_run(world.nlp, "nlp-active", status=RunStatus.RUNNING, ended_at=None)
    assert "format=csv&amp;table=active" in page(world, world.alice, "/")
    rows = download(world, world.alice, "/", table="active")
    assert [r["external_id"] for r in rows] == ["vision-active"]
    assert rows[0]["team"] == "vision" and rows[0]["experiment_name"] == "'=evil()"
    assert list(rows[0])[:4] == ["external_id", "team", "experiment_name", "status"]


def test_overview_failures(world: World) -> None:
    make_run(world.vision, "vision-failed", status=RunStatus.FAILED, ended_at=T0 + timedelta(minutes=5))
    make_run(world.nlp, "nlp-failed", status=RunStatus.FAILED, ended_at=T0 + timedelta(minutes=5))
    make_run(world.vision, "vision-ok")
    rows = download(world, world.alice, "/", table="failures")
    assert [r["external_id"] for r in rows] == ["vision-failed"]
    assert {r["external_id"] for r in download(world, world.charlie, "/", table="failures")} == {"nlp-failed"}


def test_overview_spend_by_team(world: World) -> None:
    assert "table=spend" in page(world, world.alice, "/")
    rows = download(world, world.alice, "/", table="spend")
    assert list(rows[0]) == [
        "team", "gpu_hours", "usd", "compute_usd", "egress_usd", "figure", "billed_usd", "billed_figure"
    ]  # fmt: skip
    assert [r["team"] for r in rows] == ["vision"]
    assert rows[0]["billed_usd"] == ""  # no usage records imported
    assert sorted(r["team"] for r in download(world, world.sam, "/", table="spend")) == ["nlp", "vision"]


# --- Fleet, collectors --------------------------------------------------------------------------


def test_fleet_live_gpus(world: World) -> None:
    running(world.vision, "vision-train")
    running(world.nlp, "nlp-train")
    assert "format=csv" in page(world, world.alice, "/runs/fleet/")
    rows = download(world, world.alice, "/runs/fleet/")
    assert list(rows[0])[:3] == ["team", "run", "accelerator_type"]
    assert [(r["run"], r["gpu_index"], r["utilization_avg"]) for r in rows] == [("vision-train", "0", "90.0")]


def test_collectors_health(world: World) -> None:
    CollectorState.objects.create(name="mlflow", kind="mlflow", last_error="@import failed", items_total=7)
    assert "format=csv" in page(world, world.alice, "/collectors/")
    rows = download(world, world.alice, "/collectors/")
    assert list(rows[0])[:3] == ["name", "kind", "stale"]
    assert rows[0]["name"] == "mlflow" and rows[0]["items_total"] == "7"
    # The error's text is staff's to read (it may name other teams' runs); members see that it failed.
    assert rows[0]["last_error"] == "failed (the error is shown to staff)"
    assert download(world, world.sam, "/collectors/")[0]["last_error"] == "'@import failed"


# --- Billing ------------------------------------------------------------------------------------


def test_policy_list(world: World) -> None:
    vision = UsagePolicy.objects.create(name="vision-budget", budget_usd="1000")
    vision.teams.add(world.vision)
    nlp = UsagePolicy.objects.create(name="nlp-budget", budget_usd="500")
    nlp.teams.add(world.nlp)
    assert "format=csv" in page(world, world.alice, "/costs/policies/")
    rows = download(world, world.alice, "/costs/policies/")
    assert list(rows[0])[:3] == ["name", "teams", "period_start"]
    assert [(r["name"], r["teams"], r["budget_usd"]) for r in rows] == [("vision-budget", "vision", "1000")]
    assert [r["name"] for r in download(world, world.sam, "/costs/policies/")] == ["nlp-budget", "vision-budget"]


def test_price_history(world: World) -> None:
    PriceChange.objects.create(
        model="AcceleratorPrice", object_id=1, field="usd_per_hour", old="9.5", new="-1", at=timezone.now(),
        user=world.sam,
    )  # fmt: skip
    assert "format=csv" in page(world, world.alice, "/costs/prices/history/")
    rows = download(world, world.alice, "/costs/prices/history/")
    assert list(rows[0]) == ["at", "user", "model", "object_id", "field", "old", "new", "note"]
    assert rows[0]["user"] == "sam" and rows[0]["old"] == "9.5" and rows[0]["new"] == "'-1"


# --- Clusters and advice ------------------------------------------------------------------------


def clusters(world: World) -> None:
    for team, cluster_id in [(world.vision, "vision-cluster"), (world.nlp, "nlp-cluster")]:
        Cluster.objects.create(
            team=team, cluster_id=cluster_id, name=cluster_id, node_type_id="g5.xlarge",
            driver_node_type_id="g5.xlarge", spark_version="15.4.x-gpu-ml-scala2.12", runtime_engine="PHOTON",
            region="us-west-2", start_time=T0,
        )  # fmt: skip


def test_clusters(world: World) -> None:
    clusters(world)
    body = page(world, world.alice, "/runs/clusters/")
    assert "table=clusters" in body and "table=teams" in body
    rows = download(world, world.alice, "/runs/clusters/", table="clusters")
    assert list(rows[0])[:3] == ["cluster_id", "name", "team"]
    assert [(r["cluster_id"], r["team"]) for r in rows] == [("vision-cluster", "vision")]
    teams = download(world, world.alice, "/runs/clusters/", table="teams")
    assert [(r["team"], r["clusters"]) for r in teams] == [("vision", "1")]


def test_advice_findings(world: World) -> None:
    clusters(world)
    assert "format=csv" in page(world, world.alice, "/runs/advice/")
    rows = download(world, world.alice, "/runs/advice/")
    assert list(rows[0]) == ["rule", "subject_type", "subject_id", "subject", "team", "why", "fix"]
    assert ("photon_on_gpu", "vision-cluster") in {(r["rule"], r["subject"]) for r in rows}
    assert {r["team"] for r in rows} == {"vision"}
    assert "nlp-cluster" not in {r["subject"] for r in rows}


def test_cost_page_csv_escapes_formulas_too(world: World) -> None:
    """The cost page's exports go through the same helper (billing/views.py csv_response)."""
    assert cell("=1") == "'=1"
    response = world.client_for(world.alice).get("/costs/", {"format": "csv", "table": "experiments"})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
