"""Comparing up to 10 runs: MLflow metrics overlaid (one panel per metric), GPU utilization
overlaid by time since each run's start, and a config diff with "differences only".

The run list's checkboxes submit `?run=<id>&run=<id>...` to /runs/compare/. Everything here
reads stored values; nothing is computed for money (cost columns come from the cost engine).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg

from dashboard.kit.figures import base_layout, plotly_text
from runs.models import GpuMinute, MetricPoint, Run
from runs.telemetry.charts import METRIC_ROW_HEIGHT, SYSTEM_METRIC_PREFIX, Figure
from runs.telemetry.tier_reads import plotly_time

MAX_RUNS = 10
# The fields of a run compared beside its parameters: what differs between two tries.
FACTS = ("experiment_name", "accelerator_type", "num_accelerators", "region", "timeout_minutes", "max_retries",
         "usage_policy_name", "status")  # fmt: skip


class CompareError(ValueError):
    """The selection cannot be compared; the message says why (shown with a 400)."""


# The largest id a database's bigint holds: a larger one made the query itself fail (a 500).
MAX_DB_ID = 2**63 - 1


def small_number(value: str, maximum: int) -> int | None:
    """`value` as a whole number from 0 to `maximum`, written in ASCII digits; None otherwise.

    `str.isdigit` alone lets `"²"` through, and `int()` then raises (a 500); beyond a bigint the
    database query failed instead.
    """
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(maximum)):
        return None
    number = int(value)
    return number if number <= maximum else None


def parse_ids(values: Sequence[str]) -> list[int]:
    """Distinct run ids in the order given (none: nothing picked yet); at most MAX_RUNS, each a positive integer."""
    ids: list[int] = []
    for value in values:
        number = small_number(value, MAX_DB_ID)
        if not number:
            raise CompareError(f"run={value[:40]!r} is not a run id; pick runs in the runs table")
        if number not in ids:
            ids.append(number)
    if len(ids) > MAX_RUNS:
        raise CompareError(f"{len(ids)} runs picked; compare at most {MAX_RUNS} at a time")
    return ids


@dataclass(frozen=True)
class ConfigRow:
    key: str
    values: tuple[str, ...]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


def _text(value: Any) -> str:
    return "—" if value in (None, "") else str(value)


def config_rows(runs: Sequence[Run]) -> list[ConfigRow]:
    """One row per fact and per parameter any run has, its value in each run ("—" where absent)."""
    rows = [ConfigRow(name, tuple(_text(getattr(run, name)) for run in runs)) for name in FACTS]
    keys = sorted({key for run in runs if isinstance(run.parameters, dict) for key in run.parameters})
    for key in keys:
        values = tuple(_text(run.parameters.get(key)) if isinstance(run.parameters, dict) else "—" for run in runs)
        rows.append(ConfigRow(f"parameters.{key}", values))
    return rows


def _label(run: Run) -> str:
    return f"{run.external_id}"


# The x axes a metrics figure can have: what the points are placed by, and the axis title.
X_AXES = {"step": "step", "time": "minutes since the run started", "utc": "UTC"}


def metrics_overlay(runs: Sequence[Run], x_axis: str = "step") -> Figure | None:
    """One panel per metric key, a line per run; x is the step, minutes since the run started
    ("time", to line runs up), or the UTC time ("utc", to line one run up with its telemetry).

    The run page draws its own metrics with this too (one run: lines named by metric, no legend).
    None when no run has a metric value.
    """
    if x_axis not in X_AXES:
        raise ValueError(f"x_axis must be one of {', '.join(X_AXES)}")
    by_key: dict[str, dict[int, list[tuple[float | str, float | None]]]] = defaultdict(lambda: defaultdict(list))
    starts = {run.pk: run.started_at for run in runs}
    rows = (
        MetricPoint.objects.filter(run__in=runs)
        .exclude(key__startswith=SYSTEM_METRIC_PREFIX)
        .order_by("key", "run_id", "step", "ts")
        .values_list("key", "run_id", "step", "ts", "value")
    )
    for key, run_id, step, ts, value in rows:
        x: float | str
        if x_axis == "time":
            start = starts.get(run_id)
            if start is None:
                continue
            x = round((ts - start).total_seconds() / 60, 2)
        elif x_axis == "utc":
            x = plotly_time(ts)
        else:
            x = step
        by_key[key][run_id].append((x, value))
    if not by_key or all(v is None for series in by_key.values() for points in series.values() for _, v in points):
        return None
    single = len(runs) == 1
    names = {run.pk: _label(run) for run in runs}
    traces = []
    for row, key in enumerate(sorted(by_key), start=1):
        for index, run in enumerate(runs):
            points = by_key[key].get(run.pk)
            if not points:
                continue
            traces.append({
                "type": "scatter", "mode": "lines+markers" if len(points) < 50 else "lines",
                "name": key if single else names[run.pk], "legendgroup": names[run.pk],
                "showlegend": row == 1 and not single, "x": [p[0] for p in points], "y": [p[1] for p in points],
                "xaxis": "x", "yaxis": "y" if row == 1 else f"y{row}", "line": {"width": 1.5, "color": COLORS[index]},
                "marker": {"size": 4},
                "hovertemplate": f"{plotly_text(key)} %{{y:.4g}}<extra>%{{fullData.name}}</extra>",
            })  # fmt: skip
    rows_count = len(by_key)
    axes: dict[str, Any] = {
        ("yaxis" if row == 1 else f"yaxis{row}"): {"title": {"text": key, "font": {"size": 11}}}
        for row, key in enumerate(sorted(by_key), start=1)
    }
    layout = base_layout(
        height=METRIC_ROW_HEIGHT * rows_count + 80, hovermode="x",
        xaxis={"title": {"text": X_AXES[x_axis]}, **({"type": "date"} if x_axis == "utc" else {})},
        grid={"rows": rows_count, "columns": 1, "pattern": "coupled", "roworder": "top to bottom"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"}, **axes,
    )  # fmt: skip
    return {"data": traces, "layout": layout}


def utilization_overlay(runs: Sequence[Run]) -> Figure | None:
    """Each run's mean GPU utilization per minute (over its GPUs), by minutes since it started."""
    rows = (
        GpuMinute.objects.filter(run__in=runs)
        .values("run_id", "minute")
        .annotate(util=Avg("utilization_gpu_avg"))
        .order_by("run_id", "minute")
    )
    series: dict[int, list[tuple[float, float]]] = defaultdict(list)
    starts = {run.pk: run.started_at for run in runs}
    for row in rows:
        start = starts.get(row["run_id"])
        if start is not None and row["util"] is not None:
            series[row["run_id"]].append((round((row["minute"] - start).total_seconds() / 60, 1), row["util"]))
    traces = [
        {"type": "scatter", "mode": "lines", "name": _label(run), "x": [p[0] for p in series[run.pk]],
         "y": [round(p[1], 1) for p in series[run.pk]], "line": {"width": 1.5, "color": COLORS[index]},
         "hovertemplate": "%{y:.0f} %<extra>%{fullData.name}</extra>"}
        for index, run in enumerate(runs) if series.get(run.pk)
    ]  # fmt: skip
    if not traces:
        return None
    layout = base_layout(
        height=300, hovermode="x",
        xaxis={"title": {"text": "minutes since the run started"}},
        yaxis={"title": {"text": "mean GPU utilization (%)"}, "range": [0, 105]},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
    )  # fmt: skip
    return {"data": traces, "layout": layout}


# Ten colours that stay apart on light and dark backgrounds (Tableau 10).
COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
