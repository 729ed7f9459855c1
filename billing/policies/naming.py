"""Which usage policy a run may name: one that covers the run's own team."""

from __future__ import annotations

from django.contrib.auth.models import Group

from billing.models import UsagePolicy
from billing.policies.budget import covered_team_ids


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
