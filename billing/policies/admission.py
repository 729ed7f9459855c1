"""Admission: whether a team may start a workload now under the usage policy it names.

`admit` answers allow or deny, with one violation per broken rule, each a sentence a person
can act on, and records the decision in the policy's admission log.

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
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from django.contrib.auth.models import Group
from django.core.cache import cache
from django.utils import timezone

from billing.choices import SpentAction
from billing.costs import reports
from billing.costs.serverless import accelerator_prices
from billing.models import Admission, UsagePolicy
from billing.policies.budget import covered_team_ids, evaluate, period_bounds
from billing.prices.money import format_usd, price_in_force, to_cents, utc
from runs.choices import Region
from runs.models import Run

if TYPE_CHECKING:
    from runs.workload.schema import Workload


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
