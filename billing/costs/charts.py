"""Plotly figures for the cost pages, as plain dicts (pure functions, no database).

Same contract as `runs/telemetry/charts.py`: data in, `{"data": [...], "layout": {...}}` out, or None
when there is nothing to draw; the template passes it through `json_script` and
`static/js/charts.js` draws it. Money goes to the browser as floats: charts are for the eye,
the tables and CSV carry the exact figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dashboard.kit.figures import base_layout, plotly_text

Figure = dict[str, Any]
# More stacked series than this and the legend drowns the chart: the rest become "other".
MAX_SERIES = 12
OTHER = "other"


def spend_over_time_figure(rows: Sequence[dict], group_label: str) -> Figure | None:
    """Daily spend stacked by group: `rows` have `day`, `group` and `total_usd`."""
    if not rows:
        return None
    totals: dict[str, float] = {}
    for row in rows:
        totals[str(row["group"])] = totals.get(str(row["group"]), 0.0) + float(row["total_usd"])
    ranked = sorted(totals, key=lambda g: -totals[g])
    keep = set(ranked[:MAX_SERIES])
    days = sorted({row["day"] for row in rows})
    series: dict[str, dict[Any, float]] = {}
    for row in rows:
        name = str(row["group"]) if str(row["group"]) in keep else OTHER
        by_day = series.setdefault(name or "(none)", {})
        by_day[row["day"]] = by_day.get(row["day"], 0.0) + float(row["total_usd"])
    order = [g or "(none)" for g in ranked if g in keep] + ([OTHER] if OTHER in series else [])
    data = [
        {
            "type": "bar",
            "name": name,
            "x": [day.isoformat() for day in days],
            "y": [round(series[name].get(day, 0.0), 2) for day in days],
            "hovertemplate": "%{x}<br>" + plotly_text(name).replace("%", "%%") + ": $%{y:,.2f}<extra></extra>",
        }
        for name in order
    ]
    layout = base_layout(
        height=320,
        top=10,
        right=10,
        barmode="stack",
        xaxis={"title": {"text": "Day (UTC)"}, "type": "date"},
        yaxis={"title": {"text": "USD"}, "tickprefix": "$"},
        legend={"title": {"text": group_label}},
    )
    return {"data": data, "layout": layout}


def daily_spend_figure(daily: Sequence[dict], group_field: str, group_label: str) -> Figure | None:
    """`spend_over_time_figure` of the cost page's daily rows (`day`, `group_field`, `total_usd`)."""
    rows = [{"day": r["day"], "group": r[group_field], "total_usd": r["total_usd"]} for r in daily]
    return spend_over_time_figure(rows, group_label)


SANKEY_LINK = "rgba(74, 134, 246, 0.45)"
SANKEY_NODE = "rgba(74, 134, 246, 0.95)"


def egress_sankey_figure(flows: Sequence[dict]) -> Figure | None:
    """Region-to-region egress as a Sankey: `flows` have source/destination regions and `usd`."""
    flows = [f for f in flows if f["bytes"] > 0]
    if not flows:
        return None
    # A region appears twice, as a source (left) and as a destination (right).
    labels: list[str] = []
    index: dict[tuple[str, str], int] = {}
    for flow in flows:
        for side, name in (("src", flow["source_region"]), ("dst", flow["destination_region"])):
            if (side, name) not in index:
                index[(side, name)] = len(labels)
                labels.append(name)
    link = {
        "source": [index[("src", f["source_region"])] for f in flows],
        "target": [index[("dst", f["destination_region"])] for f in flows],
        "value": [f["bytes"] / 1e9 for f in flows],
        "customdata": [round(float(f["usd"]), 2) for f in flows],
        "hovertemplate": "%{source.label} → %{target.label}<br>%{value:,.1f} GB, $%{customdata:,.2f}<extra></extra>",
        # Plotly's default link is 20 % black: invisible on the dark theme and faint on the light
        # one. A half-opaque mid blue reads on both backgrounds (charts.js themes only the text).
        "color": [SANKEY_LINK] * len(flows),
    }
    node = {"label": labels, "pad": 12, "color": SANKEY_NODE, "line": {"width": 0}}
    return {
        "data": [{"type": "sankey", "node": node, "link": link}],
        "layout": base_layout(height=280, margin={"l": 10, "r": 10, "t": 10, "b": 10}),
    }
