"""What of a policy's spend rests on data an API key pushed, per team (SECURITY.md, "Pushed data").

A key writes runs (origin KEY) and reports egress; no collector confirms either. Their cost
counts in the policy's spend (it is what the team says it spent, and it is bounded:
`runs.models.plausible`, `billing.costs.egress.max_bytes_per_day`), but:

- the policy page names each team whose pushed data alone spends the budget, and
- enforcement cancels a team's run only when the budget is spent without the other teams'
  pushed data: `confirmed_for(team)` = the spend less every other team's pushed part. A
  team's own pushed runs may spend its own runs' budget; another team's never.

The pushed part of a team is, for the policy's period (its days up to today, as
`budget.evaluate` sums them): the whole cost of its runs a key wrote, plus the reported egress
records (`EgressOrigin.REPORTED`, only the API writes them) of its other runs. Priced by the
one cost engine (`billing.costs.run_costs.breakdowns_for_runs`), never here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth.models import Group
from django.db.models import Q

from billing.choices import EgressOrigin
from billing.costs import reports
from billing.costs.run_costs import breakdowns_for_runs
from billing.models import EgressRecord, UsagePolicy
from billing.policies import budget
from billing.prices.money import ZERO, exact_difference, exact_sum, utc_midnight
from runs.choices import RunOrigin
from runs.models import Run


@dataclass(frozen=True)
class PushedSpend:
    """A policy's period spend per team (`spend`) and the part of it resting on pushed data (`pushed`)."""

    total: Decimal
    spend: dict[int, Decimal] = field(default_factory=dict)
    pushed: dict[int, Decimal] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)

    def confirmed_for(self, team_id: int) -> Decimal:
        """The spend enforcement may act on for a run of `team_id`: less the other teams' pushed parts."""
        others = exact_sum(amount for team, amount in self.pushed.items() if team != team_id)
        return max(exact_difference(self.total, others), ZERO)

    def alone(self, budget_usd: Decimal | None) -> list[tuple[str, Decimal]]:
        """(team name, pushed spend) of each team whose pushed data alone spends `budget_usd`."""
        if budget_usd is None:
            return []
        return sorted(
            ((self.names[t], amount) for t, amount in self.pushed.items() if amount >= budget_usd),
            key=lambda pair: (-pair[1], pair[0]),
        )


def pushed_spend(status: budget.PolicyStatus) -> PushedSpend:
    """The policy's spend in `status`'s period, per team, and what of it rests on pushed data.

    1. Spend per team: the rows and accrual `budget.evaluate` sums, grouped by team.
    2. The runs with pushed data in the period: a key's runs under the policy holding GPUs
       or with egress in it, and the policy's other runs with reported egress in it (two
       queries), priced in one engine pass.
    3. Per team, the key runs' day totals in the period plus the reported egress lines of
       the others, each at most the team's spend (the rollups are what the budget reads).
    """
    policy: UsagePolicy = status.policy
    first, last = status.period_start, min(status.now.date(), status.period_end - timedelta(days=1))
    rows = budget.policy_rows(policy, first, last)
    extra = [row for row in budget.policy_accrual(policy, status.now) if first <= row["day"] <= last]
    spend_by_name = {row["team__name"]: row["total_usd"] for row in reports.sum_by(rows, ["team__name"], extra)}
    start, end = utc_midnight(first), utc_midnight(last + timedelta(days=1))
    runs = Run.objects.filter(usage_policy_name=policy.name)
    team_ids = budget.covered_team_ids(policy)
    if team_ids is not None:
        runs = runs.filter(team_id__in=team_ids)
    holding = Q(attempts__started_at__lt=end) & (Q(attempts__ended_at__isnull=True) | Q(attempts__ended_at__gte=start))
    egress = EgressRecord.objects.filter(ts__gte=start, ts__lt=end, origin=EgressOrigin.REPORTED)
    key_ids = set(runs.filter(origin=RunOrigin.KEY).filter(holding).values_list("pk", flat=True))
    key_ids |= set(runs.filter(origin=RunOrigin.KEY, pk__in=egress.values("run_id")).values_list("pk", flat=True))
    reported_ids = set(
        runs.exclude(origin=RunOrigin.KEY).filter(pk__in=egress.values("run_id")).values_list("pk", flat=True)
    )
    priced = list(Run.objects.filter(pk__in=key_ids | reported_ids).select_related("team"))
    breakdowns = breakdowns_for_runs(priced, now=status.now)
    parts: dict[int, list[Decimal]] = defaultdict(list)
    names = {run.team_id: run.team.name for run in priced}
    for run in priced:
        cost = breakdowns[run.pk]
        if run.pk in key_ids:
            parts[run.team_id] += [day.total for day in cost.days if first <= day.day <= last]
        else:
            parts[run.team_id] += [
                line.usd
                for line in cost.base.egress_lines
                if line.origin == EgressOrigin.REPORTED and start <= line.ts < end
            ]
    pushed = {team: min(exact_sum(amounts), spend_by_name.get(names[team], ZERO)) for team, amounts in parts.items()}
    spend_ids = dict(Group.objects.filter(name__in=spend_by_name).values_list("name", "pk"))
    spend = {spend_ids[name]: amount for name, amount in spend_by_name.items() if name in spend_ids}
    names |= {pk: name for name, pk in spend_ids.items()}
    return PushedSpend(total=status.spend, spend=spend, pushed=pushed, names=names)
