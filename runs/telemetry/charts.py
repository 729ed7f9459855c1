"""Plotly figures for the run page, built as plain dicts (no plotly.py objects, no HTML).

The figure functions are pure: data in, `{"data": [...], "layout": {...}}` out, or None when
there is nothing to draw, so the template shows an empty state instead of blank axes. The
template hands each figure to the browser through `json_script`; `static/js/charts.js` calls
`Plotly.newPlot`. The query helpers (`gpu_series`, `signals_present`, `run_panels`, the events
and the power limit) are the only code here that touches the database, and they read values,
never model instances. MLflow metrics are drawn by `runs.compare.metrics_overlay`, for one run
as for ten.

Times go to Plotly as naive UTC strings ("2026-11-02 09:00:00"): plotly.js has no time zones
and would misread an offset, so the axes say "UTC" instead.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Q
from django.utils import timezone

from dashboard.kit.figures import base_layout, plotly_markup
from runs.choices import RunEventKind, RunStatus
from runs.models import ROLLUP_FIELDS, Attempt, GpuLife, GpuMinute, GpuSample, Node, Run, RunEvent
from runs.telemetry import life, tier_reads
from runs.telemetry.downsample import MAX_POINTS, Tier, choose_tier
from runs.telemetry.tier_reads import GpuSeries, plotly_time

Figure = dict[str, Any]

# Above this many raw samples (at 1 Hz) in one GPU's series for the range asked, the chart
# reads the per-minute rollup: ~33 minutes, and 8 GPUs x 2,000 points is about what an SVG
# line chart draws without stutter. Zooming in below it re-reads raw samples.
RAW_POINTS_PER_SERIES = 2_000
# Points one per-GPU panel ("show each GPU", the node selector) sends at most, all series
# together: 8 GPUs x 2,000. A 64-GPU run gets 250 a GPU, so its 30 minutes read the minute
# rollups (30 a GPU) rather than 115,200 raw samples; raw samples come back below ~4 minutes.
PANEL_POINTS = 16_000
# Rollup rows a per-GPU panel reads per point it may send, at most (as ROLLUP_ROWS_PER_SERIES).
ROWS_PER_POINT = 4
# Metric keys under this prefix are MLflow's own system metrics, charted from GPU telemetry.
SYSTEM_METRIC_PREFIX = "system/"
# Bytes in the memory chart's unit (GB, decimal, as NVIDIA quotes "80 GB").
BYTES_PER_GB = 1e9
# One unified hover box per x is readable for one node; for 16+ series it would fill the screen.
UNIFIED_HOVER_MAX_SERIES = 8

STATUS_COLORS = {
    RunStatus.QUEUED: "#94a3b8",
    RunStatus.RUNNING: "#3b82f6",
    RunStatus.SUCCEEDED: "#22c55e",
    RunStatus.FAILED: "#ef4444",
    RunStatus.CANCELLED: "#a1a1aa",
    RunStatus.TIMED_OUT: "#f59e0b",
}


# --- Queries ----------------------------------------------------------------------------


def series_names(run: Run) -> dict[int, tuple[int, int, str]]:
    """node_id -> (attempt number, node index, label prefix); attempts named only on retried runs."""
    nodes = list(Node.objects.filter(attempt__run=run).values_list("pk", "index", "attempt__number"))
    retried = len({attempt for _, _, attempt in nodes}) > 1
    return {
        pk: (attempt, index, f"attempt {attempt} · node {index}" if retried else f"node {index}")
        for pk, index, attempt in nodes
    }


def gpu_series(
    run: Run,
    field: str,
    start: datetime | None = None,
    end: datetime | None = None,
    max_points: int = MAX_POINTS,
    *,
    node_ids: Collection[int] | None = None,
    names: dict[int, tuple[int, int, str]] | None = None,
    panel_points: int | None = None,
    gpus: int | None = None,
) -> list[GpuSeries]:
    """Per-GPU series of one telemetry field for a run over [start, end], at most `max_points` each.

    1. With no range given, the range is the run's data: the first and last minute rollup
       (a short aggregate on the natural-key index), else the first and last raw sample.
    2. Choose the tier by the range (`downsample.choose_tier`): raw when it holds at most
       RAW_POINTS_PER_SERIES samples per GPU at 1 Hz, minutes for longer, hours for ranges
       longer than ~5.5 days. An empty rollup tier (not computed yet) falls back to the
       finer tier, down to raw, and a range whose raw samples were pruned reads minutes,
       rather than show nothing.
    3. Rollup tiers draw `<field>_max` as the line, so a one-second spike or an OOM-level
       memory peak survives the fold, with `<field>_min` as each row's low and
       `<field>_avg` in the hover.
    4. Each series goes through `minmax_buckets`: every bucket keeps its min and its max.
    5. Queries order by (node, gpu_index, time), the column order of the natural-key unique
       index that starts with run, so the database walks one index range in order. Times
       come back as epoch seconds (`EpochSeconds`) and become labels once per instant.
    6. `node_ids` keeps only those nodes' GPUs (the run page's node selector); `names` is
       `series_names(run)` when the caller draws several panels and has it already.
    7. `panel_points` bounds the whole panel, not each series: with G GPUs in scope
       (`gpus`, else `gpus_in_scope`: two short queries) each series gets
       min(max_points, panel_points // G) points, the raw tier only when the window holds no
       more samples a GPU than that, and a rollup tier only while it reads at most
       ROWS_PER_POINT rows a point; so the rows read and the bytes sent follow the panel's
       pixels, not GPUs x seconds.
    """
    if field not in ROLLUP_FIELDS:
        raise ValueError(f"{field!r} is not a telemetry field with a rollup: {ROLLUP_FIELDS}")
    if start is None or end is None:
        span = tier_reads.extent(run)
        if span is None:
            return []
        start, end = start or span[0], end or span[1]
    names = names if names is not None else series_names(run)
    raw_points, rollup_rows = RAW_POINTS_PER_SERIES, None
    if panel_points is not None:
        gpus = gpus if gpus is not None else gpus_in_scope(run, end, node_ids)
        max_points = points_per_series(panel_points, gpus, max_points)
        raw_points, rollup_rows = min(raw_points, max_points), ROWS_PER_POINT * max_points
    tier = choose_tier(start, end, raw_points, rollup_rows)
    # Empty tiers fall back: rollups not computed yet -> finer; raw pruned by retention -> minutes;
    # minutes pruned (AIRBOARD_TELEMETRY_MINUTE_DAYS) -> hours.
    orders: dict[str, list[Tier]] = {"hour": ["hour", "minute", "raw"], "minute": ["minute", "raw", "hour"]}
    order = orders.get(tier, ["raw", "minute", "hour"])
    for candidate in order:
        found = tier_reads.collect_series(
            tier_reads.tier_rows(run, field, candidate, start, end, node_ids), names, candidate, max_points
        )
        if found:
            return found
    return []


def points_per_series(panel_points: int, series: int, max_points: int = MAX_POINTS) -> int:
    """Points each of `series` series may send within a panel's `panel_points` (at least 2: a min and a max)."""
    return max(2, min(max_points, panel_points // max(series, 1)))


# The minutes before a window's end `gpus_in_scope` counts GPUs in: a node ships once a minute,
# so the last minute alone may not have every node's rows yet.
SCOPE_MINUTES = 3


def gpus_in_scope(run: Run, end: datetime | None, node_ids: Collection[int] | None = None) -> int:
    """GPUs (of `node_ids`, else the run) with a minute rollup in the SCOPE_MINUTES before `end` (the last when None).

    Two short queries whatever the window's length: the latest minute at or before `end` (one
    probe of the natural key, run and minute first), then the GPUs of at most SCOPE_MINUTES x GPUs rows.
    """
    rows = GpuMinute.objects.filter(run=run)
    if node_ids is not None:
        rows = rows.filter(node_id__in=node_ids)
    before = rows.filter(minute__lte=end) if end is not None else rows
    latest = before.order_by("-run_id", "-minute").values_list("minute", flat=True).first()
    if latest is None:
        latest = rows.order_by("run_id", "minute").values_list("minute", flat=True).first()
    if latest is None:
        return 0
    recent = rows.filter(minute__lte=latest, minute__gt=latest - timedelta(minutes=SCOPE_MINUTES))
    return recent.values("node_id", "gpu_index").distinct().count()


# --- Figures ----------------------------------------------------------------------------


def time_layout(title: str, y_title: str, *, series_count: int, height: int = 340, **extra: Any) -> dict[str, Any]:
    """A time chart's layout on the shared base (dashboard/kit/figures.py).

    An empty `title` leaves the heading to the page (one chart per section needs none).
    """
    layout = base_layout(
        height=height,
        # Untitled charts still keep 36 px on top: the modebar sits there, clear of the legend.
        top=44 if title else 36,
        hovermode="x unified" if series_count <= UNIFIED_HOVER_MAX_SERIES else "closest",
        # Plotly's default place, right of the plot: a legend of 64 GPUs scrolls there instead
        # of squeezing the plot, as one below it would.
        legend={"font": {"size": 11}},
        xaxis={"type": "date", "automargin": True},
        yaxis={"title": {"text": y_title}, "rangemode": "tozero"},
    )
    if title:
        layout["title"] = {"text": title, "x": 0, "xanchor": "left", "font": {"size": 14}}
    layout.update(extra)
    return layout


def _gpu_figure(
    series: Sequence[GpuSeries], *, field: str, title: str, y_title: str, unit: str, scale: float, digits: int
) -> Figure | None:
    drawn = [s for s in series if s.has_values]
    if not drawn:
        return None

    def scaled(values: list[float | None]) -> list[float | None]:
        return [None if v is None else round(v / scale, digits) for v in values]

    traces = []
    for s in drawn:
        trace: dict[str, Any] = {
            "type": "scatter",
            "mode": "lines",
            "name": s.name,
            "x": s.x,
            "y": scaled(s.y),
            "line": {"width": 1.5},
            # A gap in telemetry stays a gap, not a straight line across it.
            "connectgaps": False,
            "hovertemplate": f"%{{y:.{digits}f}} {unit}<extra>%{{fullData.name}}</extra>",
        }
        if s.tier != "raw" and s.avg is not None:
            trace["customdata"] = scaled(s.avg)
            trace["hovertemplate"] = (
                f"max %{{y:.{digits}f}} {unit} · avg %{{customdata:.{digits}f}} {unit}<extra>%{{fullData.name}}</extra>"
            )
        traces.append(trace)
    tier = drawn[0].tier
    if tier == "raw":
        tier_note = "raw samples"
    elif drawn[0].avg is not None:
        tier_note = f"per-{tier} max, avg in hover"
    else:
        tier_note = f"per-{tier} min/max"
    layout = time_layout(
        plotly_markup("{title} <span style='font-size:12px'>· {note} · UTC</span>", title=title, note=tier_note),
        y_title,
        series_count=len(traces),
    )
    # A vertical spike line at the hovered time: with charts.js's shared hover, one crosshair
    # runs through every GPU panel of the run page.
    layout["xaxis"] = {**layout["xaxis"], "showspikes": True, "spikemode": "across", "spikesnap": "cursor",
                       "spikethickness": 1, "spikedash": "dot"}  # fmt: skip
    # charts.js reads this to re-query finer data (telemetry.json) when the user zooms.
    layout["meta"] = {"telemetry_field": field, "tier": tier}
    return {"data": traces, "layout": layout}


def utilization_figure(series: Sequence[GpuSeries]) -> Figure | None:
    """GPU utilization (%) per node/GPU; None when no GPU reported any value."""
    figure = _gpu_figure(
        series, field="utilization_gpu", title="GPU utilization", y_title="utilization (%)", unit="%", scale=1, digits=0
    )
    if figure is not None:
        figure["layout"]["yaxis"]["range"] = [0, 105]
    return figure


def memory_figure(series: Sequence[GpuSeries]) -> Figure | None:
    """GPU memory used per node/GPU in GB (bytes / 1e9); None when nothing was reported."""
    return _gpu_figure(
        series,
        field="memory_used_bytes",
        title="GPU memory used",
        y_title="memory used (GB)",
        unit="GB",
        scale=BYTES_PER_GB,
        digits=2,
    )


# Units of the fields a zoomed chart may ask for: (title, y axis, unit, scale, digits).
FIELD_UNITS: dict[str, tuple[str, str, str, float, int]] = {
    "utilization_memory": ("GPU memory utilization", "memory utilization (%)", "%", 1, 0),
    "power_watts": ("GPU power", "power (W)", "W", 1, 0),
    "temperature_c": ("GPU temperature", "temperature (°C)", "°C", 1, 0),
    "sm_clock_mhz": ("SM clock", "clock (MHz)", "MHz", 1, 0),
    # GPM (Hopper+) or DCGM profiling: the share of time SMs / tensor pipes were busy. A GPU at
    # 100% "utilization" with SMs near 0 is spinning in a collective, not computing.
    "sm_active": ("SM activity", "SMs active (%)", "%", 1, 0),
    "tensor_active": ("Tensor core activity", "tensor pipe active (%)", "%", 1, 0),
    # Stored in KB/s as NVML reports (dmon's MB/s x 1024, runs/telemetry/importers/dmon.py): drawn in MB/s.
    "pcie_tx_kbps": ("PCIe transmit", "PCIe TX (MB/s)", "MB/s", 1024, 1),
    "pcie_rx_kbps": ("PCIe receive", "PCIe RX (MB/s)", "MB/s", 1024, 1),
    # All NVLink links together, KB/s (GPM MiB/s x 1024, DCGM bytes/s / 1024): drawn in GB/s,
    # the scale NVLink runs at (hundreds of GB/s on an SXM H100), as nvidia-smi nvlink reports it.
    "nvlink_tx_kbps": ("NVLink transmit", "NVLink TX (GB/s)", "GB/s", 1024 * 1024, 2),
    "nvlink_rx_kbps": ("NVLink receive", "NVLink RX (GB/s)", "GB/s", 1024 * 1024, 2),
}
# Percent fields: the y axis runs to 100 whatever the data, so 40% looks like 40%.
PERCENT_FIELDS = ("utilization_gpu", "sm_active", "tensor_active", "utilization_memory")


# The run page's panels after utilization and memory, one per signal kept in the rollups; a
# signal the run's GPUs never reported (no GPM before Hopper, no PCIe counters under MIG) gets
# no panel, and the coverage line names it.
PANEL_FIELDS = (
    "sm_active", "tensor_active", "power_watts", "temperature_c", "sm_clock_mhz", "utilization_memory",
    "pcie_tx_kbps", "pcie_rx_kbps", "nvlink_tx_kbps", "nvlink_rx_kbps",
)  # fmt: skip
# What the coverage line calls each signal, in panel order.
SIGNAL_NAMES = {
    "utilization_gpu": "utilization", "memory_used_bytes": "memory", "sm_active": "SM activity",
    "tensor_active": "tensor activity", "power_watts": "power", "temperature_c": "temperature",
    "sm_clock_mhz": "SM clock", "utilization_memory": "memory-controller busy", "pcie_tx_kbps": "PCIe TX",
    "pcie_rx_kbps": "PCIe RX", "nvlink_tx_kbps": "NVLink TX", "nvlink_rx_kbps": "NVLink RX",
}  # fmt: skip


def power_limit(run: Run) -> float | None:
    """The highest power limit the run's GPUs reported (NVML's enforced limit), for the power panel.

    Each GPU's highest, kept with its life sums on the write path (runs/telemetry/gpu_life.py):
    one row a GPU, where the hours were 20,000 rows for 13 days of 64 GPUs; minutes, then raw
    rows, where a run has none."""
    found = GpuLife.objects.filter(run=run).aggregate(limit=Max("power_limit_watts"))["limit"]
    if found is None:
        found = GpuMinute.objects.filter(run=run).aggregate(limit=Max("power_limit_watts"))["limit"]
    if found is None:
        found = GpuSample.objects.filter(run=run).aggregate(limit=Max("power_limit_watts"))["limit"]
    return found


def with_limit(figure: Figure | None, limit: float | None, label: str) -> Figure | None:
    """The figure with a dashed horizontal line at `limit` (power against its limit)."""
    if figure is None or limit is None:
        return figure
    layout = figure["layout"]
    layout["shapes"] = [*layout.get("shapes", []), {
        "type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": limit, "y1": limit,
        "line": {"dash": "dash", "width": 1.5, "color": "#dc2626"},
    }]  # fmt: skip
    layout["annotations"] = [*layout.get("annotations", []), {
        "xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": limit, "yanchor": "bottom",
        "text": f"{label} {limit:.0f} W", "showarrow": False, "font": {"size": 11, "color": "#dc2626"},
    }]  # fmt: skip
    return figure


# Events drawn on the GPU panels as markers: what the agent reports about the GPUs themselves.
MARKED_EVENTS = (RunEventKind.XID, RunEventKind.GPU_LOST, RunEventKind.ECC)
MAX_MARKERS = 50


def gpu_events(run: Run, node_ids: Collection[int] | None = None) -> list[tuple[datetime, str]]:
    """(time, short label) of the run's Xid, GPU-lost and ECC events, oldest first, at most MAX_MARKERS.

    With `node_ids`, only those nodes' events and the ones that name no node."""
    events = RunEvent.objects.filter(run=run, kind__in=MARKED_EVENTS)
    if node_ids is not None:
        events = events.filter(Q(node_id__in=node_ids) | Q(node__isnull=True))
    rows = events.order_by("ts").values_list("ts", "kind", "details", "gpu_index")[:MAX_MARKERS]
    out = []
    for ts, kind, details, gpu in rows:
        xid = details.get("xid") if isinstance(details, dict) else None
        label = f"Xid {xid}" if xid is not None else RunEventKind(kind).label
        out.append((ts, label if gpu is None else f"{label} · GPU {gpu}"))
    return out


def with_events(figure: Figure | None, events: Sequence[tuple[datetime, str]]) -> Figure | None:
    """The figure with a dotted vertical line and a label at each event (Xid markers)."""
    if figure is None or not events:
        return figure
    layout = figure["layout"]
    shapes, notes = list(layout.get("shapes", [])), list(layout.get("annotations", []))
    for ts, label in events:
        x = plotly_time(ts)
        shapes.append({"type": "line", "xref": "x", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"dash": "dot", "width": 1.5, "color": "#b45309"}})  # fmt: skip
        notes.append({"xref": "x", "x": x, "yref": "paper", "y": 1, "yanchor": "bottom", "text": label,
                      "showarrow": False, "font": {"size": 10, "color": "#b45309"}})  # fmt: skip
    layout["shapes"], layout["annotations"] = shapes, notes
    return figure


def signals_present(
    run: Run, node_ids: Collection[int] | None = None, found: life.RunLife | None = None
) -> frozenset[str]:
    """ROLLUP_FIELDS the run's GPUs (or those of `node_ids`) reported at least once.

    From the rollups over the run's life (`life.life`, one aggregate; the page's frame passes
    the one it read as `found`), else the raw rows not rolled up.
    """
    found = found if found is not None else life.life(run)
    if found.has_rows(node_ids):
        return found.signals(node_ids)
    if node_ids is not None:
        # Those nodes have no rollups in the tier the others have: their minutes, if any.
        minutes = life.tier(GpuMinute, run, node_ids)
        if minutes.nodes:
            return minutes.signals()
    raw = GpuSample.objects.filter(run=run)
    if node_ids is not None:
        raw = raw.filter(node_id__in=node_ids)
    values = raw.aggregate(**{field: Count(field) for field in ROLLUP_FIELDS})
    return frozenset(field for field in ROLLUP_FIELDS if values[field])


@dataclass(frozen=True)
class RunPanels:
    """The run page's GPU panels for one range and node choice, and the signals behind them."""

    utilization: Figure | None
    memory: Figure | None
    panels: list[tuple[str, Figure | None]]
    signals: frozenset[str]

    @property
    def reported(self) -> list[str]:
        """Names of the signals the run has, in panel order."""
        return [name for field, name in SIGNAL_NAMES.items() if field in self.signals]

    @property
    def not_reported(self) -> list[str]:
        """Names of the signals its GPUs never reported: no panel is drawn for them."""
        return [name for field, name in SIGNAL_NAMES.items() if field not in self.signals]


def node_pks(names: dict[int, tuple[int, int, str]], node: int | None) -> list[int] | None:
    """Pks of the run's nodes with index `node` (one per attempt that had it); None for all nodes."""
    if node is None:
        return None
    return [pk for pk, (_, index, _) in names.items() if index == node]


def run_panels(
    run: Run, start: datetime | None = None, end: datetime | None = None, node: int | None = None
) -> RunPanels:
    """Every GPU panel of the run page over [start, end], for node index `node` or all nodes.

    The queries are shared: node names, signal presence, extent, events and the power limit
    once each, then one read per panel the run has data for; an absent signal costs nothing.
    """
    names = series_names(run)
    node_ids = node_pks(names, node)
    signals = signals_present(run, node_ids)
    empty = RunPanels(None, None, [(field, None) for field in PANEL_FIELDS], signals)
    if not signals:
        return empty
    if start is None or end is None:
        span = tier_reads.extent(run)
        if span is None:
            return empty
        start, end = start or span[0], end or span[1]
    events = gpu_events(run, node_ids)

    def figure(field: str) -> Figure | None:
        if field not in signals:
            return None
        drawn = gpu_figure(field, gpu_series(run, field, start, end, node_ids=node_ids, names=names))
        if drawn is not None and node is not None:
            # charts.js and live.js ask telemetry.json for the same node on zoom and refresh.
            drawn["layout"]["meta"]["node"] = node
        return drawn

    panels = []
    for field in PANEL_FIELDS:
        drawn = figure(field)
        if field == "power_watts":
            drawn = with_limit(drawn, power_limit(run), "limit")
        panels.append((field, with_events(drawn, events)))
    return RunPanels(
        utilization=with_events(figure("utilization_gpu"), events),
        memory=figure("memory_used_bytes"),
        panels=panels,
        signals=signals,
    )


def panel_figures(
    run: Run, start: datetime | None = None, end: datetime | None = None, node: int | None = None
) -> list[tuple[str, Figure | None]]:
    """(field, figure) of each PANEL_FIELDS signal of the run over [start, end]; power carries its
    limit line; None where the run has no data for the signal."""
    return run_panels(run, start, end, node).panels


def gpu_figure(field: str, series: Sequence[GpuSeries]) -> Figure | None:
    """The figure of any rollup field: the run page's two, or a plain one for the others."""
    if field == "utilization_gpu":
        return utilization_figure(series)
    if field == "memory_used_bytes":
        return memory_figure(series)
    title, y_title, unit, scale, digits = FIELD_UNITS[field]
    figure = _gpu_figure(series, field=field, title=title, y_title=y_title, unit=unit, scale=scale, digits=digits)
    if figure is not None and field in PERCENT_FIELDS:
        figure["layout"]["yaxis"]["range"] = [0, 105]
    return figure


# Height of each metric's own row in the metrics chart, in pixels.
METRIC_ROW_HEIGHT = 170


def timeline_figure(attempts: Iterable[Attempt], now: datetime | None = None) -> Figure | None:
    """Horizontal bars, one per attempt and one per node, coloured by status; None if none started.

    Each bar is drawn as Plotly's timeline trick: `base` is the start and `x` the length in
    milliseconds on a date axis. Unfinished attempts and nodes run to `now`. Nodes without
    their own times take their attempt's. Use prefetch_related("nodes") to avoid a query per
    attempt.
    """
    now = now or timezone.now()
    rows: list[tuple[str, str, datetime, datetime, str]] = []  # label, status, start, end, detail
    for attempt in attempts:
        if attempt.started_at is None:
            continue
        end = attempt.ended_at or now
        detail = f"exit {attempt.exit_code}" if attempt.exit_code is not None else attempt.get_status_display()
        rows.append((f"attempt {attempt.number}", attempt.status, attempt.started_at, end, detail))
        for node in attempt.nodes.all():
            start = node.started_at or attempt.started_at
            node_end = node.ended_at or attempt.ended_at or now
            node_detail = f"exit {node.exit_code}" if node.exit_code is not None else node.get_status_display()
            label = f"attempt {attempt.number} · node {node.index}"
            rows.append((label, node.status, start, node_end, node_detail))
    if not rows:
        return None

    traces = []
    for status in RunStatus:
        bars = [r for r in rows if r[1] == status]
        if not bars:
            continue
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": status.label,
                "y": [r[0] for r in bars],
                "base": [plotly_time(r[2]) for r in bars],
                "x": [max((r[3] - r[2]).total_seconds(), 0) * 1000 for r in bars],
                "customdata": [[plotly_time(r[3]), r[4]] for r in bars],
                "marker": {"color": STATUS_COLORS[status]},
                "hovertemplate": "%{base} → %{customdata[0]}<br>%{customdata[1]}<extra>%{y}</extra>",
            }
        )
    labels = [r[0] for r in rows]
    layout = time_layout(
        "",
        "",
        series_count=len(traces),
        height=90 + 26 * len(labels),
        hovermode="closest",
        barmode="overlay",
        # Few statuses: a one-line legend above the bars, left, clear of the date ticks below
        # and of the modebar on the right.
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom", "font": {"size": 11}},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": labels, "autorange": "reversed"},
    )
    layout["margin"] = {"l": 150, "r": 16, "t": 36, "b": 40}
    layout["xaxis"]["title"] = {"text": "UTC"}
    return {"data": traces, "layout": layout}
