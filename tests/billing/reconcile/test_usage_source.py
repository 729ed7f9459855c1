"""Billed usage from a configured query: the Databricks CLI's statement JSON (stand-in in tests/bin) or CSV."""

from __future__ import annotations

import io
import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from billing.models import BilledUsage, BillingListPrice
from billing.reconcile import usage_source
from billing.tasks import import_billed_usage
from tests.conftest import TESTS, World, make_run

BIN = TESTS / "bin"
DATA = TESTS / "data" / "databricks"


def _statement_command(tmp_path: Path, sql: str) -> str:
    query = tmp_path / f"query-{abs(hash(sql))}.json"
    query.write_text(json.dumps({"warehouse_id": "4b9b953939869799", "statement": sql, "wait_timeout": "50s",
                                 "format": "JSON_ARRAY", "disposition": "INLINE"}))  # fmt: skip
    return f"{sys.executable} {BIN / 'databricks'} api post /api/2.0/sql/statements --json @{query}"


@pytest.fixture
def configured(settings, tmp_path: Path) -> Path:
    settings.AIRBOARD_BILLING_USAGE_COMMAND = _statement_command(
        tmp_path, "SELECT * FROM system.billing.usage WHERE usage_date >= current_date() - 7"
    )
    settings.AIRBOARD_BILLING_PRICES_COMMAND = _statement_command(tmp_path, "SELECT * FROM system.billing.list_prices")
    return tmp_path


def test_statement_json_is_imported_linked_and_priced(world: World, configured: Path) -> None:
    run = make_run(world.vision, external_id="812736451")
    result = usage_source.import_configured()
    assert result.ok, result.errors
    assert (result.added, result.prices_added, result.linked, result.priced) == (3, 1, 2, 3)
    record = BilledUsage.objects.get(record_id="0f3b2a4e-0c1d-4c2a-9a8e-1b2c3d4e5f60")
    assert record.run == run
    assert record.usage_start_time == datetime(2026, 11, 2, 9, tzinfo=UTC)
    assert record.usage_quantity == Decimal("12.5")
    assert record.custom_tags == {"team": "vision"}
    assert record.billed_usd == Decimal("8.75")  # 12.5 DBU x $0.70 list
    assert BillingListPrice.objects.get().price_end_time is None
    # The next day's import of an overlapping window adds nothing.
    again = import_billed_usage()
    assert (again["configured"], again["added"]) == (True, 0)
    assert BilledUsage.objects.count() == 3


def test_a_failed_or_partial_statement_is_refused_with_its_reason(world: World, configured: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_DATABRICKS_STATEMENT", "failed")
    with pytest.raises(usage_source.UsageSourceError, match=r"FAILED: \[INSUFFICIENT_PERMISSIONS\]"):
        usage_source.import_configured()
    monkeypatch.setenv("FAKE_DATABRICKS_STATEMENT", "chunked")
    with pytest.raises(CommandError, match=r"more rows than its first chunk \(1 of 2\); narrow the query"):
        call_command("import_usage", "--from-command")
    assert not BilledUsage.objects.exists() and not BillingListPrice.objects.exists()


def test_a_command_that_fails_or_prints_broken_json_is_a_clear_error(world: World, settings, tmp_path: Path) -> None:
    settings.AIRBOARD_BILLING_PRICES_COMMAND = ""
    settings.AIRBOARD_BILLING_USAGE_COMMAND = f"{sys.executable} {BIN / 'databricks-broken'} exit"
    with pytest.raises(usage_source.UsageSourceError) as error:
        usage_source.import_configured()
    assert "exited with 1" in str(error.value) and "dapi" not in str(error.value)
    settings.AIRBOARD_BILLING_USAGE_COMMAND = _statement_command(tmp_path, "SELECT * FROM system.billing.nope")
    with pytest.raises(usage_source.UsageSourceError, match="TABLE_OR_VIEW_NOT_FOUND"):
        usage_source.import_configured()
    broken = tmp_path / "broken.py"
    broken.write_text('print(\'{"status": {"state": "SUCCEEDED"\')\n')
    settings.AIRBOARD_BILLING_USAGE_COMMAND = f"{sys.executable} {broken}"
    with pytest.raises(usage_source.UsageSourceError, match="looks like JSON but is not"):
        usage_source.import_configured()


def test_a_command_printing_csv_is_imported_like_a_file(world: World, settings, tmp_path: Path) -> None:
    export = tmp_path / "usage.csv"
    export.write_text(
        "record_id,usage_start_time,usage_end_time,usage_date,sku_name,usage_quantity,usage_unit,usage_metadata\n"
        'c1,2026-11-02 09:00:00 UTC,2026-11-02 10:00:00 UTC,2026-11-02,SKU,2,DBU,"{""job_run_id"": ""7""}"\n'
    )
    settings.AIRBOARD_BILLING_USAGE_COMMAND = f"cat {export}"
    settings.AIRBOARD_BILLING_PRICES_COMMAND = ""
    out = io.StringIO()
    call_command("import_usage", "--from-command", stdout=out)
    assert "1 added" in out.getvalue()
    assert BilledUsage.objects.get().job_run_id == "7"


def test_statement_rows_with_errors_name_the_line_and_write_nothing(world: World) -> None:
    payload = json.loads((DATA / "statement_billing_usage.json").read_text())
    position = [c["name"] for c in payload["manifest"]["schema"]["columns"]].index("usage_quantity")
    payload["result"]["data_array"][1][position] = "lots"
    text = usage_source.statement_csv(payload)
    from billing.reconcile import importing

    result = importing.import_usage(io.StringIO(text, newline=""))
    assert [str(e) for e in result.errors] == ["line 3: usage_quantity 'lots' is not a number"]
    assert not BilledUsage.objects.exists()


def test_nothing_configured(world: World, settings) -> None:
    settings.AIRBOARD_BILLING_USAGE_COMMAND = ""
    assert import_billed_usage() == {"configured": False}
    with pytest.raises(CommandError, match="not both, not neither"):
        call_command("import_usage")
    with pytest.raises(CommandError, match="AIRBOARD_BILLING_USAGE_COMMAND is not set"):
        call_command("import_usage", "--from-command")
