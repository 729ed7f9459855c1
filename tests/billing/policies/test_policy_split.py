"""Who is over budget (billing.policies.split): a policy's spend by user, experiment and run, the
runs breaking its limits and its admission decisions, on the policy page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing.costs import rollups
from billing.engine import run_cost
from billing.models import AcceleratorPrice, Admission, UsagePolicy
from billing.policies import budget
from billing.policies import split as policy_split
from billing.templatetags.billing_tags import usd
from runs.launch.admission import admit_yaml
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(days=1)
WORKLOAD = """\
experiment_name: llama-ft
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: {num}
command: python train.py
timeout_minutes: 60
usage_policy_name: vision-research
"""


@pytest.fixture
def policy(world: World) -> UsagePolicy:
    # $10 per accelerator-hour; make_run's runs are 8 accelerators for 1 hour: $80 each.
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("10"),
    )  # fmt: skip
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("100"), max_num_accelerators=8)
    policy.teams.add(world.vision)
    make_run(world.vision, "run-a1", creator="alice@example.com", usage_policy_name=policy.name)
    make_run(world.vision, "run-a2", creator="alice@example.com", usage_policy_name=policy.name,
             experiment_name="/Workspace/Users/alice/vit")  # fmt: skip
    make_run(world.vision, "run-b1", creator="bob@example.com", usage_policy_name=policy.name, num_accelerators=16)
    make_run(world.vision, "run-other", creator="bob@example.com", usage_policy_name="another-policy")
    rollups.recompute_days([T0.date()], now=NOW)
    return policy


def test_spend_splits_add_up_to_the_policy_total(policy: UsagePolicy) -> None:
    found = policy_split.split(policy, now=NOW)
    total = budget.evaluate(policy, now=NOW).spend
    assert total == Decimal("320")  # 80 + 80 + 160; run-other is another policy's
    users = {row["creator"]: row["total_usd"] for row in found.by_user}
    assert users == {"alice@example.com": Decimal("160"), "bob@example.com": Decimal("160")}
    experiments = {row["experiment_name"]: row["total_usd"] for row in found.by_experiment}
    assert experiments == {
        "/Workspace/Users/alice/llama-ft": Decimal("240"),
        "/Workspace/Users/alice/vit": Decimal("80"),
    }
    # By run, from the cost engine, costliest first.
    assert found.by_run[0][0].external_id == "run-b1"
    assert {run.external_id: cost.estimate.usd for run, cost in found.by_run} == {
        run.external_id: run_cost(run, now=NOW).estimate.usd for run, _ in found.by_run
    }
    # Only run-b1 breaks a limit: 16 accelerators where the policy allows 8.
    assert [(run.external_id, [v.rule for v in v_]) for run, v_ in found.breaking] == [("run-b1", ["num_accelerators"])]


def test_admissions_are_stored_and_listed_on_the_page(world: World, policy: UsagePolicy) -> None:
    with time_machine.travel(NOW, tick=False):
        allowed = admit_yaml(WORKLOAD.format(num=8), world.vision, region="us-west-2")
        denied = admit_yaml(WORKLOAD.format(num=16), world.vision, region="us-west-2")
        # The $100 budget is spent ($320), but this policy's action notifies rather than refuses.
        assert allowed.allowed and not denied.allowed
    assert [a.allowed for a in Admission.objects.order_by("pk")] == [True, False]
    stored = Admission.objects.order_by("pk").last()
    assert not stored.allowed and stored.num_accelerators == 16 and stored.violations[0]["rule"] == "num_accelerators"
    # No policy named: nothing to log under a policy.
    admit_yaml(WORKLOAD.format(num=8).replace("usage_policy_name: vision-research\n", ""), world.vision)
    assert Admission.objects.count() == 2

    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.alice).get(reverse("policy_detail", args=[policy.pk])).content.decode()
    for section in ("spend-by-user", "spend-by-experiment", "spend-by-run", "breaking-runs", "admissions"):
        assert f'id="{section}"' in html
    assert "bob@example.com" in html and usd(Decimal("160")) in html and "run-b1" in html
    assert "denied" in html and "allows at most 8" in html


def test_costs_page_filters_by_policy(world: World, policy: UsagePolicy) -> None:
    client = world.client_for(world.alice)
    day = T0.date().isoformat()
    with time_machine.travel(NOW, tick=False):
        narrowed = client.get(reverse("cost_overview"), {"policy": policy.name, "start": day, "end": day})
        everything = client.get(reverse("cost_overview"), {"start": day, "end": day})
        unknown = client.get(reverse("cost_overview"), {"policy": "no-such-policy"})
    assert narrowed.context["total"]["total_usd"] == Decimal("320")
    assert everything.context["total"]["total_usd"] == Decimal("400")  # run-other's $80 too
    assert '<option value="vision-research" selected>' in narrowed.content.decode()
    # A policy the user cannot see, or none by that name, is named as the filter's error.
    assert unknown.status_code == 200 and "Usage policy" in unknown.content.decode()
    assert unknown.context["form"].errors["policy"]


def test_a_shared_policy_shows_each_member_only_their_teams_part(world: World, policy: UsagePolicy) -> None:
    policy.teams.add(world.nlp)
    make_run(world.nlp, "nlp-secret", creator="charlie@example.com", usage_policy_name=policy.name)
    rollups.recompute_days([T0.date()], now=NOW)
    with time_machine.travel(NOW, tick=False):
        admit_yaml(WORKLOAD.format(num=8), world.nlp, region="us-west-2")
        admit_yaml(WORKLOAD.format(num=16), world.vision, region="us-west-2")  # denied: vision's own
        alice = world.client_for(world.alice).get(reverse("policy_detail", args=[policy.pk])).content.decode()
        charlie = world.client_for(world.charlie).get(reverse("policy_detail", args=[policy.pk])).content.decode()
    assert "nlp-secret" not in alice and "charlie@example.com" not in alice and "denied" in alice
    assert "nlp-secret" in charlie and "run-b1" not in charlie and "bob@example.com" not in charlie
    assert "denied" not in charlie and "allowed" in charlie  # nlp's own admission, not vision's
