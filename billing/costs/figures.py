"""A settled run's cost figure, stored, so a download of 100,000 runs reads it rather than pricing each.

The figure is the cost engine's (`breakdowns_for_runs`): the run's total and what it is
(estimated, or a lower bound), the `cost` the run page and the runs table show
(`billing.engine.run_costs`). Pricing every run of the run list's CSV took ~1 ms a run (100 s
at 100,000 runs). A settled run's figure changes only when the run does, when a price does, or
when a record of its own arrives; so the cost rollup pass, which prices runs anyway, stores it
(`RunCostFigure`), and `stored_figures` hands it back only while it is still the engine's answer.

Valid by construction, decided where things are written rather than per row on read:

- Stored only for settled runs (`_settled`, checked when storing): not active, no attempt
  still running (it would accrue to now), not a classic run on a cluster (its share of the
  cluster's uptime moves with the other runs on it), no egress record and no billed usage
  record (those arrive later than the run's last write, so such runs are always priced).
- Every write to what a figure rests on bumps the run's `RunCostFigure.version` in the
  database, in the writer's transaction, whoever writes (billing.costs.figure_triggers): the
  run's row, its attempts, egress records, billed usage records (imported, linked, unlinked).
  A run that starts running again, gains an attempt, moves to a cluster or gets a record is
  such a write; so is a bulk `update()` that stamps no `updated_at`.
- The pass reads the versions before it prices (`versions`) and stores the figure with the
  version it read (`priced_version`): a write committed after that read leaves the figure out
  of date however the two interleave.
- The price book is the one it was priced with (`failed.price_book`, stored beside it).

So a figure is the engine's answer exactly when `priced_version = version` and its price book
is today's: two columns of the figure's own row, no subquery (`usable`).

Idle GPU-minutes arriving late change neither: idle cost is part of compute, not added to
it, and where it has no price the compute has none either (the figure is a lower bound already).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, Q, QuerySet

from billing.costs.failed import ON_SHARED_CLUSTER, price_book
from billing.costs.run_costs import RUN_COST_FIELDS, RunBreakdown, breakdowns_for_runs
from billing.models import BilledUsage, EgressRecord, RunCostFigure
from runs.choices import RunStatus
from runs.models import Attempt, Run

# Runs without a usable stored figure that one rollup pass prices (a new install's backfill).
BACKFILL = 20_000
# Runs priced per batch.
CHUNK = 2000


def _settled() -> Q:
    """Runs whose figure does not move with time or with other runs (see the module docstring):
    what may be stored. Checked when storing, never on read."""
    running = Attempt.objects.filter(started_at__isnull=False, ended_at__isnull=True).values("run_id")
    egress = EgressRecord.objects.values("run_id")
    billed = BilledUsage.objects.filter(run_id__isnull=False).values("run_id")
    return (
        ~Q(status__in=RunStatus.active())
        & ~ON_SHARED_CLUSTER
        & ~Q(pk__in=running)
        & ~Q(pk__in=egress)
        & ~Q(pk__in=billed)
    )


def usable(book: str) -> Q:
    """Runs whose stored figure is still the engine's answer (`book`: today's `price_book()`):
    priced at the version the database keeps for the run, with today's price book."""
    return Q(cost_figure__priced_version=F("cost_figure__version"), cost_figure__price_book=book)


def unusable(book: str) -> QuerySet[RunCostFigure, Any]:
    """The ids of the runs whose stored figure is not the engine's answer: every run has a row
    (billing.costs.figure_triggers), so this reads the figures alone, not every run."""
    return RunCostFigure.objects.exclude(priced_version=F("version"), price_book=book).values("run_id")


def versions(run_ids: Iterable[int]) -> dict[int, int]:
    """Per run id, the version of what its figure rests on; read before pricing (absent: 0)."""
    ids = list(run_ids)
    return dict(RunCostFigure.objects.filter(run_id__in=ids).values_list("run_id", "version")) if ids else {}


def cache(breakdowns: dict[int, RunBreakdown], as_of: datetime, seen: dict[int, int], book: str | None = None) -> int:
    """Store the figure of the settled runs among `breakdowns` (priced at `as_of`), each with the
    version `seen` read before they were priced (`versions`): a write since leaves it unusable."""
    ids = set(Run.objects.filter(_settled(), pk__in=list(breakdowns)).values_list("pk", flat=True))
    ids = {pk for pk in ids if not breakdowns[pk].running}
    if not ids:
        return 0
    book = book or price_book()
    rows = []
    for pk in sorted(ids):  # rows locked in one order, as the triggers lock them
        figure = breakdowns[pk].figure
        rows.append(
            RunCostFigure(
                run_id=pk, usd=figure.usd, kind=figure.kind, priced_at=as_of, price_book=book,
                version=seen.get(pk, 0), priced_version=seen.get(pk, 0),
            )
        )  # fmt: skip
    # A new row takes the version read (0: none); an existing row keeps its own, which a write
    # since has bumped past the one read.
    RunCostFigure.objects.bulk_create(
        rows, batch_size=1000, update_conflicts=True, unique_fields=["run"],
        update_fields=["usd", "kind", "priced_at", "price_book", "priced_version"],
    )  # fmt: skip
    return len(rows)


def backfill(as_of: datetime, limit: int = BACKFILL) -> int:
    """Price and store up to `limit` settled runs whose stored figure is missing or no longer usable."""
    book = price_book()
    ids = list(Run.objects.filter(_settled()).exclude(usable(book)).order_by("pk").values_list("pk", flat=True)[:limit])
    stored = 0
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        seen = versions(chunk)
        runs = Run.objects.filter(pk__in=chunk).only(*RUN_COST_FIELDS)
        stored += cache(breakdowns_for_runs(list(runs), now=as_of), as_of, seen, book)
    return stored


def stored_figures(run_ids: Iterable[int], book: str | None = None) -> dict[int, tuple[Decimal, str]]:
    """Per run id whose stored figure is still the engine's answer: (usd, kind); the others are absent.

    The price book's digest (two queries, or `book` when the caller has it), then one query.
    """
    ids = list(run_ids)
    if not ids:
        return {}
    found = Run.objects.filter(usable(book or price_book()), pk__in=ids)
    rows = found.values_list("pk", "cost_figure__usd", "cost_figure__kind")
    # A usable figure was priced, so its usd is set (usable() matches priced_version).
    return {pk: (usd, kind) for pk, usd, kind in rows if usd is not None}
