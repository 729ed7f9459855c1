"""The policy list: most of its budget used first, an over-budget badge where enforcement acts.

Issue 35 found the list alphabetical, with the team at 128% of its budget last and nothing to
mark it. The order reads `PolicyStatus.share` and the badge `PolicyStatus.exhausted`, the numbers
`billing.policies.budget.evaluate` computes and enforcement (alerts, refusals, cancels) acts on.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing.costs import rollups
from billing.models import CostDaily, UsagePolicy
from billing.policies import budget
from tests.conftest import T0, World

NOW = T0 + timedelta(hours=1)


def policy_spending(world: World, name: str, budget_usd: str | None, spent: str) -> UsagePolicy:
    policy = UsagePolicy.objects.create(name=name, budget_usd=Decimal(budget_usd) if budget_usd else None)
    policy.teams.add(world.vision)
    CostDaily.objects.create(
        day=NOW.date(), team=world.vision, experiment_name=f"{name}-exp", creator="alice@example.com",
        usage_policy_name=name, accelerator_type="GPU_8xH100", region="us-west-2", compute_usd=Decimal(spent),
        gpu_hours=Decimal("1"), runs=1,
    )  # fmt: skip
    return policy


@pytest.fixture
def policies(world: World) -> dict[str, UsagePolicy]:
    made = {
        # Alphabetically first, 10% used.
        "a-low": policy_spending(world, "a-low", "1000", "100"),
        # No budget: nothing to use a share of.
        "b-none": policy_spending(world, "b-none", None, "50"),
        # 128% of its budget: issue 35's team, alphabetically in the middle.
        "m-over": policy_spending(world, "m-over", "5000", "6400"),
        # 99.99%: prints as 100.0% but is not spent, so enforcement does not act and there is no badge.
        "z-nearly": policy_spending(world, "z-nearly", "100", "99.99"),
    }
    rollups.summarize_days([NOW.date()])
    return made


def cards(html: str) -> list[str]:
    return re.findall(r'<section class="card policy-row">.*?</section>', html, re.S)


def test_the_list_puts_the_most_used_budget_first_and_policies_without_one_last(world, policies) -> None:
    with time_machine.travel(NOW, tick=False):
        response = world.client_for(world.alice).get(reverse("policy_list"))
        statuses = {name: budget.evaluate(p) for name, p in policies.items()}
    assert [row["policy"].name for row in response.context["rows"]] == ["m-over", "z-nearly", "a-low", "b-none"]
    names = [re.search(r'<a href="[^"]+">([^<]+)</a>', card).group(1) for card in cards(response.content.decode())]
    assert names == ["m-over", "z-nearly", "a-low", "b-none"]
    # The share shown and sorted by is the one `evaluate` computes, not a second computation.
    for row in response.context["rows"]:
        assert row["status"].share == statuses[row["policy"].name].share
    assert statuses["m-over"].share == Decimal("1.28") and statuses["b-none"].share is None


def test_the_over_budget_badge_marks_exactly_the_policies_enforcement_acts_on(world, policies) -> None:
    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.alice).get(reverse("policy_list")).content.decode()
        exhausted = {name: budget.evaluate(p).exhausted for name, p in policies.items()}
    badged = {name for name in policies for card in cards(html) if f">{name}</a>" in card and "over-budget" in card}
    assert badged == {name for name, spent in exhausted.items() if spent} == {"m-over"}
    over = next(card for card in cards(html) if ">m-over</a>" in card)
    assert "over budget: 128.0%" in over
    nearly = next(card for card in cards(html) if ">z-nearly</a>" in card)
    assert "100.0% of budget" in nearly and "over budget" not in nearly


def test_the_policy_page_carries_the_badge_too(world, policies) -> None:
    with time_machine.travel(NOW, tick=False):
        client = world.client_for(world.alice)
        over = client.get(reverse("policy_detail", args=[policies["m-over"].pk])).content.decode()
        under = client.get(reverse("policy_detail", args=[policies["a-low"].pk])).content.decode()
    assert "over budget</span>" in over and "over budget</span>" not in under


def test_the_csv_lists_the_policies_in_the_pages_order(world, policies) -> None:
    with time_machine.travel(NOW, tick=False):
        csv = world.client_for(world.alice).get(reverse("policy_list"), {"format": "csv"}).content.decode()
    assert [line.split(",")[0] for line in csv.splitlines()[1:]] == ["m-over", "z-nearly", "a-low", "b-none"]
