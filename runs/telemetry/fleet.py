"""The fleet page's data: every GPU of every running run now, and utilization over time.

Two queries whatever the number of runs: the live grid reads the last few minutes of the
minute rollups (`gpuminute_minute_idx`), the history reads the hour rollups
(`gpuhour_hour_idx`) grouped in the database by hour, team and accelerator type. The
figure builders are pure, like runs/telemetry/charts.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Case, F, FloatField, Sum, When
from django.utils import timezone

from dashboard.kit import access
from dashboard.kit.figures import plotly_markup
from runs.choices import RunStatus
from runs.models import GpuHour, GpuMinute
from runs.telemetry.charts import Figure, time_layout
from runs.telemetry.labels import gpu_label
from runs.telemetry.tier_reads import plotly_time

GroupBy = Literal["team", "accelerator"]
# How far back the utilization history goes on the fleet page.
HISTORY = timedelta(days=7)
GROUP_FIELDS: dict[GroupBy, str] = {"team": "run__team__name", "accelerator": "run__accelerator_type"}


@dataclass(frozen=True)
class GpuCell:
    """One GPU's latest minute: utilization (avg and max) and memory used of total."""

    gpu_index: int
    minute: datetime
    utilization: float | None
    utilization_max: float | None
    memory_used: float | None
    memory_total: int | None

    @property
    def memory_percent(self) -> float | None:
        if self.memory_used is None or not self.memory_total:
            return None
        return 100.0 * self.memory_used / self.memory_total

    @property
    def heat(self) -> float:
        """0..1 for the cell's shade: its average utilization."""
        return max(0.0, min((self.utilization or 0.0) / 100.0, 1.0))

    # The grid's texts, built here rather than with nine template filters a cell: at 4,000
    # cells (500 runs) floatformat and date were three quarters of the page's time.
    @property
    def label(self) -> str:
        """The cell's text: "GPU: utilization · memory %" (a MIG instance as "0 MIG 7")."""
        gpu = gpu_label(self.gpu_index).removeprefix("GPU ")
        return f"{gpu}: {_whole(self.utilization)} · {_whole(self.memory_percent)}"

    @property
    def title(self) -> str:
        """The cell's hover text, its minute in UTC (as the page says) whatever TIME_ZONE is."""
        return (
            f"{gpu_label(self.gpu_index)} at {self.minute.astimezone(UTC):%H:%M} UTC: "
            f"avg {_whole(self.utilization)} %, "
            f"max {_whole(self.utilization_max)} %, memory {_whole(self.memory_percent)} %"
        )

    @property
    def shade(self) -> str:
        """`heat` with two decimals, for the cell's background alpha."""
        return f"{self.heat:.2f}"


def _whole(value: float | None) -> str:
    """A percentage rounded half up to a whole number (as floatformat:0 does), or a dash."""
    return "\u2013" if value is None else str(math.floor(value + 0.5))  # an en dash, as the page had


@dataclass
class NodeRow:
    """One node of a running run, its GPUs in index order."""

    run_id: int
    run_external_id: str
    team: str
    accelerator_type: str
    node_index: int
    host: str
    gpus: list[GpuCell] = field(default_factory=list)


def live_gpus(user: User | AnonymousUser, now: datetime | None = None) -> list[NodeRow]:
    """The latest minute rollup of every GPU of the user's running runs, one row per node.

    1. One query: the minute rollups of running runs in the user's teams within the last
       AIRBOARD_FLEET_RECENT_MINUTES, newest first per GPU.
    2. Keep the first (newest) row per (run, node, GPU); group GPUs into node rows.
    """
    now = now or timezone.now()
    since = now - timedelta(minutes=settings.AIRBOARD_FLEET_RECENT_MINUTES)
    rows = (
        GpuMinute.objects.filter(access.team_q(user, "run__team"), run__status=RunStatus.RUNNING, minute__gte=since)
        .order_by("run_id", "node_id", "gpu_index", "-minute")
        .values_list(
            "run_id", "node_id", "gpu_index", "minute", "utilization_gpu_avg", "utilization_gpu_max",
            "memory_used_bytes_max", "memory_total_bytes", "run__external_id", "run__team__name",
            "run__accelerator_type", "node__index", "node__host",
        )
    )  # fmt: skip
    nodes: dict[tuple[int, int], NodeRow] = {}
    seen: set[tuple[int, int, int]] = set()
    for run_id, node_id, gpu, minute, util, util_max, mem, mem_total, ext, team, acc, index, host in rows:
        if (run_id, node_id, gpu) in seen:
            continue
        seen.add((run_id, node_id, gpu))
        node = nodes.get((run_id, node_id))
        if node is None:
            node = nodes[run_id, node_id] = NodeRow(run_id, ext, team, acc, index, host)
        node.gpus.append(GpuCell(gpu, minute, util, util_max, mem, mem_total))
    return sorted(nodes.values(), key=lambda n: (n.team, n.run_external_id, n.node_index))


def utilization_history(
    user: User | AnonymousUser, now: datetime | None = None, span: timedelta = HISTORY
) -> dict[GroupBy, list[tuple[str, datetime, float | None, int]]]:
    """Per grouping (team, accelerator type): (group, hour, mean GPU utilization, sample count) rows.

    The mean weights each GPU-hour's average by its sample count, so a GPU that reported
    for ten minutes weighs a sixth of one that reported all hour.

    1. One grouped query over GpuHour by (team, accelerator type, hour): the weighted sum,
       the weight (samples of hours that reported utilization) and the samples. A query per
       grouping read the same hour rows twice, a third of the page's time at 500 runs.
    2. Fold those few rows (teams x types x 168 hours) into each grouping in Python; the
       mean is sum / weight, None where no hour reported utilization.
    """
    now = now or timezone.now()
    weight = Sum(Case(When(utilization_gpu_avg__isnull=False, then=F("samples")), default=0))
    rows = (
        GpuHour.objects.filter(access.team_q(user, "run__team"), hour__gte=now - span)
        .values(*GROUP_FIELDS.values(), "hour")
        .annotate(total=Sum(F("utilization_gpu_avg") * F("samples"), output_field=FloatField()), weight=weight,
                  n=Sum("samples"))
        .order_by()
        .values_list(*GROUP_FIELDS.values(), "hour", "total", "weight", "n")
    )  # fmt: skip
    folded: dict[GroupBy, dict[tuple[str, datetime], list[float]]] = {group_by: {} for group_by in GROUP_FIELDS}
    for *groups, hour, total, weight_sum, n in rows:
        for group_by, group in zip(GROUP_FIELDS, groups, strict=True):
            sums = folded[group_by].setdefault((group, hour), [0.0, 0, 0])
            sums[0] += total or 0.0
            sums[1] += weight_sum or 0
            sums[2] += n or 0
    return {
        group_by: [
            (group, hour, total / w if w else None, int(n))
            for (group, hour), (total, w, n) in sorted(by_key.items(), key=lambda item: (item[0][0] or "", item[0][1]))
        ]
        for group_by, by_key in folded.items()
    }


def history_figure(rows: list[tuple[str, datetime, float | None, int]], label: str) -> Figure | None:
    """One line per group (team or accelerator type) of mean utilization by hour; None when empty."""
    traces: dict[str, dict[str, Any]] = {}
    for group, hour, mean, _ in rows:
        trace = traces.setdefault(
            group,
            {
                "type": "scatter",
                "mode": "lines",
                "name": group or "(none)",
                "x": [],
                "y": [],
                "line": {"width": 1.5},
                "connectgaps": False,
                "hovertemplate": "%{y:.0f} %<extra>%{fullData.name}</extra>",
            },
        )
        trace["x"].append(plotly_time(hour))
        trace["y"].append(None if mean is None else round(mean, 1))
    if not traces:
        return None
    heading = plotly_markup(
        "GPU utilization by {label} <span style='font-size:12px'>· hourly mean · UTC</span>", label=label
    )
    layout = time_layout(heading, "%",
                     series_count=len(traces))  # fmt: skip
    layout["yaxis"]["range"] = [0, 105]
    return {"data": list(traces.values()), "layout": layout}
