"""Plotly figures for the policy pages, as plain dicts (pure functions, no database).

Same contract as `billing/costs/charts.py`: data in, `{"data": [...], "layout": {...}}` out, or
None when there is nothing to draw.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from billing.policies.budget import PolicyStatus
from billing.prices.money import ZERO, exact_sum, utc, utc_midnight
from dashboard.kit.figures import base_layout


def _plot_time(moment: datetime) -> str:
    """A UTC moment as Plotly's date axis reads it (no zone suffix: the axis is UTC)."""
    return utc(moment).strftime("%Y-%m-%d %H:%M:%S")


def burn_down_figure(status: PolicyStatus) -> dict[str, Any] | None:
    """Cumulative spend over the period against the budget line, as a Plotly figure dict.

    The spend line starts at $0 at the period's start and steps to each day's cumulative total
    at that day's end (00:00 UTC the next day); today's point is at `now`, since today is not
    over. So even on the period's first day the chart is a line from the start, and the x axis
    always spans the whole period with the budget line across it: it reads as a burn-down.
    The totals are the status's daily sums, unchanged.
    """
    if status.budget is None and not status.daily:
        return None
    period_start, period_end = utc_midnight(status.period_start), utc_midnight(status.period_end)
    now = min(max(status.now, period_start), period_end)
    by_day = dict(status.daily)
    x, cumulative, total = [_plot_time(period_start)], [0.0], ZERO
    day = status.period_start
    while day < status.period_end and utc_midnight(day) < now:
        total = exact_sum([total, by_day.get(day, ZERO)])
        x.append(_plot_time(min(utc_midnight(day + timedelta(days=1)), now)))
        cumulative.append(round(float(total), 2))
        day += timedelta(days=1)
    # Hover money as the pages print it (`format_usd`: "$6,254.12"), not Plotly's "$6254.12".
    money = "%{x}<br>%{fullData.name}: $%{y:,.2f}<extra></extra>"
    spend_line = {"type": "scatter", "mode": "lines+markers", "name": "Spend", "x": x, "y": cumulative,
                  "hovertemplate": money}  # fmt: skip
    data: list[dict[str, Any]] = [spend_line]
    ends = [_plot_time(period_start), _plot_time(period_end)]
    if status.budget is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "Budget", "x": ends,
                     "y": [float(status.budget)] * 2, "line": {"dash": "dash"}, "hovertemplate": money})  # fmt: skip
    if status.forecast is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "Forecast", "x": [x[-1], ends[1]],
                     "y": [cumulative[-1], float(status.forecast)], "line": {"dash": "dot"},
                     "hovertemplate": money})  # fmt: skip
    layout = base_layout(
        height=260,
        top=10,
        right=10,
        xaxis={"title": {"text": "Day (UTC)"}, "type": "date", "range": ends},
        yaxis={"title": {"text": "USD"}, "tickprefix": "$", "tickformat": ",.2~f", "rangemode": "tozero"},
    )
    return {"data": data, "layout": layout}
