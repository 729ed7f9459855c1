"""The demo's usage policies: one per demo team, under the name its runs carry, set to fire alerts.

The demo's runs name `vision-gpu-training`, `nlp-llm-training` and `speech-asr`; without these
policies those names point nowhere and the policy pages are empty. Budgets are set from what
each team has spent this month (so the figures fit any seed and date): vision is past its
budget, nlp past 80 %, speech well inside. A first enforcement pass fires their alerts now,
as beat's `enforce-policies` would within five minutes. The action is notify: the demo never
cancels a run. nlp also caps runs at 32 accelerators, so its 64-GPU runs show as breaking it.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.contrib.auth.models import Group
from django.utils import timezone

from billing.choices import SpentAction
from billing.models import UsagePolicy
from billing.policies import budget, enforcement, versions
from dashboard.demo.seed import TEAMS

DESCRIPTION = "Demo policy (seed_demo): budget set from the team's spend this month so that alerts fire."
# Budget as a share of the month's spend so far: under 1 is over budget.
BUDGET_SHARE = {"vision": Decimal("0.8"), "nlp": Decimal("1.15"), "speech": Decimal("4")}
NLP_MAX_ACCELERATORS = 32


def seed_policies(now: datetime | None = None) -> list[UsagePolicy]:
    """Create the demo teams' policies that do not exist yet (an existing one is left as it is); returns them."""
    now = now or timezone.now()
    created = []
    for team in TEAMS:
        group = Group.objects.filter(name=team.name).first()
        if group is None or UsagePolicy.objects.filter(name=team.usage_policy).exists():
            continue
        policy = UsagePolicy.objects.create(
            name=team.usage_policy, description=DESCRIPTION, action=SpentAction.NOTIFY,
            max_num_accelerators=NLP_MAX_ACCELERATORS if team.name == "nlp" else None,
        )  # fmt: skip
        policy.teams.add(group)
        spent = budget.evaluate(policy, now=now).spend
        share = BUDGET_SHARE.get(team.name, Decimal("2"))
        policy.budget_usd = max(Decimal("100"), (spent * share).quantize(Decimal("100")))
        policy.save(update_fields=["budget_usd"])
        versions.record_version(policy, None, note="created by seed_demo")
        created.append(policy)
    if created:
        enforcement.enforce_all(now=now)
    return created
