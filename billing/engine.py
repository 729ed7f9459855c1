"""The one function that answers what a run cost: `run_costs` (and `run_cost` for one run).

The estimate is `billing.costs.run_costs.breakdowns_for_runs` (serverless accelerator-hours, a share
of classic cluster uptime, egress, idle GPUs), the same the rollups write, so a run page adds
up to what the cost pages show. Where the provider's usage records are linked to the run, the
billed figure comes from `billing.reconcile` beside it. Pages and template tags compute no money.

Money by period has its door here too: a team's month (`team_months`: the estimate from
`billing.costs.spend.team_month`, the billed figure beside it), and the billed figure of any
scope a cost page, a policy, the API or `/metrics` shows (`billed_between`, `billed_by_team`,
`policy_billed`, `billed_by_team_and_policy`): imported usage records dated in the range
(`billing.reconcile.billed`). Each is None where no imported record covers the scope, and the
pages then show the estimate alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, Q, QuerySet, TextField, Value
from django.db.models.functions import Concat
from django.utils import timezone

from billing.costs.failed import price_book
from billing.costs.figures import stored_figures, unusable
from billing.costs.reports import CostFilters
from billing.costs.run_costs import RunBreakdown, breakdowns_for_runs
from billing.costs.spend import TeamMonth, team_month
from billing.models import BilledUsage, RunCostFigure
from billing.prices.money import BILLED, Figure, month_start, utc
from billing.reconcile.billed import BilledSpend, billed_by, billed_spend, scoped_usage
from billing.reconcile.matching import BilledFigure, per_run
from dashboard.kit.csv_export import SqlDecimalCell, SqlIntegerCell, SqlTextCell
from runs.models import Run

__all__ = [
    "BilledSpend", "RunCostAnswer", "RunFigures", "TeamSpend", "billed_between", "billed_by_team",
    "billed_by_team_and_policy", "policy_billed", "run_cost", "run_costs", "team_months",
]  # fmt: skip


@dataclass(frozen=True)
class RunCostAnswer:
    """A run's estimate (`breakdown`) and, when usage records are linked, what was billed."""

    breakdown: RunBreakdown
    billed: BilledFigure | None

    @property
    def estimate(self) -> Figure:
        return self.breakdown.figure

    @property
    def billed_figure(self) -> Figure | None:
        if self.billed is None:
            return None
        unpriced = (f"{self.billed.unpriced} usage record(s) without a list price",) if self.billed.unpriced else ()
        return Figure(self.billed.billed, BILLED, self.breakdown.as_of, unpriced)

    def as_json(self) -> dict[str, Any]:
        """The API's `cost`: the run page's figure. `usd`, `kind` (estimated or lower bound),
        `reasons` (what is unpriced or counted at its least) and `as_of` are the estimate's;
        `billed` is the linked usage records' figure, null until one is imported."""
        estimate = self.estimate.as_json()
        billed = self.billed_figure
        return {
            "usd": estimate["usd"],
            "kind": estimate["kind"],
            "reasons": estimate["unpriced"],
            "as_of": estimate["as_of"],
            "running": self.breakdown.running,
            # billed_figure is None exactly when self.billed is.
            "billed": None
            if billed is None or self.billed is None
            else billed.as_json() | {"records": self.billed.records},
        }


def run_costs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunCostAnswer]:
    """Each run's cost answer, keyed by run id, in a constant number of queries."""
    runs = list(runs)
    as_of = utc(now or timezone.now(), "now")
    breakdowns = breakdowns_for_runs(runs, now=as_of)
    billed = per_run(runs, now=as_of, breakdowns=breakdowns) if runs else {}
    return {
        run.pk: RunCostAnswer(breakdowns[run.pk], billed[run.pk] if billed[run.pk].records else None) for run in runs
    }


class RunFigures:
    """Many runs' cost as the runs table shows it, a chunk at a time: the run list's CSV.

    `of(run_ids)` answers per run (estimate usd, its kind, billed usd or None), the numbers of
    `run_costs`: the stored figure where it is still the engine's answer
    (`billing.costs.figures.stored_figures`), every other run priced by `run_costs` at `now`.
    """

    def __init__(self, now: datetime | None = None) -> None:
        self.now = utc(now or timezone.now(), "now")
        self.book = price_book()  # once a download, not once a chunk

    def stored(self) -> tuple[Q, str, str]:
        """For a query of runs: the runs whose stored figure is not usable, and the stored figure's
        usd and kind columns. The runs are read here, from the figures alone (`figures.unusable`,
        one query): as a subquery PostgreSQL cannot tell how few they are (a comparison of two
        columns of a row is guessed true for nearly all) and read all 100,000 runs to join them."""
        ids = list(unusable(self.book).values_list("run_id", flat=True))
        return Q(pk__in=ids), "cost_figure__usd", "cost_figure__kind"

    def stored_cells(self) -> QuerySet[RunCostFigure]:
        """The usable stored figures as the CSV writes them: the run's id, usd, kind and an empty
        bill (a run with a stored figure has no billed usage), in SQL (dashboard.kit.csv_export's rules)."""
        usable = RunCostFigure.objects.filter(priced_version=F("version"), price_book=self.book)
        cells = Concat(
            SqlDecimalCell(F("usd")), Value(","), SqlTextCell(F("kind")), Value(","), output_field=TextField()
        )
        return usable.values_list(SqlIntegerCell(F("run_id")), cells)

    def of(self, run_ids: Iterable[int]) -> dict[int, tuple[Decimal, str, Decimal | None]]:
        ids = list(run_ids)
        out: dict[int, tuple[Decimal, str, Decimal | None]] = {
            pk: (usd, kind, None) for pk, (usd, kind) in stored_figures(ids, self.book).items()
        }
        rest = Run.objects.filter(pk__in=[pk for pk in ids if pk not in out])
        for pk, answer in run_costs(rest, now=self.now).items():
            billed = answer.billed_figure
            out[pk] = (answer.estimate.usd, answer.estimate.kind, None if billed is None else billed.usd)
        return out


def run_cost(run: Run, now: datetime | None = None) -> RunCostAnswer:
    """`run_costs` for one run: what the run page shows."""
    return run_costs([run], now=now)[run.pk]


# --- Money by period: the estimate and, where usage records are imported, the bill ----------


def billed_between(team_ids: Iterable[int], filters: CostFilters, now: datetime | None = None) -> BilledSpend | None:
    """What imported usage records billed for the runs a cost page with `filters` sums."""
    return billed_spend(scoped_usage(team_ids, filters), now or timezone.now())


def billed_by_team(
    team_ids: Iterable[int], start: date, end: date, now: datetime | None = None
) -> dict[int, BilledSpend]:
    """`billed_between` per team (by id) over [start, end]; teams without records are absent."""
    usage = scoped_usage(team_ids, CostFilters(start, end))
    return {key[0]: spend for key, spend in billed_by(usage, ("run__team_id",), now or timezone.now()).items()}


def policy_billed(
    name: str, team_ids: list[int] | None, start: date, last: date, now: datetime | None = None
) -> BilledSpend | None:
    """Billed for the runs naming policy `name` in `team_ids` (None: every team), dated in [start, last]:
    the runs the policy's spend sums (`billing.policies.budget.policy_rows`)."""
    usage = BilledUsage.objects.filter(
        run__usage_policy_name=name, usage_date__gte=start, usage_date__lte=last, run__isnull=False
    )
    if team_ids is not None:
        usage = usage.filter(run__team_id__in=team_ids)
    return billed_spend(usage, now or timezone.now())


def billed_by_team_and_policy(start: date, end: date, now: datetime | None = None) -> dict[tuple, BilledSpend]:
    """Billed per (team name, usage policy name) over [start, end], every team: `/metrics`."""
    usage = BilledUsage.objects.filter(usage_date__gte=start, usage_date__lte=end, run__isnull=False)
    return billed_by(usage, ("run__team__name", "run__usage_policy_name"), now or timezone.now())


@dataclass(frozen=True)
class TeamSpend:
    """A team's month to date: the estimate (`month`) and, where usage records are imported, the bill."""

    month: TeamMonth
    billed: BilledSpend | None


def team_months(team_ids: Iterable[int], now: datetime | None = None) -> list[TeamSpend]:
    """Each team's UTC month to date, estimated and billed: the overview's team table and its CSV."""
    team_ids = list(team_ids)
    as_of = utc(now or timezone.now(), "now")
    months = team_month(team_ids, now=as_of)
    billed = billed_by_team(team_ids, month_start(as_of).date(), as_of.date(), as_of) if months else {}
    return [TeamSpend(month, billed.get(month.team_id)) for month in months]
