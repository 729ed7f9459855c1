"""Cost pages and the costs API: scoping, CSV, forecast, group_by and validation."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from billing.choices import EgressOrigin
from billing.costs import rollups
from billing.models import CostDaily, EgressPrice, EgressRecord
from tests.conftest import World, make_run

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)


def _day(world_team, day: date, usd: str, **dims: object) -> CostDaily:
    fields = {
        "experiment_name": "exp-a",
        "creator": "alice@example.com",
        "accelerator_type": "GPU_8xH100",
        "region": "us-west-2",
    }
    fields.update(dims)
    row = CostDaily.objects.create(
        day=day, team=world_team, compute_usd=Decimal(usd), gpu_hours=Decimal("1.5"), runs=1, **fields
    )
    rollups.summarize_days([day])
    return row


@pytest.fixture
def costs(world: World) -> World:
    _day(world.vision, date(2026, 11, 1), "10.123456789012345")
    _day(world.vision, date(2026, 11, 2), "20", idle_usd=Decimal("1.5"))
    _day(world.vision, date(2026, 11, 3), "30", region="us-east-1", experiment_name="exp-b")
    _day(world.nlp, date(2026, 11, 2), "1000", experiment_name="secret-nlp", creator="charlie@example.com")
    return world


@time_machine.travel(NOW, tick=False)
def test_charlie_sees_no_vision_costs(costs: World) -> None:
    response = costs.client_for(costs.charlie).get("/costs/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "secret-nlp" in body and "exp-a" not in body
    csv_body = costs.client_for(costs.charlie).get("/costs/?format=csv&table=experiments").content.decode()
    assert "exp-a" not in csv_body
    # Asking for another team's id is a filter error, not a peek.
    other = costs.client_for(costs.charlie).get(f"/costs/?team={costs.vision.pk}&format=csv&table=experiments")
    assert "exp-a" not in other.content.decode()


@time_machine.travel(NOW, tick=False)
def test_csv_export_has_exact_rows(costs: World) -> None:
    response = costs.client_for(costs.alice).get("/costs/?format=csv&table=experiments")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["experiment_name"]: r["total_usd"] for r in rows} == {"exp-a": "30.123456789012345", "exp-b": "30"}
    by_region = costs.client_for(costs.alice).get("/costs/?group_by=region&format=csv").content.decode()
    assert "us-east-1,30" in by_region


@time_machine.travel(NOW, tick=False)
def test_staff_sees_every_team_and_month_forecast(costs: World) -> None:
    response = costs.client_for(costs.sam).get("/costs/")
    body = response.content.decode()
    assert "secret-nlp" in body and "exp-a" in body
    mtd = response.context["mtd"]
    assert mtd.days_with_data == 3
    assert mtd.spend == Decimal("1060.123456789012345")
    # 9.5 days elapsed of 30: 1060.123456789012345 / 9.5 x 30, to the cent.
    assert mtd.forecast == Decimal("3347.76")
    assert 'id="spend-figure"' in body and "data-figure" in body


@time_machine.travel(datetime(2026, 11, 2, 12, tzinfo=UTC), tick=False)
def test_forecast_provisional_under_three_days(world: World) -> None:
    _day(world.vision, date(2026, 11, 1), "10")
    _day(world.vision, date(2026, 11, 2), "10")
    response = world.client_for(world.alice).get("/costs/")
    mtd = response.context["mtd"]
    # 1.5 days in: no linear forecast. The trailing window (Oct 30 00:00 to now, 3.5 days) spent
    # $20: $20 + $20 / 3.5 x 28.5 days left = $182.86, provisional.
    assert mtd.provisional and mtd.forecast == Decimal("182.86")
    assert "provisional forecast" in response.content.decode()
    empty = world.client_for(world.charlie).get("/costs/")
    assert empty.context["mtd"].forecast is None
    assert "No forecast yet" in empty.content.decode()


@time_machine.travel(NOW, tick=False)
def test_egress_flows_are_scoped_and_priced(world: World) -> None:
    EgressPrice.objects.create(
        source_region="us-west-2", destination_region="us-east-1", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_gb="0.02",
    )  # fmt: skip
    run = make_run(world.vision)
    EgressRecord.objects.create(
        run=run, source_region="us-west-2", destination_region="us-east-1", bytes=5 * 10**9, ts=NOW - timedelta(days=1)
    )
    EgressRecord.objects.create(
        run=run, source_region="us-west-2", destination_region="us-east-1", bytes=15 * 10**9,
        ts=NOW - timedelta(days=1), origin=EgressOrigin.DERIVED,
    )  # fmt: skip
    body = world.client_for(world.alice).get("/costs/?format=csv&table=egress").content.decode()
    assert "us-west-2,us-east-1,20000000000,15000000000,0.4" in body
    page = world.client_for(world.alice).get("/costs/").content.decode()
    assert "(75% estimated)" in page
    assert "us-west-2" not in world.client_for(world.charlie).get("/costs/?format=csv&table=egress").content.decode()


def test_costs_page_needs_login(client) -> None:
    assert client.get("/costs/").status_code == 302


# --- API --------------------------------------------------------------------------------


@time_machine.travel(NOW, tick=False)
def test_api_groups_and_scopes(costs: World) -> None:
    response = costs.client_for(costs.alice).get("/api/v1/costs?group_by=region&from=2026-11-01&to=2026-11-30")
    assert response.status_code == 200
    body = response.json()
    assert body["from"] == "2026-11-01" and body["group_by"] == "region"
    assert {r["key"]: r["total_usd"] for r in body["rows"]} == {"us-west-2": "30.123456789012345", "us-east-1": "30"}
    assert body["rows"][0]["gpu_hours"] == "3"
    by_team = costs.api(costs.nlp).get("/api/v1/costs?group_by=team&from=2026-11-01").json()
    assert [r["key"] for r in by_team["rows"]] == ["nlp"]
    days = costs.client_for(costs.sam).get("/api/v1/costs?group_by=day&from=2026-11-01&to=2026-11-03").json()
    assert [r["key"] for r in days["rows"]] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert days["rows"][1]["total_usd"] == "1020" and days["rows"][1]["idle_usd"] == "1.5"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("group_by=gpu", "group_by"),
        ("from=2026-13-01", "from"),
        ("to=yesterday", "to"),
        ("from=2026-11-05&to=2026-11-01", "to"),
    ],
)
def test_api_rejects_bad_query_naming_the_field(costs: World, query: str, field: str) -> None:
    response = costs.client_for(costs.alice).get(f"/api/v1/costs?{query}")
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == [field]


def test_api_needs_auth(client) -> None:
    assert client.get("/api/v1/costs").status_code == 401
