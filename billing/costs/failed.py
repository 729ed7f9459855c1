"""What a failed run's failed attempts cost, and a stored copy of it for settled runs.

The figure is the cost engine's (`breakdowns_for_runs`): the compute of the run's failed or
timed-out attempts, all of a classic cluster's uptime share (`failed_compute`, the one formula).
The failures overview shows it for up to 5,000 failed runs, and pricing them on every view
was ~800 ms of its ~1.1 s at 100,000 runs. A failed run's figure only changes when the run
does (its attempts, type, region, cluster: `Run.updated_at`), when a price does, or while it
still accrues; so the cost rollup pass, which prices runs anyway, stores it (`FailedRunCost`)
and `failed_attempts_cost` hands back the stored figure only while nothing it depends on has
changed, pricing every other run with the engine as before:

- the run's `updated_at` is older than the stored `priced_at` less SETTLE (a write stamped
  just before the pass read may commit just after it: the rollup's CURSOR_OVERLAP);
- no attempt of the run is still running (it would accrue to now);
- not a classic run on a cluster: its share of the cluster's uptime moves with the other
  runs on that cluster, so those are always priced;
- the price book is the one it was priced with (`price_book`: a digest of every accelerator
  and instance price row, so an edit, a new period or a deletion all show).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Exists, F, OuterRef, Q

from billing.costs.run_costs import RUN_COST_FIELDS, RunBreakdown, breakdowns_for_runs
from billing.models import AcceleratorPrice, FailedRunCost, InstancePrice
from billing.prices.money import ZERO
from runs.choices import RunSource, RunStatus
from runs.models import Attempt, Run

FAILED_STATUSES = tuple(RunStatus.failed())
# How late a run's write may become visible: `updated_at` is stamped before its transaction
# commits. The rollup pass re-reads this much behind its cursor (rollups.CURSOR_OVERLAP is this).
SETTLE = timedelta(minutes=2)
# Failed runs without a usable stored figure that one rollup pass prices (a new install's backfill).
BACKFILL = 20_000
# Runs priced per batch.
CHUNK = 2000


def failed_numbers(run_ids: Iterable[int]) -> dict[int, set[int]]:
    """Per run, the numbers of its failed or timed-out attempts (one query)."""
    numbers: dict[int, set[int]] = defaultdict(set)
    rows = Attempt.objects.filter(run_id__in=list(run_ids), status__in=FAILED_STATUSES)
    for run_id, number in rows.values_list("run_id", "number"):
        numbers[run_id].add(number)
    return numbers


def failed_compute(breakdown: RunBreakdown, numbers: set[int]) -> Decimal:
    """The compute of a breakdown's failed attempts (`numbers`) and classic uptime (interval 0)."""
    return sum((i.compute for i in breakdown.intervals if i.number == 0 or i.number in numbers), ZERO)


def price(runs: Iterable[Run], now: datetime | None = None) -> dict[int, Decimal]:
    """Per run: the engine's failed-attempt cost, priced now (constant queries)."""
    runs = list(runs)
    if not runs:
        return {}
    numbers = failed_numbers(r.pk for r in runs)
    return {pk: failed_compute(b, numbers[pk]) for pk, b in breakdowns_for_runs(runs, now=now).items()}


def price_book() -> str:
    """A digest of every accelerator and instance price row: differs after any price edit, addition or removal."""
    digest = hashlib.sha256()
    for model in (AcceleratorPrice, InstancePrice):
        fields = [f.attname for f in model._meta.concrete_fields]
        for row in model.objects.order_by("pk").values_list(*fields):
            digest.update(repr(row).encode())
        digest.update(b"\x00")
    return digest.hexdigest()


# Classic runs on a cluster: their share of its uptime moves with the other runs on it, so their
# figure is never stored and always priced.
ON_SHARED_CLUSTER = Q(source=RunSource.CLASSIC, cluster__isnull=False)


def _stale(book: str) -> Q:
    """Runs whose stored figure is missing or no longer the engine's answer: priced with another
    price book (`book` is today's digest), or not SETTLE after the run's last write."""
    return (
        Q(failed_cost__isnull=True)
        | ~Q(failed_cost__price_book=book)
        | Q(failed_cost__priced_at__lte=F("updated_at") + SETTLE)
    )


def _storable(run_ids: Iterable[int]) -> set[int]:
    """Of `run_ids`, the failed runs whose figure may be stored (not classic runs on a cluster)."""
    return set(
        Run.objects.filter(pk__in=list(run_ids), status__in=FAILED_STATUSES)
        .exclude(ON_SHARED_CLUSTER)
        .values_list("pk", flat=True)
    )


def cache(breakdowns: dict[int, RunBreakdown], as_of: datetime, book: str | None = None) -> int:
    """Store the failed-attempt cost of the failed runs among `breakdowns` (priced at `as_of`)."""
    ids = _storable(breakdowns)
    if not ids:
        return 0
    book = book or price_book()
    numbers = failed_numbers(ids)
    rows = [
        FailedRunCost(run_id=pk, compute=failed_compute(breakdowns[pk], numbers[pk]), priced_at=as_of, price_book=book)
        for pk in ids
    ]
    FailedRunCost.objects.bulk_create(
        rows,
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["run"],
        update_fields=["compute", "priced_at", "price_book"],
    )
    return len(rows)


def backfill(as_of: datetime, limit: int = BACKFILL) -> int:
    """Price and store up to `limit` failed runs whose stored figure is missing or no longer usable."""
    book = price_book()
    runs = Run.objects.filter(_stale(book), status__in=FAILED_STATUSES).exclude(ON_SHARED_CLUSTER)
    ids = list(runs.order_by("pk").values_list("pk", flat=True)[:limit])
    stored = 0
    for i in range(0, len(ids), CHUNK):
        chunk = Run.objects.filter(pk__in=ids[i : i + CHUNK]).only(*RUN_COST_FIELDS)
        stored += cache(breakdowns_for_runs(list(chunk), now=as_of), as_of, book)
    return stored


def failed_attempts_cost(run_ids: Iterable[int], now: datetime | None = None) -> dict[int, Decimal]:
    """Per run id: the compute cost of its failed or timed-out attempts (classic uptime: all of it).

    1. The stored figures still usable (see the module docstring), the conditions checked
       in the database: the price book's digest (two queries), then one query.
    2. The other runs loaded (RUN_COST_FIELDS) and priced by the engine (`price`).
    """
    ids = list(run_ids)
    if not ids:
        return {}
    running = Attempt.objects.filter(run_id=OuterRef("pk"), started_at__isnull=False, ended_at__isnull=True)
    stored = (
        Run.objects.filter(pk__any=ids)
        .exclude(_stale(price_book()))
        .exclude(ON_SHARED_CLUSTER)
        .exclude(Exists(running))
    )
    usable = dict(stored.values_list("pk", "failed_cost__compute"))
    rest = [pk for pk in ids if pk not in usable]
    if not rest:
        return usable
    return usable | price(Run.objects.filter(pk__in=rest).only(*RUN_COST_FIELDS), now=now)
