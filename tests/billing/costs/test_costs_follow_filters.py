"""`/costs/` month to date follows every filter, a policy's link carries its period, and the
first days of a period get a provisional forecast from the trailing run rate (issue 31).

Rollup rows are written directly (as test_billing_pages does) so each figure is hand-worked.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from decimal import Decimal
from html import unescape

import pytest
import time_machine
from django.urls import reverse

from billing.costs import rollups
from billing.models import CostDaily, UsagePolicy
from billing.policies import budget
from tests.conftest import World


def _day(team, day: date, usd: str, policy: str = "", **dims: object) -> None:
    fields = {"experiment_name": "exp", "creator": "alice@example.com", "accelerator_type": "GPU_8xH100",
              "region": "us-west-2", "usage_policy_name": policy}  # fmt: skip
    fields.update(dims)
    CostDaily.objects.create(day=day, team=team, compute_usd=Decimal(usd), gpu_hours=Decimal(1), runs=1, **fields)
    rollups.summarize_days([day])


def _policy(world: World, name: str, start_day: int = 1) -> UsagePolicy:
    policy = UsagePolicy.objects.create(name=name, budget_usd=Decimal("1000"), period_start_day=start_day)
    policy.teams.set([world.vision])
    return policy


@time_machine.travel(datetime(2026, 11, 20, 12, tzinfo=UTC), tick=False)
def test_month_to_date_honours_the_policy_filter_and_the_policys_period(world: World) -> None:
    # Policy "nlp-ft" runs from the 15th: its period holds Nov 15 and 18 ($100 + $40); Nov 10
    # is the previous period. Another policy's $500 and unnamed $7 are in the month, not in it.
    policy = _policy(world, "nlp-ft", start_day=15)
    _day(world.vision, date(2026, 11, 10), "1000", "nlp-ft")
    _day(world.vision, date(2026, 11, 15), "100", "nlp-ft")
    _day(world.vision, date(2026, 11, 18), "40", "nlp-ft")
    _day(world.vision, date(2026, 11, 18), "500", "other")
    _day(world.vision, date(2026, 11, 19), "7")
    alice = world.client_for(world.alice)
    month = alice.get("/costs/").context["mtd"]
    assert month.spend == Decimal("1647")  # every filter off: the UTC month
    detail = alice.get(reverse("policy_detail", args=[policy.pk]))
    assert detail.context["status"].spend == Decimal("140")
    link = re.search(r'href="([^"]+)" id="policy-costs-link"', detail.content.decode())
    assert link, "the policy page links to its costs"
    url = unescape(link[1])
    assert "policy=nlp-ft" in url and "start=2026-11-15" in url and "end=2026-12-14" in url
    costs = alice.get(url)
    mtd = costs.context["mtd"]
    assert (mtd.month, mtd.end, mtd.spend) == (date(2026, 11, 15), date(2026, 12, 15), Decimal("140"))
    assert costs.context["total"]["total_usd"] == Decimal("140")  # the range is the period too
    # One forecast rule: 5.5 days into a 30-day period, $140 / 5.5 x 30, on both pages.
    assert mtd.forecast == detail.context["status"].forecast == Decimal("763.64") and not mtd.provisional
    assert "Period to date" in costs.content.decode() and "$140.00" in costs.content.decode()
    # Other filters narrow it further: a region the rows are not in leaves nothing.
    assert alice.get(url + "&region=us-east-1").context["mtd"].spend == 0
    assert alice.get("/costs/?accelerator=GPU_8xH100").context["mtd"].spend == Decimal("1647")
    assert alice.get("/costs/?accelerator=GPU_1xA10").context["mtd"].spend == 0


@time_machine.travel(datetime(2026, 12, 1, 12, tzinfo=UTC), tick=False)
def test_a_provisional_forecast_from_the_first_day_of_a_period(world: World) -> None:
    # Nov 28-30 spent $10 a day under the policy, Dec 1 $5 so far (12 h in). The trailing window
    # is Nov 28 00:00 to now, 3.5 days, $35: $10 a day. The 31-day period has 30.5 days left:
    # $5 + $10 x 30.5 = $310.00, provisional (0.5 days in, 1 day with costs).
    policy = _policy(world, "vision-train")
    for day in (28, 29, 30):
        _day(world.vision, date(2026, 11, day), "10", "vision-train")
    _day(world.vision, date(2026, 12, 1), "5", "vision-train")
    status = budget.evaluate(policy)
    assert status.spend == Decimal("5") and status.forecast is None  # alerts read only the linear one
    assert status.provisional_forecast == Decimal("310.00")
    assert status.forecast_figure.kind == "provisional forecast"
    html = world.client_for(world.alice).get(reverse("policy_detail", args=[policy.pk])).content.decode()
    assert "$310.00" in html and "provisional until 3 days of the period are in" in html
    costs = world.client_for(world.alice).get("/costs/")
    mtd = costs.context["mtd"]
    assert (mtd.spend, mtd.forecast, mtd.provisional) == (Decimal("5"), Decimal("310.00"), True)
    assert "provisional forecast" in costs.content.decode()


@pytest.mark.parametrize(
    ("now", "linear"),
    [
        (datetime(2026, 12, 3, 23, tzinfo=UTC), False),  # 2.96 days in: still provisional
        (datetime(2026, 12, 4, 0, tzinfo=UTC), True),  # 3 days in: linear, $15 / 3 x 31 = $155
    ],
)
def test_the_policy_forecast_turns_linear_once_three_days_are_in(world: World, now: datetime, linear: bool) -> None:
    policy = _policy(world, "vision-train")
    for day in (1, 2, 3):
        _day(world.vision, date(2026, 12, day), "5", "vision-train")
    with time_machine.travel(now, tick=False):
        status = budget.evaluate(policy)
    assert (status.forecast is not None) == linear
    assert status.forecast_figure.kind == ("forecast" if linear else "provisional forecast")
    if linear:
        assert status.forecast == Decimal("155.00")
