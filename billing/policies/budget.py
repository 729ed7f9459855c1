"""Usage and budget policies: periods, spend against budget, forecasts.

A policy is named exactly as workloads spell `usage_policy_name`. Its spend in a period is
the CostDaily rows of that name in the teams it covers (a policy with no teams covers every
team), plus what running runs accrued since the last rollup pass (`evaluate`).

The rest of a policy lives beside this module: admission (`billing.policies.admission`),
which names a run may carry (`billing.policies.naming`), versions (`billing.policies.versions`)
and the burn-down chart (`billing.policies.charts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from billing.choices import BudgetPeriod
from billing.costs import reports, spend
from billing.models import CostDaily, UsagePolicy
from billing.prices.money import (
    FORECAST,
    PROVISIONAL_FORECAST,
    ZERO,
    Figure,
    estimate,
    exact_sum,
    utc,
)
from billing.reconcile.billed import BilledSpend, policy_billed
from runs.choices import RunStatus
from runs.models import Run

# Forecasts from less elapsed time than this are mostly noise (as reports.MIN_FORECAST_DAYS).
MIN_FORECAST_DAYS = reports.MIN_FORECAST_DAYS
QUARTER_MONTHS = (1, 4, 7, 10)


# --- Periods -----------------------------------------------------------------------------


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, day.day)


def period_bounds(policy: UsagePolicy, today: date) -> tuple[date, date]:
    """The period holding `today`: [start, end) in UTC days, starting on `period_start_day`."""
    start_day = policy.period_start_day
    months = 3 if policy.period == BudgetPeriod.QUARTER else 1
    start = date(today.year, today.month, start_day)
    if start > today:
        start = _add_months(start, -1)
    if months == 3:
        while start.month not in QUARTER_MONTHS:
            start = _add_months(start, -1)
    return start, _add_months(start, months)


# --- Spend -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyStatus:
    """Where a policy stands in its current period."""

    policy: UsagePolicy
    period_start: date
    period_end: date
    spend: Decimal
    forecast: Decimal | None
    daily: tuple[tuple[date, Decimal], ...]
    now: datetime
    unpriced: tuple[str, ...] = ()
    # Before MIN_FORECAST_DAYS of the period: the trailing run rate's forecast (never alerted on).
    provisional_forecast: Decimal | None = None
    # What imported usage records billed for the policy's runs this period; None when none is imported.
    billed: BilledSpend | None = None

    # Budget enforcement (alerts, refusals, cancels) reads `spend`, the estimate: the bill comes
    # hours late and only for the days imported, so it cannot stop a run that is spending now.
    ENFORCED_BY = "estimate"

    @property
    def spend_figure(self) -> Figure:
        return estimate(self.spend, self.now, self.unpriced)

    @property
    def forecast_figure(self) -> Figure | None:
        if self.forecast is not None:
            return Figure(self.forecast, FORECAST, self.now)
        if self.provisional_forecast is not None:
            return Figure(self.provisional_forecast, PROVISIONAL_FORECAST, self.now)
        return None

    @property
    def period_last(self) -> date:
        """The period's last day (its end is excluded): the `end` of its cost page link."""
        return self.period_end - timedelta(days=1)

    @property
    def budget(self) -> Decimal | None:
        return self.policy.budget_usd

    @property
    def remaining(self) -> Decimal | None:
        return None if self.budget is None else self.budget - self.spend

    @property
    def share(self) -> Decimal | None:
        """Spend over budget, unrounded (1 = all of it): what the policy list sorts by."""
        if not self.budget:
            return None
        return self.spend / self.budget

    @property
    def percent(self) -> Decimal | None:
        """`share` as the pages print it: a percent to one place."""
        share = self.share
        return None if share is None else (share * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_EVEN)

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.spend >= self.budget


def covered_team_ids(policy: UsagePolicy) -> list[int] | None:
    """Ids of the teams a policy covers; None when it covers every team."""
    ids = [team.pk for team in policy.teams.all()]
    return ids or None


def running_runs(policy: UsagePolicy, team_ids: list[int] | None) -> list[Run]:
    """Runs under the policy still holding GPUs (a run that never started accrues nothing)."""
    runs = Run.objects.filter(usage_policy_name=policy.name, status=RunStatus.RUNNING, started_at__isnull=False)
    if team_ids is not None:
        runs = runs.filter(team_id__in=team_ids)
    return list(runs)


def policy_rows(policy: UsagePolicy, start: date, last: date) -> QuerySet[CostDaily]:
    """The rollup rows a policy's spend sums: its name, its teams, days in [start, last]."""
    rows = CostDaily.objects.filter(usage_policy_name=policy.name, day__gte=start, day__lte=last)
    team_ids = covered_team_ids(policy)
    return rows if team_ids is None else rows.filter(team_id__in=team_ids)


def policy_accrual(policy: UsagePolicy, now: datetime) -> list[dict[str, Any]]:
    """`billing.costs.spend.accrual` rows of the policy's name and teams: the same filter as `policy_rows`."""
    team_ids = covered_team_ids(policy)
    return [row for row in spend.accrual(team_ids, now) if row["usage_policy_name"] == policy.name]


def evaluate(policy: UsagePolicy, now: datetime | None = None) -> PolicyStatus:
    """The policy's spend, daily series and forecast in the period holding `now`.

    1. Period bounds from the policy (`period_bounds`).
    2. CostDaily rows of the period, today included, with the policy's name in its teams,
       summed per day (exact decimals).
    3. Plus running runs' accrual since the last rollup (`billing.costs.spend.accrual`), the
       same as every other surface adds.
    4. Forecast, linear in elapsed time, once MIN_FORECAST_DAYS of the period have passed:
       spend / elapsed x period length. Before that, a provisional one from the trailing run
       rate (`reports.trailing_window`, reaching back across the period's start): shown, never alerted on.
    5. Beside it, what imported usage records billed for the same runs and days (`billed.policy_billed`).
    """
    now = utc(now or timezone.now())
    start, end = period_bounds(policy, now.date())
    trailing_first, _ = reports.trailing_window(now)
    first = min(start, trailing_first)
    rows = policy_rows(policy, first, now.date())
    extra = [row for row in policy_accrual(policy, now) if first <= row["day"] < end]
    by_day = {row["day"]: row["total_usd"] for row in reports.sum_by(rows, ["day"], extra)}
    daily = tuple(sorted((day, usd) for day, usd in by_day.items() if day >= start))
    spend = exact_sum(v for _, v in daily) if daily else ZERO
    # The one rule `/costs/` follows too: linear from 3 days in, provisional before (never alerted on).
    found, provisional = reports.period_forecast(by_day, start, end, now)
    forecast, provisional_forecast = (None, found) if provisional else (found, None)
    period_rows = rows.filter(day__gte=start)
    unpriced = tuple(reports.unpriced_reasons(period_rows, [row for row in extra if row["day"] >= start]))
    billed = policy_billed(policy.name, covered_team_ids(policy), start, now.date(), now)
    return PolicyStatus(policy, start, end, spend, forecast, daily, now, unpriced, provisional_forecast, billed)
