"""Reconciliation: import billed usage, link to runs, price at list, estimated vs billed."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.urls import reverse

from billing.costs import rollups
from billing.models import AcceleratorPrice, BilledUsage, BillingListPrice
from billing.reconcile import compare, importing, report
from runs.choices import RunSource
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
USAGE_HEADER = (
    "record_id,usage_start_time,usage_end_time,usage_date,sku_name,usage_quantity,usage_unit,usage_metadata,custom_tags"
)
PRICES = (
    "sku_name,price_start_time,price_end_time,currency_code,usage_unit,pricing\n"
    'SERVERLESS_GPU,2026-01-01T00:00:00Z,2026-11-02T10:00:00Z,USD,DBU,"{""default"": ""0.70""}"\n'
    'SERVERLESS_GPU,2026-11-02T10:00:00Z,,USD,DBU,"{""default"": ""0.75""}"\n'
)


def _usage_line(record_id: str, job_run_id: str, quantity: str, start: datetime = T0, hours: int = 1) -> str:
    end = start + timedelta(hours=hours)
    metadata = json.dumps({"job_run_id": job_run_id, "cluster_id": None}).replace('"', '""')
    return (
        f"{record_id},{start:%Y-%m-%dT%H:%M:%SZ},{end:%Y-%m-%dT%H:%M:%SZ},{start:%Y-%m-%d},SERVERLESS_GPU,"
        f'{quantity},DBU,"{metadata}","{{}}"'
    )


def _import(*lines: str, prices: str | None = PRICES) -> importing.ImportResult:
    usage = io.StringIO("\n".join([USAGE_HEADER, *lines]) + "\n", newline="")
    return importing.import_usage(usage, io.StringIO(prices, newline="") if prices else None)


@pytest.fixture
def priced(world: World) -> World:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="2.50"
    )
    return world


def test_import_is_idempotent_and_links_by_job_run_id(priced: World) -> None:
    run = make_run(priced.vision, external_id="123")
    lines = [_usage_line("r1", "123", "10"), _usage_line("r2", "999", "1")]
    first = _import(*lines)
    assert first.ok and (first.added, first.prices_added, first.linked) == (2, 2, 1)
    again = _import(*lines)
    assert (again.added, again.unchanged, again.prices_added) == (0, 2, 0)
    assert BilledUsage.objects.count() == 2 and BillingListPrice.objects.count() == 2
    assert BilledUsage.objects.get(record_id="r1").run == run
    assert BilledUsage.objects.get(record_id="r2").run is None


def test_a_run_collected_after_its_usage_is_linked_by_the_next_import(priced: World) -> None:
    _import(_usage_line("r1", "123", "10"))
    run = make_run(priced.vision, external_id="123")
    assert _import().linked == 1
    assert BilledUsage.objects.get().run == run


def test_local_runs_are_never_linked(priced: World) -> None:
    make_run(priced.vision, external_id="123", source=RunSource.LOCAL)
    _import(_usage_line("r1", "123", "10"))
    assert BilledUsage.objects.get().run is None


def test_bad_rows_are_reported_by_line_and_nothing_is_written(priced: World) -> None:
    result = _import(
        _usage_line("r1", "123", "10"),
        _usage_line("r2", "123", "ten"),
        "r3,yesterday,2026-11-02T10:00:00Z,2026-11-02,SERVERLESS_GPU,1,DBU,{},{}",
        _usage_line("r1", "123", "10"),
    )
    assert [str(e) for e in result.errors] == [
        "line 3: usage_quantity 'ten' is not a number",
        "line 4: usage_start_time 'yesterday' is not a date-time",
        "line 5: record_id r1 repeats line 2",
    ]
    assert not BilledUsage.objects.exists() and not BillingListPrice.objects.exists()


def test_record_id_falls_back_to_a_hash_and_flattened_metadata_columns(priced: World) -> None:
    run = make_run(priced.vision, external_id="77")
    text = (
        "usage_start_time,usage_end_time,sku_name,usage_quantity,usage_unit,usage_metadata.job_run_id,usage_metadata.cluster_id\n"
        "2026-11-02 09:00:00,2026-11-02 10:00:00,SERVERLESS_GPU,2,DBU,77,\n"
    )
    assert importing.import_usage(io.StringIO(text, newline="")).added == 1
    assert importing.import_usage(io.StringIO(text, newline="")).added == 0
    record = BilledUsage.objects.get()
    assert record.record_id.startswith("sha256:") and record.run == run
    assert record.usage_metadata == {"job_run_id": "77"} and record.billed_usd is None


def test_usage_is_priced_by_the_list_price_in_force_at_its_start(priced: World) -> None:
    _import(_usage_line("early", "1", "3.3"), _usage_line("late", "1", "3.3", start=T0 + timedelta(hours=1)))
    assert BilledUsage.objects.get(record_id="early").billed_usd == Decimal("2.31")
    assert BilledUsage.objects.get(record_id="late").billed_usd == Decimal("2.475")


def test_prices_imported_later_price_the_waiting_rows(priced: World) -> None:
    _import(_usage_line("r1", "1", "2"), prices=None)
    assert BilledUsage.objects.get().billed_usd is None
    assert _import(prices=PRICES).priced == 1
    assert BilledUsage.objects.get().billed_usd == Decimal("1.40")


def test_estimated_vs_billed_per_run_and_per_day_exactly(priced: World) -> None:
    run = make_run(priced.vision, external_id="123")  # 8 GPUs x 1 h x $2.50 = $20
    _import(_usage_line("r1", "123", "10.1"), _usage_line("r2", "123", "17.3", start=T0 + timedelta(hours=1)))
    figure = compare.billed_for_run(run)
    assert figure is not None
    assert (figure.estimated, figure.billed) == (Decimal("20"), Decimal("20.045"))  # 7.07 + 12.975
    assert figure.difference == Decimal("0.045") and figure.percent == Decimal("0.2")
    assert compare.billed_for_run(make_run(priced.nlp, external_id="other")) is None
    page = priced.client_for(priced.alice).get(f"/runs/{run.pk}/").content.decode()
    assert "Billed (imported usage, at list price)" in page and "$20.05" in page

    rollups.recompute_days([T0.date()], now=T0 + timedelta(days=1))
    days = report.day_rows([priced.vision.pk], T0.date(), T0.date(), staff=False)
    assert days == [
        {"day": T0.date(), "estimated": Decimal("20"), "billed": Decimal("20.045"),
         "difference": Decimal("0.045"), "percent": Decimal("0.2")}
    ]  # fmt: skip


def _csv(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_page_is_team_scoped_and_unlinked_records_are_staff_only(priced: World) -> None:
    make_run(priced.vision, external_id="v1")
    make_run(priced.nlp, external_id="n1")
    _import(_usage_line("a", "v1", "1"), _usage_line("b", "n1", "2"), _usage_line("c", "ghost", "4"))
    url = reverse("reconcile_overview")
    query = {"start": "2026-11-01", "end": "2026-11-30", "format": "csv", "table": "runs"}
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        alice = priced.client_for(priced.alice)
        page = alice.get(url, {"start": "2026-11-01", "end": "2026-11-30"})
        assert page.status_code == 200
        assert b"v1" in page.content and b"n1" not in page.content and b"ghost" not in page.content
        rows = _csv(alice.get(url, query))
        assert rows[0][:4] == ["job_run_id", "team", "estimated_usd", "billed_usd"]
        assert [r[:4] for r in rows[1:]] == [["v1", "vision", "20", "0.7"]]
        days = _csv(alice.get(url, {**query, "table": "days"}))
        assert days[1:] == [["2026-11-02", "0", "0.7", "0.7", ""]]

        staff_rows = _csv(priced.client_for(priced.sam).get(url, query))
        assert sorted(r[0] for r in staff_rows[1:]) == ["ghost", "n1", "v1"]
        staff_days = _csv(priced.client_for(priced.sam).get(url, {**query, "table": "days"}))
        assert staff_days[1][2] == "4.9"  # 0.7 + 1.4 + 2.8, the unlinked record included
        assert priced.client_for(priced.charlie).get(url, {**query, "table": "days"}).content.count(b"0.7") == 0


def test_import_usage_command(priced: World, tmp_path: Path) -> None:
    usage, prices = tmp_path / "usage.csv", tmp_path / "prices.csv"
    usage.write_text("\n".join([USAGE_HEADER, _usage_line("r1", "1", "1")]) + "\n")
    prices.write_text(PRICES)
    out = io.StringIO()
    call_command("import_usage", str(usage), "--prices", str(prices), stdout=out)
    assert "1 added, 0 unchanged, 2 list prices added" in out.getvalue()
    usage.write_text(USAGE_HEADER + "\nr2,x,y,,SKU,1,DBU,{},{}\n")
    with pytest.raises(CommandError, match="1 bad row; nothing was written"):
        call_command("import_usage", str(usage), stderr=io.StringIO())
