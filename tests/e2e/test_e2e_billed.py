"""Issue 31 in a real Chromium: a policy's costs link lands on its period with the same figure,
and the overview shows billed beside estimated for a team whose usage records are imported."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.costs import rollups
from billing.models import CostDaily
from billing.policies.budget import period_bounds
from tests.billing.reconcile.test_billed_everywhere import import_records, usage_line
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)
MONEY = re.compile(r"\$([0-9,]+\.[0-9]{2})")


def dollars(text: str) -> Decimal:
    found = MONEY.search(text)
    assert found, f"no amount in {text!r}"
    return Decimal(found[1].replace(",", ""))


def test_the_policy_costs_link_lands_on_its_period_with_the_same_figure(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    # The policy's period starts on the 15th, not on the 1st; and vision spent $100 today under
    # no policy: the UTC month to date is not the policy's figure.
    scene.policy.period_start_day = 15
    scene.policy.save()
    today = timezone.now().date()
    CostDaily.objects.create(day=today, team=scene.world.vision, experiment_name="other", creator="bob@example.com",
                             compute_usd=Decimal("100"), gpu_hours=Decimal(1), runs=1)  # fmt: skip
    rollups.summarize_days([today])
    browsing.login_as(scene.world.alice)
    browsing.goto(f"/costs/policies/{scene.policy.pk}/")
    policy_spend = dollars(page.locator(".policy-spend").inner_text())
    assert policy_spend > 0
    page.locator("#policy-costs-link").click()
    page.wait_for_url(re.compile(r"/costs/\?"))
    query = parse_qs(urlsplit(page.url).query)
    start, end = period_bounds(scene.policy, today)
    assert query["policy"] == [scene.policy.name]
    assert (query["start"], query["end"]) == ([start.isoformat()], [(end - timedelta(days=1)).isoformat()])
    expect(page.locator("h2", has_text="Period to date")).to_contain_text(scene.policy.name)
    assert dollars(page.locator("#mtd-spend").inner_text()) == policy_spend
    browsing.goto("/costs/")
    assert dollars(page.locator("#mtd-spend").inner_text()) != policy_spend  # the month, every policy
    browsing.screenshot("policy-costs-link")


def test_the_overview_shows_billed_beside_estimated(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    # The succeeded run's usage records: 10 DBU at the $0.70 list price, $7.00 billed, dated today.
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    assert import_records(usage_line("e2e-1", scene.succeeded.external_id, "10", start=hour)).linked == 1
    browsing.login_as(scene.world.alice)
    browsing.goto("/")
    vision = page.locator("#team-spend tr[data-team=vision]")
    expect(vision.locator(".team-billed")).to_contain_text("billed $7.00")
    assert dollars(vision.locator(".team-estimate").inner_text()) > 0  # the estimate stays beside it
    browsing.goto("/costs/")
    expect(page.locator("#mtd-billed")).to_contain_text("billed $7.00")
    browsing.screenshot("overview-billed")
