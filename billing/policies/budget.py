"""Usage and budget policies: periods, spend against budget, forecasts, admission, versions.

A policy is named exactly as workloads spell `usage_policy_name`. Its spend in a period is
the CostDaily rows of that name in the teams it covers (a policy with no teams covers every
team), plus what running runs accrued since the last rollup pass. Admission (`admit`) answers
allow or deny, with one violation per broken rule, each a sentence a person can act on.

Decisions documented here:
- A workload naming no policy is allowed (nothing constrains it) with a warning; one naming
  a policy that does not exist is denied, since a typo would otherwise escape every budget.
- `usage_policy_id` cannot be resolved here (ids live in the workspace): allowed with a warning.
- Region: the admission request's `region`, else the team's home region (the `home_region`
  of its latest run). A policy with allowed regions denies when neither is known.
- Cross-region: a workspace region where serverless GPUs are not offered always gets its GPUs
  from another region, so a policy that forbids cross-region GPUs denies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Any, Protocol

from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from billing.choices import BudgetPeriod, SpentAction
from billing.costs import reports, spend
from billing.costs.serverless import accelerator_prices
from billing.engine import BilledSpend, policy_billed
from billing.models import Admission, CostDaily, PolicyVersion, UsagePolicy
from billing.prices.money import (
    CENT,
    FORECAST,
    PROVISIONAL_FORECAST,
    ZERO,
    Figure,
    estimate,
    exact_sum,
    format_usd,
    price_in_force,
    to_cents,
    utc,
    utc_midnight,
)
from dashboard.kit.figures import base_layout
from runs.choices import Region, RunStatus
from runs.models import Run

if TYPE_CHECKING:
    from runs.workload.schema import Workload

# Forecasts from less elapsed time than this are mostly noise (as reports.MIN_FORECAST_DAYS).
MIN_FORECAST_DAYS = reports.MIN_FORECAST_DAYS
QUARTER_MONTHS = (1, 4, 7, 10)
# Fields of a policy kept in a version snapshot, in the order the diff lists them.
VERSIONED = (
    "name", "description", "teams", "budget_usd", "period", "period_start_day", "alert_thresholds",
    "forecast_thresholds", "action", "allowed_accelerator_types", "max_num_accelerators",
    "max_timeout_minutes", "max_retries", "allowed_regions", "allow_cross_region", "idle_gpu_percent",
    "idle_warn_minutes", "idle_cancel_minutes",
)  # fmt: skip


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


def naming_problem(team: Group, name: str) -> str:
    """Why a run of `team` may not name the policy `name` ('' when it may).

    A run names only a policy that covers its own team: naming another team's policy would
    count the run's cost against that team's budget (and its cancel action against their runs).
    A name no policy has is allowed: the workspace may hold policies Airboard does not mirror.
    """
    policy = UsagePolicy.objects.prefetch_related("teams").filter(name=name).first() if name else None
    team_ids = covered_team_ids(policy) if policy is not None else None
    if team_ids is not None and team.pk not in team_ids:
        return f"Policy {name} does not cover team {team.name}; use one of your team's policies."
    return ""


def policy_for_databricks_id(team: Group, policy_id: str) -> tuple[str, str]:
    """(policy name, problem) for a collected run of `team` attributed to Databricks policy `policy_id`.

    The run links to the policy whose `databricks_policy_id` is that id, when it covers the
    run's team (as `naming_problem` asks of a named policy). ('', '') when no policy has the
    id: the workspace may hold policies Airboard does not mirror; ('', why) when the policy
    covers other teams only.
    """
    policy_id = policy_id.strip().lower()
    policy = UsagePolicy.objects.prefetch_related("teams").filter(databricks_policy_id=policy_id).first()
    if not policy_id or policy is None:
        return "", ""
    problem = naming_problem(team, policy.name)
    return ("", problem) if problem else (policy.name, "")


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
    5. Beside it, what imported usage records billed for the same runs and days (`billing.engine`).
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


def _plot_time(moment: datetime) -> str:
    """A UTC moment as Plotly's date axis reads it (no zone suffix: the axis is UTC)."""
    return utc(moment).strftime("%Y-%m-%d %H:%M:%S")


def burn_down_figure(status: PolicyStatus) -> dict[str, Any] | None:
    """Cumulative spend over the period against the budget line, as a Plotly figure dict.

    The spend line starts at $0 at the period's start and steps to each day's cumulative total
    at that day's end (00:00 UTC the next day); today's point is at `now`, since today is not
    over. So even on the period's first day the chart is a line from the start, and the x axis
    always spans the whole period with the budget line across it: it reads as a burn-down.
    The totals are the status's daily sums, unchanged.
    """
    if status.budget is None and not status.daily:
        return None
    period_start, period_end = utc_midnight(status.period_start), utc_midnight(status.period_end)
    now = min(max(status.now, period_start), period_end)
    by_day = dict(status.daily)
    x, cumulative, total = [_plot_time(period_start)], [0.0], ZERO
    day = status.period_start
    while day < status.period_end and utc_midnight(day) < now:
        total = exact_sum([total, by_day.get(day, ZERO)])
        x.append(_plot_time(min(utc_midnight(day + timedelta(days=1)), now)))
        cumulative.append(round(float(total), 2))
        day += timedelta(days=1)
    # Hover money as the pages print it (`format_usd`: "$6,254.12"), not Plotly's "$6254.12".
    money = "%{x}<br>%{fullData.name}: $%{y:,.2f}<extra></extra>"
    spend_line = {"type": "scatter", "mode": "lines+markers", "name": "Spend", "x": x, "y": cumulative,
                  "hovertemplate": money}  # fmt: skip
    data: list[dict[str, Any]] = [spend_line]
    ends = [_plot_time(period_start), _plot_time(period_end)]
    if status.budget is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "Budget", "x": ends,
                     "y": [float(status.budget)] * 2, "line": {"dash": "dash"}, "hovertemplate": money})  # fmt: skip
    if status.forecast is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "Forecast", "x": [x[-1], ends[1]],
                     "y": [cumulative[-1], float(status.forecast)], "line": {"dash": "dot"},
                     "hovertemplate": money})  # fmt: skip
    layout = base_layout(
        height=260,
        top=10,
        right=10,
        xaxis={"title": {"text": "Day (UTC)"}, "type": "date", "range": ends},
        yaxis={"title": {"text": "USD"}, "tickprefix": "$", "tickformat": ",.2~f", "rangemode": "tozero"},
    )
    return {"data": data, "layout": layout}


# --- Admission ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One rule a workload breaks, with what to do about it."""

    rule: str
    message: str


@dataclass
class Decision:
    """Admission's answer: allow unless there is a violation."""

    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    policy: str | None = None
    remaining_budget_usd: Decimal | None = None
    estimated_usd_per_hour: Decimal | None = None
    region: str = ""

    @property
    def allowed(self) -> bool:
        return not self.violations

    @property
    def decision(self) -> str:
        return "allow" if self.allowed else "deny"

    def as_dict(self) -> dict[str, Any]:
        money = lambda v: None if v is None else reports.decimal_str(to_cents(v))  # noqa: E731
        return {
            "decision": self.decision,
            "violations": [{"rule": v.rule, "message": v.message} for v in self.violations],
            "warnings": self.warnings,
            "policy": self.policy,
            "region": self.region,
            "remaining_budget_usd": money(self.remaining_budget_usd),
            "estimated_usd_per_hour": money(self.estimated_usd_per_hour),
        }


def home_region(team: Group) -> str:
    """The team's home region: its latest run's workspace region ('' when it has none)."""
    found = Run.objects.filter(team=team).exclude(home_region="").order_by("-submitted_at")
    return found.values_list("home_region", flat=True).first() or ""


def estimated_usd_per_hour(workload: Workload, region: str, now: datetime) -> Decimal | None:
    """num_accelerators x the accelerator-hour price in force now, or None without a price."""
    if not region:
        return None
    key = (workload.accelerator_type, region)
    periods = accelerator_prices({key})[key]
    price = price_in_force(periods, [p.effective_from for p in periods], now)
    return None if price is None else price.usd_per_hour * workload.num_accelerators


class Shaped(Protocol):
    """What the constraints read: a Workload before admission, or a Run already stored."""

    # Read-only members: a Workload's fields are frozen.
    @property
    def accelerator_type(self) -> str: ...
    @property
    def num_accelerators(self) -> int: ...
    @property
    def timeout_minutes(self) -> int | None: ...
    @property
    def max_retries(self) -> int: ...


def constraint_violations(policy: UsagePolicy, workload: Shaped, region: str) -> list[Violation]:
    """The policy's run constraints this workload (or a stored run's shape) breaks (budget aside)."""
    out = []
    name = policy.name
    if policy.allowed_accelerator_types and workload.accelerator_type not in policy.allowed_accelerator_types:
        allowed = ", ".join(policy.allowed_accelerator_types)
        out.append(
            Violation(
                "accelerator_type",
                f"Policy {name} allows only {allowed}; set compute.accelerator_type "
                f"to one of them (got {workload.accelerator_type}).",
            )
        )
    if policy.max_num_accelerators is not None and workload.num_accelerators > policy.max_num_accelerators:
        out.append(
            Violation(
                "num_accelerators",
                f"Policy {name} allows at most {policy.max_num_accelerators} "
                f"accelerators; lower compute.num_accelerators "
                f"(got {workload.num_accelerators}).",
            )
        )
    if policy.max_timeout_minutes is not None and (
        workload.timeout_minutes is None or workload.timeout_minutes > policy.max_timeout_minutes
    ):
        got = workload.timeout_minutes if workload.timeout_minutes is not None else "none"
        out.append(
            Violation(
                "timeout_minutes",
                f"Policy {name} allows runs of at most {policy.max_timeout_minutes} "
                f"minutes; set timeout_minutes to that or less (got {got}).",
            )
        )
    if policy.max_retries is not None and workload.max_retries > policy.max_retries:
        out.append(
            Violation(
                "max_retries",
                f"Policy {name} allows at most {policy.max_retries} retries; lower "
                f"max_retries (got {workload.max_retries}).",
            )
        )
    if policy.allowed_regions and not region:
        out.append(
            Violation(
                "region",
                f"Policy {name} allows only {', '.join(policy.allowed_regions)} and the "
                f"region is unknown; pass the workspace region with the request.",
            )
        )
    elif policy.allowed_regions and region not in policy.allowed_regions:
        out.append(
            Violation(
                "region",
                f"Policy {name} allows only {', '.join(policy.allowed_regions)}; submit from "
                f"a workspace there (got {region}).",
            )
        )
    if not policy.allow_cross_region and region and region not in Region.values:
        out.append(
            Violation(
                "cross_region",
                f"Serverless GPUs are not offered in {region}, so the run would get "
                f"GPUs in another region, which policy {name} forbids; submit from "
                f"one of {', '.join(Region.values)}.",
            )
        )
    return out


# Admission reads a policy's spend at most this often: evaluating it prices every running run
# under the policy, which cost ~20 ms a request; the rollups it reads move every 5 minutes anyway.
SPEND_CACHE_SECONDS = 30


def cached_spend(policy: UsagePolicy, now: datetime) -> Decimal:
    """The policy's spend this period, from `evaluate`, cached per policy version and period."""
    start, _ = period_bounds(policy, now.date())
    key = f"policy-spend:{policy.pk}:{policy.updated_at.timestamp()}:{start.isoformat()}"
    cached = cache.get(key)
    if cached is not None:
        return Decimal(cached)
    spend = evaluate(policy, now).spend
    cache.set(key, str(spend), SPEND_CACHE_SECONDS)
    return spend


def admit(workload: Workload, team: Group, *, region: str | None = None, now: datetime | None = None) -> Decision:
    """Whether `team` may start `workload` now under its usage policy.

    1. Region: the given one, else the team's home region.
    2. No usage_policy_name: allow with a warning. A name with no policy, or a policy that
       does not cover the team: deny.
    3. Constraints (`constraint_violations`).
    4. Budget: a spent budget denies when the policy's action refuses or cancels.
    """
    now = utc(now or timezone.now())
    decision = Decision(region=region or home_region(team))
    decision.estimated_usd_per_hour = estimated_usd_per_hour(workload, decision.region, now)
    name = workload.usage_policy_name
    if not name:
        if workload.usage_policy_id:
            decision.warnings.append("usage_policy_id cannot be checked here; name the policy to have it checked.")
        else:
            decision.warnings.append("The workload names no usage policy, so no budget or limits apply to it.")
        return decision
    decision.policy = name
    policy = UsagePolicy.objects.prefetch_related("teams").filter(name=name).first()
    if policy is None:
        decision.violations.append(
            Violation(
                "usage_policy_name",
                f"No usage policy is named {name!r}; check the spelling or ask a policy admin to create it.",
            )
        )
        return decision
    team_ids = covered_team_ids(policy)
    if team_ids is not None and team.pk not in team_ids:
        decision.violations.append(
            Violation(
                "usage_policy_name", f"Policy {name} does not cover team {team.name}; use one of your team's policies."
            )
        )
        # Not recorded: the admission log is the policy's teams' page, and another team's dry
        # runs would write rows into it (issue 33).
        return decision
    decision.violations += constraint_violations(policy, workload, decision.region)
    if policy.budget_usd is not None:
        spend = cached_spend(policy, now)
        decision.remaining_budget_usd = policy.budget_usd - spend
        if spend >= policy.budget_usd and policy.action != SpentAction.NOTIFY:
            decision.violations.append(
                Violation(
                    "budget",
                    f"Policy {name} has spent {format_usd(spend)} "
                    f"of its {format_usd(policy.budget_usd)} budget for the period that "
                    f"ends {period_bounds(policy, now.date())[1]}; wait for the next period or ask "
                    f"a policy admin to raise the budget.",
                )
            )
    return _recorded(decision, policy, workload, team, now)


def _recorded(decision: Decision, policy: UsagePolicy, workload: Workload, team: Group, now: datetime) -> Decision:
    """Store the decision in the policy's admission log (its page lists them); returns it unchanged."""
    Admission.objects.create(
        policy=policy,
        team=team,
        at=now,
        allowed=decision.allowed,
        experiment_name=workload.experiment_name[:500],
        accelerator_type=workload.accelerator_type,
        num_accelerators=workload.num_accelerators,
        region=decision.region,
        estimated_usd_per_hour=decision.estimated_usd_per_hour,
        violations=[{"rule": v.rule, "message": v.message} for v in decision.violations],
    )
    return decision


# --- Versions ----------------------------------------------------------------------------


def snapshot(policy: UsagePolicy) -> dict[str, Any]:
    """The versioned fields of a saved policy as JSON-safe values (teams by name, sorted)."""
    out: dict[str, Any] = {}
    for name in VERSIONED:
        if name == "teams":
            out[name] = sorted(policy.teams.values_list("name", flat=True))
            continue
        value = getattr(policy, name)
        # Quantized so 1000 typed in a form and 1000.00 read back are one and the same version.
        out[name] = str(Decimal(value).quantize(CENT)) if isinstance(value, Decimal) else value
    return out


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[dict[str, Any]]:
    """[{field, old, new}] for every versioned field that differs (all of them when `old` is None)."""
    old = old or {}
    return [{"field": f, "old": old.get(f), "new": new.get(f)} for f in VERSIONED if old.get(f) != new.get(f)]


def record_version(policy: UsagePolicy, user: User | None, note: str = "") -> PolicyVersion | None:
    """Store the policy's state as its next version; None when nothing changed since the last."""
    with transaction.atomic():
        # Lock the policy row so two saves number their versions one after the other.
        UsagePolicy.objects.select_for_update().filter(pk=policy.pk).first()
        last = policy.versions.order_by("-number").first()
        state = snapshot(policy)
        changes = diff(last.snapshot if last else None, state)
        if last is not None and not changes:
            return None
        return PolicyVersion.objects.create(
            policy=policy, number=(last.number + 1) if last else 1, snapshot=state, diff=changes,
            user=user, at=timezone.now(), note=note,
        )  # fmt: skip


def rollback(policy: UsagePolicy, version: PolicyVersion, user: User | None) -> PolicyVersion | None:
    """Restore `version`'s snapshot onto the policy and record that as a new version."""
    state = version.snapshot
    with transaction.atomic():
        for name in VERSIONED:
            if name == "teams" or name not in state:
                continue
            value = state[name]
            setattr(policy, name, Decimal(value) if name == "budget_usd" and value is not None else value)
        policy.save()
        policy.teams.set(Group.objects.filter(name__in=state.get("teams", [])))
        return record_version(policy, user, note=f"rolled back to version {version.number}")
