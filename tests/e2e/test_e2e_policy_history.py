"""Policies in a real Chromium, on a phone (390x844) and a desktop (1280x800): the list and the history.

The list puts the policy most over its budget first, with its badge on screen. The history reads
as a diff (labels, formatted values), fits the screen without sideways scroll, and a rollback goes
through its confirmation page: one click never rolls back.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.costs import rollups
from billing.models import CostDaily, UsagePolicy
from billing.policies.versions import record_version
from tests.e2e.conftest import Browsing, Scene, path_of
from tests.e2e.test_e2e_phone import DESKTOP, OVERFLOW, PHONE

pytestmark = pytest.mark.django_db(transaction=True)

# How far the widest diff table sticks out of its card's scroll box, in px (0: every column is in view).
TABLE_OVERFLOW = "() => Math.max(0, ...[...document.querySelectorAll('.policy-diff')].map((t) => "
TABLE_OVERFLOW += "t.parentElement.scrollWidth - t.parentElement.clientWidth))"


def edited(scene: Scene) -> UsagePolicy:
    """The scene's policy edited once: a bigger budget, more teams, limits set, cross-region forbidden."""
    policy = scene.policy
    policy.budget_usd, policy.max_num_accelerators, policy.allow_cross_region = Decimal("6254.12"), 16, False
    policy.allowed_regions = ["us-west-2", "us-east-1", "eu-west-1"]
    policy.alert_thresholds = [50, 75, 90, 100, 110]
    policy.description = "Vision research's GPU budget for the quarter's large pre-training sweeps " * 3
    policy.save()
    policy.teams.add(scene.world.nlp)
    record_version(policy, scene.world.sam, note="edited")
    return policy


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390x844", "1280x800"])
def test_the_history_reads_as_a_diff_and_rollback_is_confirmed(
    browsing: Browsing, scene: Scene, viewport: dict[str, int]
) -> None:
    policy = edited(scene)
    page = browsing.page
    page.set_viewport_size(viewport)
    browsing.login_as(scene.world.sam)
    history = reverse("policy_versions", args=[policy.pk])
    assert browsing.goto(history).status == 200
    assert page.evaluate(OVERFLOW) <= 0 and page.evaluate(TABLE_OVERFLOW) == 0
    budget_row = page.locator("#v2 tr[data-field=budget_usd]")
    assert budget_row.locator("th").inner_text() == "Budget (USD)"
    assert budget_row.locator("td.old").inner_text() == "$1,000.00"
    assert budget_row.locator("td.new").inner_text() == "$6,254.12"
    assert page.locator("#v2 tr[data-field=teams] td.new").inner_text() == "nlp, vision"
    assert page.locator("#v2 tr[data-field=allow_cross_region] td.new").inner_text() == "forbidden"
    # Every row's label and values are on screen, inside the viewport.
    box = budget_row.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"], box
    text = page.locator("main").inner_text() if page.locator("main").count() else page.inner_text("body")
    for raw in ("budget_usd", "['vision']", "None"):
        assert raw not in text, raw
    browsing.screenshot(f"policy-history-{viewport['width']}")

    # One click opens the confirmation; the policy is unchanged until it is confirmed.
    page.get_by_role("link", name="Roll back to version 1").click()
    page.wait_for_url(f"**{reverse('policy_rollback', args=[policy.pk, 1])}")
    assert page.evaluate(OVERFLOW) <= 0 and page.evaluate(TABLE_OVERFLOW) == 0
    assert page.locator("tr[data-field=budget_usd] td.new").inner_text() == "$1,000.00"
    policy.refresh_from_db()
    assert policy.budget_usd == Decimal("6254.12") and policy.versions.count() == 2
    browsing.screenshot(f"policy-rollback-{viewport['width']}")
    page.get_by_role("button", name="Roll back to version 1").click()
    page.wait_for_url(f"**{history}")
    assert path_of(page.url) == history
    assert page.locator("#v3").inner_text().count("rolled back to version 1") == 1
    policy.refresh_from_db()
    assert policy.budget_usd == Decimal("1000") and policy.versions.count() == 3


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390x844", "1280x800"])
def test_the_list_leads_with_the_policy_over_its_budget(
    browsing: Browsing, scene: Scene, viewport: dict[str, int]
) -> None:
    # Named to sort last alphabetically: $25 of a $10 budget (250%); the scene's policy has used ~4%.
    over = UsagePolicy.objects.create(name="zz-vision-small", budget_usd=Decimal("10"))
    over.teams.add(scene.world.vision)
    today = timezone.now().date()
    CostDaily.objects.create(
        day=today, team=scene.world.vision, experiment_name="small", creator="alice@example.com",
        usage_policy_name=over.name, accelerator_type="GPU_1xA10", region="us-west-2", compute_usd=Decimal("25"),
        gpu_hours=Decimal("1"), runs=1,
    )  # fmt: skip
    rollups.summarize_days([today])
    page = browsing.page
    page.set_viewport_size(viewport)
    browsing.login_as(scene.world.alice)
    browsing.goto("/costs/policies/")
    assert page.evaluate(OVERFLOW) <= 0
    cards = page.locator("section.policy-row")
    assert cards.count() == 2
    first = cards.nth(0)
    assert first.locator("h2 a").inner_text() == "zz-vision-small"
    badge = first.locator(".over-budget")
    assert badge.is_visible() and badge.inner_text() == "over budget: 250.0%"
    box = badge.bounding_box()
    assert box is not None and box["x"] + box["width"] <= viewport["width"], box
    assert cards.nth(1).locator(".over-budget").count() == 0
    browsing.screenshot(f"policy-list-{viewport['width']}")
