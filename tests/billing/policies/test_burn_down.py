"""The policy burn-down (charts.burn_down_figure): a line from the period's start, the budget across the period.

Early in a period the chart used to be one dot (the first day's total at the day's start); it now
starts at $0 at the period start, steps to each day's cumulative total at the day's end, ends at
`now`, and spans the whole period whatever day it is. The totals are the status's, unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from billing.models import UsagePolicy
from billing.policies.budget import PolicyStatus, period_bounds
from billing.policies.charts import burn_down_figure


def _t(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _status(now: datetime, daily: dict[int, str], budget: str | None = "1000", forecast: str | None = None):
    """A monthly policy's status at `now`, with `daily` spend keyed by day of the period (0-based)."""
    policy = UsagePolicy(name="vision-research", budget_usd=None if budget is None else Decimal(budget))
    start, end = period_bounds(policy, now.date())
    rows = tuple((start + timedelta(days=i), Decimal(usd)) for i, usd in sorted(daily.items()))
    spend = sum((usd for _, usd in rows), Decimal(0))
    return PolicyStatus(policy, start, end, spend, None if forecast is None else Decimal(forecast), rows, now)


def _period_start_this_month() -> datetime:
    today = timezone.now().astimezone(UTC).date()
    return datetime(today.year, today.month, 1, tzinfo=UTC)


def _trace(figure: dict, name: str) -> dict:
    return next(t for t in figure["data"] if t["name"] == name)


def test_first_day_draws_a_line_from_the_period_start_and_the_budget_across_the_period() -> None:
    start = _period_start_this_month()
    now = start + timedelta(hours=2, minutes=30)
    status = _status(now, {0: "812.40"})
    figure = burn_down_figure(status)
    spend = _trace(figure, "Spend")
    assert spend["x"] == [_t(start), _t(now)]
    assert spend["y"] == [0.0, 812.40]
    end = datetime.combine(status.period_end, datetime.min.time(), tzinfo=UTC)
    budget = _trace(figure, "Budget")
    assert budget["x"] == [_t(start), _t(end)] and budget["y"] == [1000.0, 1000.0]
    # The axis shows the whole period, not just the day so far.
    assert figure["layout"]["xaxis"]["range"] == [_t(start), _t(end)]


def test_later_days_step_to_each_days_total_at_its_end_and_end_at_now() -> None:
    start = _period_start_this_month()
    now = start + timedelta(days=2, hours=9)
    status = _status(now, {0: "100.10", 1: "0.20", 2: "33.05"}, forecast="1500.00")
    figure = burn_down_figure(status)
    spend = _trace(figure, "Spend")
    assert spend["x"] == [_t(start), _t(start + timedelta(days=1)), _t(start + timedelta(days=2)), _t(now)]
    assert spend["y"] == [0.0, 100.10, 100.30, 133.35]
    assert Decimal(str(spend["y"][-1])) == status.spend  # the chart ends at the page's spend
    forecast = _trace(figure, "Forecast")
    assert forecast["x"][0] == _t(now) and forecast["y"] == [133.35, 1500.0]
    assert forecast["x"][1] == figure["layout"]["xaxis"]["range"][1]


def test_a_day_without_spend_keeps_the_total_flat() -> None:
    start = _period_start_this_month()
    now = start + timedelta(days=1, hours=1)
    figure = burn_down_figure(_status(now, {1: "5.00"}))
    assert _trace(figure, "Spend")["y"] == [0.0, 0.0, 5.0]


def test_no_budget_and_no_spend_draws_nothing_and_no_budget_draws_no_budget_line() -> None:
    start = _period_start_this_month()
    assert burn_down_figure(_status(start + timedelta(hours=1), {}, budget=None)) is None
    figure = burn_down_figure(_status(start + timedelta(hours=1), {0: "1.00"}, budget=None))
    assert [t["name"] for t in figure["data"]] == ["Spend"]
