"""The price book CSV: the default book, validation with line numbers, idempotency, export."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from itertools import permutations
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from billing.costs.serverless import estimate_costs_for_runs
from billing.models import AcceleratorPrice, EgressPrice, EgressRecord, InstancePrice
from billing.prices.pricebook import COLUMNS, DEFAULT_PRICE_FILE, export_price_csv, load_default_prices, load_price_csv
from runs.choices import AcceleratorType, Region
from tests.conftest import T0, World, make_run

HEADER = ",".join(COLUMNS)
pytestmark = pytest.mark.django_db


def csv_file(*rows: str) -> io.StringIO:
    return io.StringIO("\n".join([HEADER, *rows]) + "\n")


def price_counts() -> tuple[int, int]:
    # Instance-hour prices (classic clusters) count with the accelerator prices.
    return AcceleratorPrice.objects.count() + InstancePrice.objects.count(), EgressPrice.objects.count()


# --- The default book -------------------------------------------------------------------


def test_default_book_loads_and_prices_every_type_in_every_region() -> None:
    result = load_default_prices()

    assert result.ok, result.errors
    assert result.added == sum(price_counts())
    for accelerator_type in AcceleratorType.values:
        for region in Region.values:
            in_force = AcceleratorPrice.objects.filter(
                accelerator_type=accelerator_type, region=region, effective_from__lte=T0
            )
            assert in_force.exists(), f"no price for {accelerator_type} in {region}"


def test_default_book_prices_every_ordered_region_pair_and_the_internet() -> None:
    load_default_prices()

    places = [*Region.values, "internet"]
    stored = set(EgressPrice.objects.filter(effective_from__lte=T0).values_list("source_region", "destination_region"))
    missing = set(permutations(places, 2)) - stored
    assert not missing
    assert len(stored) == 7 * 6


def test_default_book_cites_a_source_and_labels_its_estimates() -> None:
    with open(DEFAULT_PRICE_FILE, newline="") as file:
        rows = list(csv.DictReader(file))
    assert all(row["source"] for row in rows)
    # The reference has no A10, B300 or serverless DBU price: those rows must say so.
    for row in rows:
        if row["kind"] == "accelerator":
            assert row["source"].startswith("estimate: "), row
        if row["accelerator_type"] in (AcceleratorType.A10_1, AcceleratorType.B300_8):
            assert "no public" in row["source"]


def test_default_book_prices_a_run_of_every_type_in_every_region(world: World) -> None:
    load_default_prices()
    runs = [
        make_run(world.vision, f"{accelerator_type}-{region}", accelerator_type=accelerator_type, region=region)
        for accelerator_type in AcceleratorType.values
        for region in Region.values
    ]

    costs = estimate_costs_for_runs(runs)

    assert not [cost.unpriced_reason for cost in costs.values() if cost.unpriced]
    assert all(cost.total > 0 for cost in costs.values())


def test_reloading_the_default_book_adds_nothing() -> None:
    first = load_default_prices()
    counts = price_counts()

    second = load_default_prices()

    assert (second.added, second.updated, second.unchanged) == (0, 0, first.added)
    assert price_counts() == counts


# --- Validation -------------------------------------------------------------------------


def test_bad_rows_are_reported_by_line_and_nothing_is_written() -> None:
    file = csv_file(
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4.00,,fine",  # line 2: good
        "accelerator,GPU_8xA100,us-west-2,,,2026-01-01,4.00,,",  # 3: unknown type
        "accelerator,GPU_8xH100,us-west2,,,2026-01-01,4.00,,",  # 4: region typo
        "egress,,,us-west-2,internet,2026-01-01,,-0.09,",  # 5: negative
        "egress,,,us-west-2,internet,2026-13-01,,0.09,",  # 6: bad date
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01T00:00:00,4.00,,",  # 7: naive datetime
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4.001234567,,",  # 8: too many decimals
        "gpu,GPU_8xH100,us-west-2,,,2026-01-01,4.00,,",  # 9: bad kind
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4.00,0.09,",  # 10: egress price on accelerator
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01T00:00:00+00:00,5.00,,",  # 11: duplicate of 2
        "egress,,,us-west-2,us-west-2,2026-01-01,,0.01,",  # 12: same region
        "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,abc,,",  # 13: not a number
    )

    result = load_price_csv(file)

    assert not result.ok
    assert [e.line for e in result.errors] == list(range(3, 14))
    messages = [str(e) for e in result.errors]
    assert messages[0].startswith("line 3: accelerator_type 'GPU_8xA100' is not one of")
    assert messages[8] == "line 11: same accelerator_type, region and effective_from as line 2"
    assert (result.added, result.unchanged) == (0, 0)
    assert price_counts() == (0, 0)


def test_missing_and_unknown_columns_are_reported_on_line_1() -> None:
    file = io.StringIO("kind,accelerator_type,region,effective_from,usd_per_hr\n")
    [error] = load_price_csv(file).errors
    assert error.line == 1
    assert "missing column(s)" in error.message and "unknown column(s) usd_per_hr" in error.message


def test_changed_price_is_refused_unless_replace() -> None:
    load_price_csv(csv_file("accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4.00,,v1"))
    changed = "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4.50,,v2"

    refused = load_price_csv(csv_file("egress,,,us-west-2,internet,2026-01-01,,0.09,", changed))
    assert [e.line for e in refused.errors] == [3]
    assert "later effective_from" in refused.errors[0].message
    assert price_counts() == (1, 0)  # the good egress row was not written either

    replaced = load_price_csv(csv_file(changed), replace=True)
    assert (replaced.added, replaced.updated) == (0, 1)
    assert AcceleratorPrice.objects.get().usd_per_hour == Decimal("4.5")


def test_dates_are_midnight_utc_and_offsets_are_honoured() -> None:
    load_price_csv(
        csv_file(
            "accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4,,",
            "accelerator,GPU_8xH100,us-west-2,,,2026-03-01T09:00:00-05:00,3,,",
        )
    )
    assert list(AcceleratorPrice.objects.values_list("effective_from", flat=True)) == [
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 3, 1, 14, tzinfo=UTC),
    ]


# --- Export and the command -------------------------------------------------------------


def test_export_round_trips() -> None:
    load_default_prices()
    load_price_csv(csv_file("accelerator,GPU_8xH100,us-west-2,,,2026-03-01T14:30:00+00:00,3.5,,mid-day change"))
    before = set(
        AcceleratorPrice.objects.values_list("accelerator_type", "region", "effective_from", "usd_per_hour", "source")
    )
    exported = io.StringIO()
    written = export_price_csv(exported)
    assert written == sum(price_counts())

    # Into the same book: nothing changes.
    exported.seek(0)
    again = load_price_csv(exported)
    assert (again.added, again.updated, again.unchanged) == (0, 0, written)

    # Into an empty book: the same rows come back.
    AcceleratorPrice.objects.all().delete()
    EgressPrice.objects.all().delete()
    InstancePrice.objects.all().delete()
    exported.seek(0)
    assert load_price_csv(exported).added == written
    after = set(
        AcceleratorPrice.objects.values_list("accelerator_type", "region", "effective_from", "usd_per_hour", "source")
    )
    assert after == before
    second_export = io.StringIO()
    export_price_csv(second_export)
    assert second_export.getvalue() == exported.getvalue()


def test_command_loads_the_default_book_and_reports_counts() -> None:
    out = io.StringIO()
    call_command("load_prices", "--default", stdout=out)
    added = sum(price_counts())
    assert f"{added} added, 0 updated, 0 unchanged." in out.getvalue()

    out = io.StringIO()
    call_command("load_prices", str(DEFAULT_PRICE_FILE), stdout=out)
    assert f"0 added, 0 updated, {added} unchanged." in out.getvalue()


def test_command_names_bad_rows_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(
        csv_file("accelerator,GPU_8xH100,us-west-2,,,2026-01-01,4,,", "egress,,,mars-1,internet,x,,1,").getvalue()
    )
    err = io.StringIO()

    with pytest.raises(CommandError, match="1 bad row; nothing was written") as excinfo:
        call_command("load_prices", str(path), stderr=err)

    assert excinfo.value.returncode == 1  # manage.py exits with this
    assert err.getvalue().startswith("line 3: ")
    assert price_counts() == (0, 0)


def test_command_needs_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not both"):
        call_command("load_prices")
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("load_prices", str(tmp_path / "missing.csv"))


# --- Admin ------------------------------------------------------------------------------


def test_admin_lists_prices_and_egress_records(world: World) -> None:
    load_default_prices()
    run = make_run(world.vision, "egress-run")
    EgressRecord.objects.create(run=run, source_region="us-west-2", destination_region="internet", bytes=10, ts=T0)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))

    for url in (
        "/admin/billing/acceleratorprice/?q=estimate&accelerator_type__exact=GPU_8xH100",
        "/admin/billing/egressprice/?source_region=sa-east-1",
        "/admin/billing/egressrecord/?q=egress-run",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
    assert b"egress-run" in response.content
