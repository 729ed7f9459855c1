"""One number: cents are rounded in one place (billing.prices.money.to_cents), on pages and in CSVs."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

from billing.models import AcceleratorPrice
from runs.choices import AcceleratorType, RunStatus
from runs.failures.classify_pass import classify_run
from tests.conftest import T0, World, make_run, serverless_api
from tests.mlflow_server import MlflowServer, mlflow_server  # noqa: F401 (fixture)


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
