"""Import of billed usage and list prices: all rows or none, and re-importing adds nothing.

Every row is parsed first (`billing.reconcile.parsing`), and any bad row (reported with its
line number) means nothing is written. `record_id` is unique and rows are inserted with
conflicts ignored. Then every record still unlinked or unpriced is linked and priced
(`billing.reconcile.linking`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from django.db import transaction

from billing.models import BilledUsage, BillingListPrice
from billing.prices.pricebook import RowError
from billing.reconcile.linking import CHUNK, refresh_links_and_prices
from billing.reconcile.parsing import parse_list_prices, parse_usage


@dataclass
class ImportResult:
    """What an import did; `errors` non-empty means nothing was written."""

    added: int = 0
    unchanged: int = 0
    prices_added: int = 0
    linked: int = 0
    priced: int = 0
    unpriced: int = 0
    errors: list[RowError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def import_usage(
    usage: IO[str], prices: IO[str] | None = None, progress: Callable[[int, int], None] | None = None
) -> ImportResult:
    """Import list prices (optional) and usage records; all rows or none.

    1. Parse both files; any bad row -> errors, nothing written.
    2. In one transaction: insert list prices and records, conflicts ignored (idempotent).
    3. Link and price every record still unlinked or unpriced, so a run or a list price that
       arrives after its usage is picked up by the next import.
    """
    result = ImportResult()
    list_prices: list[BillingListPrice] = []
    if prices is not None:
        list_prices, errors = parse_list_prices(prices)
        result.errors += [RowError(e.line, f"list prices: {e.message}") for e in errors]
    records, errors = parse_usage(usage)
    result.errors += errors
    if result.errors:
        return result
    with transaction.atomic():
        before_prices = BillingListPrice.objects.count()
        BillingListPrice.objects.bulk_create(list_prices, ignore_conflicts=True, batch_size=CHUNK)
        result.prices_added = BillingListPrice.objects.count() - before_prices
        before = BilledUsage.objects.count()
        for start in range(0, len(records), CHUNK):
            BilledUsage.objects.bulk_create(records[start : start + CHUNK], ignore_conflicts=True)
            if progress is not None:
                progress(min(start + CHUNK, len(records)), len(records))
        result.added = BilledUsage.objects.count() - before
        result.unchanged = len(records) - result.added
        result.linked, result.priced = refresh_links_and_prices()
        result.unpriced = BilledUsage.objects.filter(billed_usd__isnull=True).count()
    return result
