"""A hostile second look at issues 14-19 as merged: each test is one finding that failed before its fix.

Tried as a member of team nlp (charlie, or an ingest key of nlp) against team vision's runs,
and as any caller sending bad input: a 500 where a clear 4xx belongs, or another team's run
shown on a page that the user may open.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from mlflow import MlflowClient
from mlflow.entities import Metric

from billing.choices import EnforcementKind, EnforcementOutcome
from billing.models import AcceleratorPrice, PolicyAction, UsagePolicy
from dashboard.models import ApiKeyRole
from runs.choices import AcceleratorType, RunOrigin, RunStatus
from runs.failures.postmortem import classify_run
from runs.models import GpuSample, MetricPoint
from tests.conftest import T0, World, make_run, serverless_api
from tests.mlflow_server import MlflowServer, mlflow_server  # noqa: F401 (fixture)


def _quiet(client: Client) -> Client:
    """Answer as a server would (a 500 page), not by raising into the test."""
    client.raise_request_exception = False
    return client


# Bad input answers a 4xx, never a 500 ------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "2024-13-01T00:00",  # well formed, no such month: parse_datetime raises ValueError
        "0001-01-01T00:00+05:00",  # before date.min once in UTC: OverflowError in the query
        "9999-12-31T23:59-05:00",  # after date.max once in UTC
    ],
)
def test_the_run_lists_submitted_after_answers_422_for_a_time_it_cannot_use(world: World, value: str) -> None:
    client = _quiet(world.api(world.vision, ApiKeyRole.READ))
    response = client.get("/api/v1/runs", {"submitted_after": value})
    assert response.status_code == 422, response.content[:200]
    assert "submitted_after" in json.dumps(response.json()["errors"])


@pytest.mark.parametrize("value", ["2026-11-02T08:00:00Z", "2026-11-02T08:00", "2026-11-02 08:00", "2026-11-02"])
def test_the_run_lists_submitted_after_still_takes_the_iso_times_it_took(world: World, value: str) -> None:
    make_run(world.vision, "new", submitted_at=T0)
    make_run(world.vision, "old", submitted_at=T0 - timedelta(days=2))
    response = world.api(world.vision, ApiKeyRole.READ).get("/api/v1/runs", {"submitted_after": value})
    assert [r["external_id"] for r in response.json()["results"]] == ["new"]


def test_the_telemetry_endpoint_answers_400_for_times_at_year_one(world: World) -> None:
    run = make_run(world.vision, "a-1")
    client = _quiet(world.client_for(world.alice))
    response = client.get(f"/runs/{run.pk}/telemetry.json", {"from": "0001-01-01T00:00", "to": "0001-01-01T00:01"})
    assert response.status_code == 400, response.content[:200]


@pytest.mark.parametrize(
    "url",
    [
        "/runs/?submitted_to=9999-12-31",
        "/runs/?format=csv&submitted_to=9999-12-31",
        "/runs/failures/?end=9999-12-31",
        "/runs/failures/?format=csv&end=9999-12-31",
        "/costs/?end=9999-12-31",
        "/costs/?start=0001-01-01&end=9999-12-31",
        "/costs/?format=csv&table=egress&end=9999-12-31",
    ],
)
def test_date_filters_at_the_calendar_edges_are_form_errors_not_500s(world: World, url: str) -> None:
    make_run(world.vision, "a-1")
    response = _quiet(world.client_for(world.alice)).get(url)
    assert response.status_code == 200, url


def test_a_lone_surrogate_in_parameters_is_a_422_not_a_run_page_that_500s(world: World) -> None:
    """JSON's "\\ud800" decodes to a str UTF-8 cannot encode: stored, it made the run page a 500 for good."""
    client = _quiet(world.api(world.vision))
    for external_id, parameters in (("s-1", {"k": "\ud800"}), ("s-2", {"\udcff": 1})):
        body = json.dumps({"external_id": external_id, "parameters": parameters})
        response = client.post("/api/v1/runs", body, content_type="application/json")
        assert response.status_code == 422, response.content[:200]
        assert response.json()["errors"][0]["field"].startswith("parameters")
    assert not world.vision.runs.exists()


# Another team's runs never show through something shared -------------------------------------


def test_a_shared_policy_does_not_show_another_teams_runs(world: World) -> None:
    """A budget shared by vision and nlp: nlp's members see the policy, not vision's runs it acted on."""
    policy = UsagePolicy.objects.create(name="shared-gpu-budget", budget_usd="1000")
    policy.teams.add(world.vision, world.nlp)
    secret_run = make_run(world.vision, "vision-secret-run-77")
    PolicyAction.objects.create(
        policy=policy, run=secret_run, kind=EnforcementKind.BUDGET_CANCEL, outcome=EnforcementOutcome.DONE,
        method="command", output_tail="cancelled vision-secret-run-77", at=timezone.now(),
    )  # fmt: skip
    own_run = make_run(world.nlp, "nlp-run-5")
    PolicyAction.objects.create(
        policy=policy, run=own_run, kind=EnforcementKind.BUDGET_CANCEL, outcome=EnforcementOutcome.DONE,
        method="command", output_tail="cancelled nlp-run-5", at=timezone.now(),
    )  # fmt: skip
    charlie = world.client_for(world.charlie)
    page = charlie.get(f"/costs/policies/{policy.pk}/").content.decode()
    assert "nlp-run-5" in page
    assert "vision-secret-run-77" not in page
    text = charlie.get(f"/costs/policies/{policy.pk}/", {"format": "csv", "table": "actions"}).content.decode()
    runs = [row["run"] for row in csv.DictReader(io.StringIO(text))]
    assert runs == ["nlp-run-5"]
    # vision's own members still see it.
    alice_page = world.client_for(world.alice).get(f"/costs/policies/{policy.pk}/").content.decode()
    assert "vision-secret-run-77" in alice_page


# One number: cents are rounded in one place (billing.prices.money.to_cents) --------------------------


def test_a_half_cent_shows_the_same_cents_on_the_failure_page_its_csv_and_the_post_mortem(world: World) -> None:
    """$0.125 of failed attempts: pages round half up (money.to_cents) to $0.13; the failures CSV
    ('0.12', f"{:.2f}" is half-even) and the drafted post-mortem ('$0.12') said otherwise."""
    AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=T0 - timedelta(days=400),
        usd_per_hour="0.015625", kind="list", source="test",
    )  # fmt: skip
    run = make_run(world.vision, "half-cent", status=RunStatus.FAILED)  # 8 accelerators x 1 h x $0.015625
    classify_run(run)
    alice = world.client_for(world.alice)
    assert "$0.13" in alice.get(f"/runs/{run.pk}/failure/").content.decode()
    assert "$0.13" in alice.get("/runs/failures/").content.decode()
    text = alice.get("/runs/failures/", {"format": "csv"}).content.decode()
    (row,) = csv.DictReader(io.StringIO(text))
    assert Decimal(row["failed_cost_usd"]) in (Decimal("0.125"), Decimal("0.13"))
    draft = alice.get(f"/runs/{run.pk}/postmortem/new/").content.decode()
    assert "$0.13" in draft and "$0.12" not in draft


# A team's MLflow runs never write into another team's run ------------------------------------


@pytest.fixture
def experiment(mlflow_server: MlflowServer, settings) -> tuple[MlflowClient, str]:  # noqa: F811
    """A fresh experiment on a real `mlflow server`, and the MLflow collector pointed at it."""
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    name = f"exp-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name)
    settings.AIRBOARD_MLFLOW_TRACKING_URI = mlflow_server.uri
    settings.AIRBOARD_MLFLOW_EXPERIMENTS = [name]
    return client, experiment_id


def test_another_teams_mlflow_run_tagged_with_our_run_id_writes_nothing_into_it(
    world: World, experiment: tuple[MlflowClient, str]
) -> None:
    """charlie (nlp) tags an MLflow run with vision's run id and logs idle GPUs and network traffic:
    vision's run (the run source collector's) would get his metrics, GPU samples and so its idle cost."""
    client, experiment_id = experiment
    vision_run = make_run(world.vision, "1001", origin=RunOrigin.COLLECTOR)
    t0_ms = int(T0.timestamp() * 1000)
    tags = {"airboard.run_id": "1001", "mlflow.user": "charlie@example.com"}
    hostile = client.create_run(experiment_id, start_time=t0_ms, tags=tags).info.run_id
    idle_gpu = [Metric("system/gpu_0_utilization_percentage", 0.0, t0_ms + i * 10_000, i) for i in range(30)]
    client.log_batch(hostile, metrics=[*idle_gpu, Metric("loss", 99.0, t0_ms, 0)])
    call_command("collect", "mlflow", "--once", stdout=io.StringIO())
    assert not MetricPoint.objects.filter(run=vision_run).exists()
    assert not GpuSample.objects.filter(run=vision_run).exists()


def test_a_run_upsert_with_tens_of_thousands_of_nodes_is_a_422_not_a_minute_of_a_worker(world: World) -> None:
    """10 attempts x 4,096 nodes (700 KB, under the 8 MB body limit) took ~50 s in one transaction."""
    attempts = [{"number": a + 1, "nodes": [{"index": i} for i in range(4096)]} for a in range(10)]
    client = _quiet(world.api(world.vision))
    response = client.post(
        "/api/v1/runs", json.dumps({"external_id": "wide", "attempts": attempts}), content_type="application/json"
    )
    assert response.status_code == 422, response.content[:200]
    # Refused by the schema, before any query (timing is left out: this machine is shared).
    assert "nodes" in response.json()["errors"][0]["message"]
    assert not world.vision.runs.exists()


def test_the_egress_csv_marks_a_flow_with_no_price_as_the_page_does(world: World) -> None:
    """Egress to the internet without a price: the page says '(no price)', the CSV said usd 0 and nothing else."""
    make_run(world.vision, "r2")
    body = {"records": [{"run": "r2", "source_region": "us-west-2", "destination_region": "internet",
                         "bytes": 5_000_000_000, "ts": (T0 + timedelta(minutes=31)).isoformat()}]}  # fmt: skip
    assert serverless_api(world).post("/api/v1/egress", body, content_type="application/json").status_code == 201
    alice = world.client_for(world.alice)
    query = {"start": "2026-11-01", "end": "2026-11-03"}
    assert "(no price)" in alice.get("/costs/", query).content.decode()
    text = alice.get("/costs/", {**query, "format": "csv", "table": "egress"}).content.decode()
    (row,) = csv.DictReader(io.StringIO(text))
    assert row["destination_region"] == "internet" and row["usd"] == "0"
    assert row.get("unpriced") == "true", row


@pytest.mark.parametrize(
    "query",
    [
        {"attempt": "\u00b2", "node": "0"},  # '²'.isdigit() is true, int('²') raises
        {"attempt": "1", "node": "0", "after": "\u00b2"},
        {"attempt": "1", "node": "0", "after": "9" * 5000},  # int() refuses more than 4,300 digits
    ],
)
def test_the_log_tail_answers_4xx_for_numbers_it_cannot_read(world: World, query: dict[str, str]) -> None:
    run = make_run(world.vision, "a-1")
    response = _quiet(world.client_for(world.alice)).get(f"/runs/{run.pk}/log/tail.json", query)
    assert response.status_code in (400, 404), response.status_code
    assert "error" in response.json()


def test_a_policy_threshold_that_only_looks_like_a_digit_is_a_form_error(world: World) -> None:
    """'²'.isdigit() is true and int('²') raises: the policy form answered 500 to a policy admin."""
    response = _quiet(world.client_for(world.sam)).post(
        "/costs/policies/new/", {"name": "p", "alert_thresholds": "50, \u00b2"}
    )
    assert response.status_code == 200
    assert "is not a whole percent" in response.content.decode()
