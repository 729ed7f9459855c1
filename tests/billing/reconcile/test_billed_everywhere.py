"""Billed beside estimated wherever money is shown (issue 31), from the one engine.

One serverless run of team vision under policy `vision-train`: 8 GPUs x 1 h at a made-up
$2.50/GPU-hour = $20.00 estimated. Its usage records (the `system.billing.usage` columns the
reconciliation tests use) bill 10 DBU at the $0.70 list price = $7.00. Every surface shows
$20.00 as the estimate and $7.00 billed: the overview's team month, `/costs/` (month to date
and the range), the policy page, `GET /api/v1/costs`, `/metrics`, and the runs API, which
carries the run page's own figure.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from billing.costs import rollups
from billing.engine import run_cost
from billing.models import AcceleratorPrice, UsagePolicy
from billing.reconcile import importing
from dashboard.models import ApiKeyRole
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=1)  # 2026-11-03 09:00 UTC
METRICS_TOKEN = "metrics-token-for-tests"
USAGE_HEADER = (
    "record_id,usage_start_time,usage_end_time,usage_date,sku_name,usage_quantity,usage_unit,usage_metadata,custom_tags"
)
PRICES = (
    "sku_name,price_start_time,price_end_time,currency_code,usage_unit,pricing\n"
    'SERVERLESS_GPU,2026-01-01T00:00:00Z,,USD,DBU,"{""default"": ""0.70""}"\n'
)


def usage_line(record_id: str, job_run_id: str, quantity: str, start: datetime = T0) -> str:
    metadata = json.dumps({"job_run_id": job_run_id, "cluster_id": None}).replace('"', '""')
    end = start + timedelta(hours=1)
    return (
        f"{record_id},{start:%Y-%m-%dT%H:%M:%SZ},{end:%Y-%m-%dT%H:%M:%SZ},{start:%Y-%m-%d},SERVERLESS_GPU,"
        f'{quantity},DBU,"{metadata}","{{}}"'
    )


def _same_instants(cost: dict) -> dict:
    """The cost with its as_of times parsed (the API writes 'Z', the engine '+00:00')."""
    billed = cost["billed"] and cost["billed"] | {"as_of": datetime.fromisoformat(cost["billed"]["as_of"])}
    return cost | {"as_of": datetime.fromisoformat(cost["as_of"]), "billed": billed}


def import_records(*lines: str) -> importing.ImportResult:
    """Usage records (and the list price) imported as `manage.py import_usage` would."""
    usage = io.StringIO("\n".join([USAGE_HEADER, *lines]) + "\n", newline="")
    return importing.import_usage(usage, io.StringIO(PRICES, newline=""))


@pytest.fixture
def billed(world: World, settings) -> UsagePolicy:
    settings.AIRBOARD_METRICS_TOKEN = METRICS_TOKEN
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="2.50"
    )
    policy = UsagePolicy.objects.create(name="vision-train", budget_usd=Decimal("100"), period_start_day=1)
    policy.teams.set([world.vision])
    make_run(world.vision, "123", usage_policy_name="vision-train")
    make_run(world.nlp, "456")  # estimated, never billed
    result = import_records(usage_line("u1", "123", "10"))
    assert result.ok and result.linked == 1
    with time_machine.travel(NOW, tick=False):
        rollups.refresh_changed()
    return policy


@time_machine.travel(NOW, tick=False)
def test_the_overview_team_month_shows_billed_beside_estimated(world: World, billed: UsagePolicy) -> None:
    response = world.client_for(world.sam).get(reverse("overview"))
    rows = {row.month.team_name: row for row in response.context["team_spend"]}
    assert rows["vision"].month.usd == Decimal("20")
    assert rows["vision"].billed.usd == Decimal("7") and rows["vision"].billed.records == 1
    assert rows["nlp"].month.usd == Decimal("20") and rows["nlp"].billed is None
    html = response.content.decode()
    assert "billed <strong>$7.00</strong>" in html and "no usage records imported" in html
    csv_body = world.client_for(world.alice).get("/?format=csv&table=spend").content.decode()
    assert csv_body.splitlines()[1].endswith(',7,"billed, as of 2026-11-03 09:00 UTC"')


@time_machine.travel(NOW, tick=False)
def test_the_costs_page_shows_billed_under_its_filters(world: World, billed: UsagePolicy) -> None:
    alice = world.client_for(world.alice)
    ctx = alice.get("/costs/", {"start": "2026-11-01", "end": "2026-11-03"}).context
    assert (ctx["mtd"].spend, ctx["mtd_billed"].usd) == (Decimal("20"), Decimal("7"))
    assert ctx["total_billed"].usd == Decimal("7")
    # A filter the run is outside of leaves no bill in the scope, and no estimate either.
    elsewhere = alice.get("/costs/", {"region": "us-east-1"}).context
    assert elsewhere["mtd_billed"] is None and elsewhere["mtd"].spend == 0
    # nlp's member sees nlp's estimate, and no vision bill.
    charlie = world.client_for(world.charlie).get("/costs/").context
    assert charlie["mtd"].spend == Decimal("20") and charlie["mtd_billed"] is None


@time_machine.travel(NOW, tick=False)
def test_the_policy_page_shows_billed_and_enforces_the_estimate(world: World, billed: UsagePolicy) -> None:
    response = world.client_for(world.alice).get(reverse("policy_detail", args=[billed.pk]))
    status = response.context["status"]
    assert status.spend == Decimal("20") and status.billed.usd == Decimal("7")
    html = response.content.decode()
    assert 'class="policy-billed"' in html and "billed <strong>$7.00</strong>" in html
    assert 'Enforced on</dt><dd class="policy-enforced-on">the estimate' in html
    # The costliest runs of the period, with the run's own bill beside its estimate.
    assert 'title="billed, as of 2026-11-03 09:00 UTC">billed $7.00' in html
    rows = world.client_for(world.alice).get(reverse("policy_list") + "?format=csv").content.decode().splitlines()
    assert rows[0].endswith("billed_usd,billed_figure,enforced_on") and rows[1].endswith("estimate")


@time_machine.travel(NOW, tick=False)
def test_the_costs_api_and_metrics_carry_billed(world: World, billed: UsagePolicy) -> None:
    body = world.api(world.vision, role=ApiKeyRole.READ).get("/api/v1/costs?from=2026-11-01&to=2026-11-03").json()
    assert Decimal(body["total_usd"]) == 20
    assert Decimal(body["billed"]["usd"]) == 7 and body["billed"]["kind"] == "billed"
    assert (body["billed"]["records"], body["billed"]["first_day"]) == (1, "2026-11-02")
    nlp = world.api(world.nlp, role=ApiKeyRole.READ).get("/api/v1/costs?from=2026-11-01&to=2026-11-03").json()
    assert nlp["billed"] is None
    text = Client(headers={"authorization": f"Bearer {METRICS_TOKEN}"}).get("/metrics").content.decode()
    assert 'airboard_billed_month_to_date_usd{team="vision",policy="vision-train"} 7.0' in text
    assert 'airboard_billed_month_to_date_usd{team="nlp"' not in text


@time_machine.travel(NOW, tick=False)
def test_the_runs_api_carries_the_run_pages_cost(world: World, billed: UsagePolicy) -> None:
    api = world.api(world.vision, role=ApiKeyRole.READ)
    one = api.get("/api/v1/runs/123").json()["cost"]
    engine = run_cost(world.vision.runs.get(external_id="123")).as_json()
    assert _same_instants(one) == _same_instants(engine)
    assert (Decimal(one["usd"]), one["kind"], one["reasons"]) == (Decimal("20"), "estimated", [])
    assert Decimal(one["billed"]["usd"]) == 7 and one["billed"]["records"] == 1
    (listed,) = api.get("/api/v1/runs").json()["results"]
    assert listed["cost"] == one
    # The run list shows both too (runs.glance reads the same engine).
    run_list = world.client_for(world.alice).get(reverse("run_list")).content.decode()
    assert "billed $7.00" in run_list
    # The run page shows the same two figures.
    html = world.client_for(world.alice).get(reverse("run_detail", args=[listed["id"]])).content.decode()
    assert "$20.00" in html and "$7.00" in html


@time_machine.travel(NOW, tick=False)
def test_an_unpriced_run_is_a_lower_bound_with_its_reasons_in_the_api(world: World) -> None:
    make_run(world.vision, "far", region="sa-east-1", home_region="sa-east-1")
    cost = world.api(world.vision, role=ApiKeyRole.READ).get("/api/v1/runs/far").json()["cost"]
    assert cost["kind"] == "lower bound" and cost["reasons"] and cost["billed"] is None
    assert Decimal(cost["usd"]) == 0
