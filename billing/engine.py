"""The one door from runs into billing: everything runs asks of billing, it asks here.

`lint-imports` keeps it so (pyproject.toml, "Runs enters billing through one door"): outside
billing only the project package (dashboard/) imports billing's modules, and runs imports this
one alone. Billing's own modules never import the door; they import the modules behind it.
What runs asks, by topic:

- A run's cost: `run_costs` (and `run_cost` for one run), answered in `billing.reconcile.answers`.
  The estimate is `billing.costs.run_costs.breakdowns_for_runs` (serverless accelerator-hours, a
  share of classic cluster uptime, egress, idle GPUs), the same the rollups write, so a run page
  adds up to what the cost pages show; where the provider's usage records are linked to the run,
  the billed figure comes from `billing.reconcile` beside it. `RunFigures` answers the same for
  the run list's CSV, a chunk at a time. Pages and template tags compute no money.
- Pieces of money runs' pages show: classic clusters' uptime, idle and what-if
  (`cluster_costs`, `team_totals`: billing.costs.clusters), stalled GPUs so far (`stall_costs`:
  billing.costs.stalls; runs finds the stalls), failed attempts (`failed_attempts_cost`).
- Budget policies (billing.policies.budget): launch admission (`admit`, `Decision`,
  `Violation`), whether a run may name a policy (`naming_problem`), and which policy a collected
  run's Databricks usage policy id names (`policy_for_databricks_id`, the run source).
- Money to the cent for display (`format_usd`, `to_cents`: billing.prices.money).
- Money by period: a team's month (`team_months`: the estimate from
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

from django.db.models import F, Q, QuerySet, TextField, Value
from django.db.models.functions import Concat
from django.utils import timezone

from billing.costs.clusters import ClusterCost, TeamClusterCost, cluster_costs, team_totals
from billing.costs.failed import failed_attempts_cost, price_book
from billing.costs.figures import stored_figures, unusable
from billing.costs.reports import CostFilters
from billing.costs.run_costs import RunBreakdown, breakdowns_for_runs
from billing.costs.spend import TeamMonth, team_month
from billing.costs.stalls import stall_costs
from billing.models import BilledUsage, RunCostFigure
from billing.policies.admission import Decision, Violation, admit
from billing.policies.naming import naming_problem, policy_for_databricks_id
from billing.prices.money import format_usd, month_start, to_cents, utc
from billing.reconcile.answers import RunCostAnswer, run_cost, run_costs
from billing.reconcile.billed import BilledSpend, billed_by, billed_spend, policy_billed, scoped_usage
from dashboard.kit.csv_export import SqlDecimalCell, SqlIntegerCell, SqlTextCell
from runs.models import Run

__all__ = [
    "BilledSpend", "ClusterCost", "Decision", "RunBreakdown", "RunCostAnswer", "RunFigures",
    "TeamClusterCost", "TeamSpend", "Violation", "admit", "billed_between", "billed_by_team",
    "billed_by_team_and_policy", "breakdowns_for_runs", "cluster_costs", "failed_attempts_cost", "format_usd",
    "naming_problem", "policy_billed", "policy_for_databricks_id", "run_cost", "run_costs", "stall_costs",
    "team_months", "team_totals", "to_cents",
]  # fmt: skip


# --- Many runs' cost, as the run list's CSV reads it -----------------------------------------


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

    def stored_cells(self, team_ids: Iterable[int] | None) -> QuerySet[RunCostFigure]:
        """The usable stored figures of the runs of `team_ids` (None: every team, for staff) as
        the CSV writes them: the run's id, usd, kind and an empty bill (a run with a stored figure
        has no billed usage), in SQL (dashboard.kit.csv_export's rules). Only the caller's teams':
        another team's runs add nothing to a download's reads."""
        usable = RunCostFigure.objects.filter(priced_version=F("version"), price_book=self.book)
        if team_ids is not None:
            usable = usable.filter(run__team_id__in=list(team_ids))
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
