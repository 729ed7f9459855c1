"""A settled run's cost figure, stored, so a download of 100,000 runs reads it rather than pricing each.

The figure is the cost engine's (`breakdowns_for_runs`): the run's total and what it is
(estimated, or a lower bound), the `cost` the run page and the runs table show
(`billing.engine.run_costs`). Pricing every run of the run list's CSV took ~1 ms a run (100 s
at 100,000 runs). A settled run's figure changes only when the run does, when a price does, or
when a record of its own arrives; so the cost rollup pass, which prices runs anyway, stores it
(`RunCostFigure`), and `stored_figures` hands back the stored figure only while nothing it
depends on has changed, as billing.costs.failed does for the failed attempts' cost:

- the run's `updated_at` is older than the stored `priced_at` less SETTLE (a write stamped
  just before the pass read may commit just after it);
- the run is not active and no attempt of it is still running (it would accrue to now);
- not a classic run on a cluster: its share of the cluster's uptime moves with the other
  runs on that cluster;
- the run has no egress record and no billed usage record: those arrive later than the
  run's last write (derived egress, a usage import), so such runs are always priced;
- the price book is the one it was priced with (`failed.price_book`).

Idle GPU-minutes arriving late change neither: idle cost is part of compute, not added to
it, and where it has no price the compute has none either (the figure is a lower bound already).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.db.models import F, Q

from billing.costs.failed import ON_SHARED_CLUSTER, SETTLE, price_book
from billing.costs.run_costs import RUN_COST_FIELDS, RunBreakdown, breakdowns_for_runs
from billing.models import BilledUsage, EgressRecord, RunCostFigure
from runs.choices import RunStatus
from runs.models import Attempt, Run

# Runs without a usable stored figure that one rollup pass prices (a new install's backfill).
BACKFILL = 20_000
# Runs priced per batch.
CHUNK = 2000


def _settled() -> Q:
    """Runs whose figure does not move with time or with other runs (see the module docstring)."""
    running = Attempt.objects.filter(started_at__isnull=False, ended_at__isnull=True).values("run_id")
    egress = EgressRecord.objects.values("run_id")
    billed = BilledUsage.objects.filter(run_id__isnull=False).values("run_id")
    # `pk IN (SELECT run_id ...)`, not a correlated EXISTS: PostgreSQL reads each table once into
    # a hash ("hashed SubPlan"), where EXISTS in a SELECT list (the CSV's COPY) probes an index a
    # row: three probes a run were ~9 us of the ~15-20 us a row the download's cost columns took.
    return (
        ~Q(status__in=RunStatus.active())
        & ~ON_SHARED_CLUSTER
        & ~Q(pk__in=running)
        & ~Q(pk__in=egress)
        & ~Q(pk__in=billed)
    )


def _stale(book: str) -> Q:
    """Runs whose stored figure is missing, priced with another price book, or not SETTLE after the run's last write."""
    return (
        Q(cost_figure__isnull=True)
        | ~Q(cost_figure__price_book=book)
        | Q(cost_figure__priced_at__lte=F("updated_at") + SETTLE)
    )


def cache(breakdowns: dict[int, RunBreakdown], as_of: datetime, book: str | None = None) -> int:
    """Store the figure of the settled runs among `breakdowns` (priced at `as_of`)."""
    ids = set(Run.objects.filter(_settled(), pk__in=list(breakdowns)).values_list("pk", flat=True))
    ids = {pk for pk in ids if not breakdowns[pk].running}
    if not ids:
        return 0
    book = book or price_book()
    rows = []
    for pk in ids:
        figure = breakdowns[pk].figure
        rows.append(RunCostFigure(run_id=pk, usd=figure.usd, kind=figure.kind, priced_at=as_of, price_book=book))
    RunCostFigure.objects.bulk_create(
        rows, batch_size=1000, update_conflicts=True, unique_fields=["run"],
        update_fields=["usd", "kind", "priced_at", "price_book"],
    )  # fmt: skip
    return len(rows)


def backfill(as_of: datetime, limit: int = BACKFILL) -> int:
    """Price and store up to `limit` settled runs whose stored figure is missing or no longer usable."""
    book = price_book()
    ids = list(Run.objects.filter(_settled(), _stale(book)).order_by("pk").values_list("pk", flat=True)[:limit])
    stored = 0
    for i in range(0, len(ids), CHUNK):
        chunk = Run.objects.filter(pk__in=ids[i : i + CHUNK]).only(*RUN_COST_FIELDS)
        stored += cache(breakdowns_for_runs(list(chunk), now=as_of), as_of, book)
    return stored


def usable(book: str) -> Q:
    """Runs whose stored figure is still the engine's answer (`book`: today's `price_book()`)."""
    return _settled() & ~_stale(book)


def stored_figures(run_ids: Iterable[int], book: str | None = None) -> dict[int, tuple[Decimal, str]]:
    """Per run id whose stored figure is still the engine's answer: (usd, kind); the others are absent.

    The conditions are checked in the database: the price book's digest (two queries, or
    `book` when the caller has it), then one query.
    """
    ids = list(run_ids)
    if not ids:
        return {}
    found = Run.objects.filter(usable(book or price_book()), pk__in=ids)
    return {pk: (usd, kind) for pk, usd, kind in found.values_list("pk", "cost_figure__usd", "cost_figure__kind")}
