"""The failure page's figures: the GPU panels and MLflow metric panels before the failure, all on
one time axis with the failure (and the evidence line's time) marked.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runs.choices import RunStatus
from runs.models import MetricPoint, Run
from runs.telemetry.charts import STATUS_COLORS, gpu_figure, gpu_series, time_layout
from runs.telemetry.tier_reads import plotly_time


def on_failure_axis(
    figure: dict | None, start: datetime, end: datetime, marks: list[tuple[datetime, str]]
) -> dict | None:
    """One time axis for every panel of the page, [start, end], with dashed lines at `marks`.

    Marks are the failure and, when its line states a time, the log's evidence line; the same
    range on every panel puts them under each other. The window is fixed: zooming must not
    re-query the whole run (charts.js does on telemetry_field), so the figure's meta goes.
    """
    if figure is None:
        return figure
    layout = figure["layout"]
    layout.setdefault("xaxis", {})["range"] = [plotly_time(start), plotly_time(end)]
    layout["shapes"] = [
        {"type": "line", "xref": "x", "yref": "paper", "x0": plotly_time(at), "x1": plotly_time(at),
         "y0": 0, "y1": 1, "line": {"color": STATUS_COLORS[RunStatus.FAILED], "width": 2, "dash": "dash"}}
        for at, _ in marks
    ]  # fmt: skip
    layout["annotations"] = [
        {"x": plotly_time(at), "xref": "x", "y": 1, "yref": "paper", "text": text, "showarrow": False,
         "yanchor": "bottom"}
        for at, text in marks
    ]  # fmt: skip
    layout.pop("meta", None)
    return figure


# The failure page's metric panels: training signals first, then the rest, then system metrics.
METRIC_ORDER = ("loss", "lr", "learning_rate", "grad_norm", "throughput", "samples_per_sec", "tokens_per_sec")
MAX_METRIC_PANELS = 8


def metric_rank(key: str) -> tuple[int, int, str]:
    name = key.lower()
    system = name.startswith("system/")
    known = next((i for i, word in enumerate(METRIC_ORDER) if word in name), len(METRIC_ORDER))
    return (int(system), known, name)


def metric_figures(run: Run, start: datetime, end: datetime) -> tuple[list[dict[str, Any]], int]:
    """MLflow metrics in [start, end], one panel per key on its own y axis; and how many keys were left out.

    One axis for loss, learning rate, grad norm and samples/s drew three flat lines: each
    metric gets its panel, titled with its key, the most telling ones first.
    """
    points = MetricPoint.objects.filter(run=run, ts__gte=start, ts__lte=end).order_by("key", "ts")
    series: dict[str, tuple[list[str], list[float | None]]] = {}
    for key, ts, value in points.values_list("key", "ts", "value")[:20_000]:
        xs, ys = series.setdefault(key, ([], []))
        xs.append(plotly_time(ts))
        ys.append(value)
    keys = sorted(series, key=metric_rank)
    panels = []
    for i, key in enumerate(keys[:MAX_METRIC_PANELS]):
        xs, ys = series[key]
        figure: dict[str, Any] = {
            "data": [{"type": "scatter", "mode": "lines+markers" if len(xs) < 30 else "lines", "name": key,
                      "x": xs, "y": ys}],
            "layout": time_layout(key, "", series_count=1, height=220, showlegend=False),
        }  # fmt: skip
        figure["layout"]["yaxis"]["rangemode"] = "normal"
        panels.append({"id": f"fig-pm-metric-{i}", "key": key, "figure": figure})
    return panels, max(0, len(keys) - MAX_METRIC_PANELS)


# The GPU panels of the failure page, by the GpuSample field they plot.
GPU_PANEL_FIELDS = ("utilization_gpu", "memory_used_bytes", "power_watts")


def failure_panels(
    run: Run, start: datetime, end: datetime, marks: list[tuple[datetime, str]]
) -> tuple[dict[str, dict | None], list[dict[str, Any]], int]:
    """The GPU panels (by field), the metric panels and how many metric keys were left out, all on
    the [start, end] axis with `marks` drawn."""
    figures: dict[str, dict | None] = {}
    for field in GPU_PANEL_FIELDS:
        series = gpu_series(run, field, start, end)
        figures[field] = on_failure_axis(gpu_figure(field, series), start, end, marks)
    metric_panels, metrics_left_out = metric_figures(run, start, end)
    for panel in metric_panels:
        on_failure_axis(panel["figure"], start, end, marks)
    return figures, metric_panels, metrics_left_out
