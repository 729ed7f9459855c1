"""Who is over budget: a policy's spend split by user, experiment and run, the runs breaking its
limits, and its admission decisions, for the policy page.

Spend by user and experiment sums the CostDaily rollups of the policy's period (the rows its
budget sums, `policies.policy_rows`) plus the accrual of running runs, as `policies.evaluate`
does, so the parts add up to the burn-down's total. Spend by run reads each run's cost from
the one cost engine (`billing.reconcile.answers.run_costs`) for the runs of the period. Nothing here
computes money itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from billing.costs import reports
from billing.models import Admission, UsagePolicy
from billing.policies.admission import Violation, constraint_violations
from billing.policies.budget import covered_team_ids, period_bounds, policy_accrual, policy_rows
from billing.prices.money import utc, utc_midnight
from billing.reconcile.answers import RunCostAnswer, run_costs
from runs.models import Run

TOP = 10
# The runs of a period priced for the by-run table: the newest ones, so a long period stays cheap.
RUN_SCAN = 500
ADMISSIONS = 25


@dataclass(frozen=True)
class PolicySplit:
    by_user: list[dict[str, Any]]
    by_experiment: list[dict[str, Any]]
    by_run: list[tuple[Run, RunCostAnswer]]
    breaking: list[tuple[Run, list[Violation]]]
    admissions: list[Admission]


def policy_runs(policy: UsagePolicy, now: datetime, team_ids: list[int] | None = None) -> list[Run]:
    """Runs under the policy (its name, its teams) that held GPUs in its current period; of `team_ids` when given."""
    start, end = period_bounds(policy, now.date())
    runs = Run.objects.filter(usage_policy_name=policy.name, submitted_at__lt=utc_midnight(end)).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gte=utc_midnight(start))
    )
    covered = covered_team_ids(policy)
    if covered is not None:
        runs = runs.filter(team_id__in=covered)
    if team_ids is not None:
        runs = runs.filter(team_id__in=team_ids)
    return list(runs.select_related("team", "user").order_by("-submitted_at")[:RUN_SCAN])


def run_violations(policy: UsagePolicy, run: Run) -> list[Violation]:
    """The policy's constraints a stored run breaks: its shape, and where it ran."""
    found = constraint_violations(policy, run, run.region)
    if not policy.allow_cross_region and run.is_cross_region:
        found.append(
            Violation(
                "cross_region",
                f"Ran in {run.region}, outside its workspace's region {run.home_region}; policy {policy.name} "
                "forbids cross-region runs.",
            )
        )
    return found


def split(policy: UsagePolicy, now: datetime | None = None, team_ids: list[int] | None = None) -> PolicySplit:
    """The policy's split for a viewer of `team_ids` (None: every team, for admins and staff).

    A policy shared by several teams shows each member only their teams' users, experiments,
    runs and admissions, as its action log does (policy_views.visible_actions).
    """
    now = utc(now or timezone.now())
    start, end = period_bounds(policy, now.date())
    rows = policy_rows(policy, start, now.date())
    extra = [row for row in policy_accrual(policy, now) if start <= row["day"] < end]
    admissions = policy.admissions.select_related("team")
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
        extra = [row for row in extra if row["team_id"] in team_ids]
        admissions = admissions.filter(team_id__in=team_ids)
    runs = policy_runs(policy, now, team_ids)
    costs = run_costs(runs, now=now)
    by_run = sorted(((run, costs[run.pk]) for run in runs), key=lambda pair: -pair[1].estimate.usd)
    breaking = [(run, found) for run in runs if (found := run_violations(policy, run))]
    return PolicySplit(
        by_user=reports.sum_by(rows, ["creator"], extra)[:TOP],
        by_experiment=reports.sum_by(rows, ["experiment_name"], extra)[:TOP],
        by_run=by_run[:TOP],
        breaking=breaking[:TOP],
        admissions=list(admissions.order_by("-at", "-pk")[:ADMISSIONS]),
    )
