"""The run page's GPU panels at the resolution of the screen: a cost bounded by pixels, not GPUs x seconds.

A panel `width` pixels wide never needs more than about one bucket per pixel. For every field
asked, `read_envelopes` folds every GPU in scope (the run, or one node) into at most `width`
time buckets and keeps, per bucket, the lowest and highest value seen (a one-second spike of
one GPU on a 13-day run survives) and the mean over GPUs and time. The panel draws the mean as
a line with the min-max band around it, and names the GPU whose mean over the window sits
furthest out (`Worst`). Single GPUs stay on demand (`charts.gpu_series`, the "show each GPU"
view).

Where the work happens, by tier (`pick_tier`):

    tier     window (width w px)           read
    raw      <= min(2w, 2,000) s            compacted blocks decoded once per request into
                                            numpy arrays (every field asked at once), and
                                            hot rows grouped by bucket in SQL, only in the
                                            node-minutes no block covers
    minute   <= 4w minutes                  the whole run: RunEnvelope minutes (its GPUs folded
                                            on the write path, runs/telemetry/envelope_store.py)
                                            grouped by bucket in SQL; one node: GpuMinute
    hour     longer                         the same with RunEnvelope hours / GpuHour

An empty tier falls back as `charts.gpu_series` does (rollups not written yet -> finer; raw
pruned -> minutes; no folded rows in the window -> GpuMinute / GpuHour folded here with the same
`envelope_store.gpu_fold`). One query per tier read, one for the per-GPU means, whatever the
number of GPUs or fields; the database hands back at most `width` rows a query, and at the
minute and hour tiers reads one row a bucket for the whole run whatever its number of GPUs.

Hot rows are read only where no block covers the node-minute: compaction deletes the rows it
folds, and until vacuum has run their index entries still point at dead tuples; a read of a
compacted window through them cost 169-238 ms (4 ms after vacuum). The rest, the live edge,
is read by `_hot_rows` through an exact (node, ts) index range, never by a sequential scan of
the pages compaction emptied (11,475 pages against 806 for a 64-GPU run). A late sample that lands
beside a block while compaction folds its minute (blocks.py) is missed here until the next
pass merges it, a minute at most.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from django.db.models import Avg, Count, ExpressionWrapper, FloatField, Max, Min, Sum, Value
from django.db.models.functions import Floor

from dashboard.kit.figures import PlotlyMarkup, plotly_markup
from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, GpuSample, GpuSampleBlock, Run, RunEnvelope
from runs.telemetry import blocks, charts, envelope_store, gpu_life, hot_reads, tier_reads
from runs.telemetry.downsample import Tier, tier_step
from runs.telemetry.labels import gpu_label

Figure = dict[str, Any]

# Panel width in CSS pixels when the client says nothing, and the bounds of what it may say.
DEFAULT_WIDTH = 1000
MIN_WIDTH = 100
MAX_WIDTH = 2000
# The raw tier serves windows of at most this many seconds (and at most 2 per pixel): beyond it
# the minute rollups already give more points than the panel has pixels to show.
RAW_MAX_SECONDS = 2000
# Minute rows per series the minute tier reads at most, per pixel; longer windows read hours.
MINUTE_ROWS_PER_PIXEL = 4
# The per-GPU means that name the worst GPU come from minute rollups up to this window, from hours beyond:
# a 6-hour window of a 64-GPU run is 23,040 minute rows (52 ms, 4x the 1-GPU run) but 448 hour rows.
WORST_FROM_MINUTES = timedelta(hours=2)
# Fields where the lowest GPU is the worst (an idle GPU); for the others the highest (hottest, fullest).
LOW_IS_WORSE = frozenset({"utilization_gpu", "sm_active", "tensor_active", "utilization_memory", "sm_clock_mhz"})
BAND_COLOR = "rgba(37,99,235,0.18)"
LINE_COLOR = "#2563eb"


def clamp_width(width: int) -> int:
    """A client's panel width kept within [MIN_WIDTH, MAX_WIDTH]."""
    return max(MIN_WIDTH, min(MAX_WIDTH, width))


def pick_tier(span_seconds: float, width: int) -> Tier:
    """The tier a window of `span_seconds` reads for a panel `width` pixels wide (see the module table)."""
    if span_seconds <= min(2 * width, RAW_MAX_SECONDS):
        return "raw"
    if span_seconds / 60 <= MINUTE_ROWS_PER_PIXEL * width:
        return "minute"
    return "hour"


TIERS: tuple[Tier, ...] = ("raw", "minute", "hour")


def step_tier(span_seconds: float, step_seconds: float) -> Tier:
    """The tier a window read at `step_seconds` a bucket reads (the read API's `step`).

    The finest tier whose rows are no wider than the step, but never finer than the widest
    panel (MAX_WIDTH) would read for the window: 30 s buckets of ten minutes are raw seconds,
    5 minutes of six hours minute rollups, of a month hours, at no more read than a chart's.
    """
    finest: Tier = "raw" if step_seconds < 60 else "minute" if step_seconds < 3600 else "hour"
    return max(finest, pick_tier(span_seconds, MAX_WIDTH), key=TIERS.index)


@dataclass(frozen=True)
class Worst:
    """The GPU whose mean over the window sits furthest out, against the mean of the others."""

    name: str
    mean: float
    others: float
    low: bool  # True: lowest is worst (utilization); False: highest (temperature)


@dataclass(frozen=True)
class Envelope:
    """One field over a window: per bucket start (epoch ms) the mean, lowest and highest value of every GPU in scope."""

    field: str
    tier: Tier
    bucket_seconds: float
    x: list[int]
    mean: list[float | None]
    low: list[float | None]
    high: list[float | None]
    gpus: int
    worst: Worst | None

    @property
    def has_values(self) -> bool:
        return any(v is not None for v in self.mean)


class _Buckets:
    """Per-field accumulators over `n` buckets: running min, max, sum and count."""

    def __init__(self, fields: Sequence[str], n: int) -> None:
        self.n = n
        self.lo = {f: np.full(n, np.inf) for f in fields}
        self.hi = {f: np.full(n, -np.inf) for f in fields}
        self.sum = {f: np.zeros(n) for f in fields}
        self.count = {f: np.zeros(n) for f in fields}

    def add_rows(self, rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> None:
        """Rows of a grouped query: bucket `b`, and per field `lo_`, `hi_`, `sum_`, `n_`."""
        for row in rows:
            b = int(row["b"])
            b = min(max(b, 0), self.n - 1)
            for f in fields:
                n = row[f"n_{f}"]
                if not n:
                    continue
                # Rollup rows with a mean and no min or max (written by hand, not from samples):
                # the mean stands for both rather than the band failing.
                mean = row[f"sum_{f}"] / n
                low, high = row[f"lo_{f}"], row[f"hi_{f}"]
                self.lo[f][b] = min(self.lo[f][b], mean if low is None else low)
                self.hi[f][b] = max(self.hi[f][b], mean if high is None else high)
                self.sum[f][b] += row[f"sum_{f}"]
                self.count[f][b] += n

    def add_arrays(self, index: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        """Samples in bucket `index` (sorted), one array per field, NaN where missing."""
        if not len(index):
            return
        starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
        where = index[starts]
        for f, values in columns.items():
            present = ~np.isnan(values)
            lo = np.fmin.reduceat(values, starts)
            hi = np.fmax.reduceat(values, starts)
            total = np.add.reduceat(np.where(present, values, 0.0), starts)
            count = np.add.reduceat(present.astype(np.float64), starts)
            seen = count > 0
            at = where[seen]
            self.lo[f][at] = np.minimum(self.lo[f][at], lo[seen])
            self.hi[f][at] = np.maximum(self.hi[f][at], hi[seen])
            self.sum[f][at] += total[seen]
            self.count[f][at] += count[seen]

    @property
    def empty(self) -> bool:
        return not any(c.any() for c in self.count.values())


def _epoch(ts: datetime) -> float:
    return ts.timestamp()


def _bucket_expression(time_field: str, t0: float, width_s: float) -> Floor:
    since = tier_reads.EpochSeconds(time_field) - Value(t0, output_field=FloatField())
    offset = ExpressionWrapper(since / Value(width_s, output_field=FloatField()), output_field=FloatField())
    return Floor(offset, output_field=FloatField())


def _read_rollups(
    run: Run, fields: Sequence[str], tier: Tier, start: datetime, end: datetime, acc: _Buckets, t0: float, w: float,
    node_ids: Collection[int] | None,
) -> None:  # fmt: skip
    # A bucket that starts before `start` still overlaps it: widen the lower bound by one row.
    after = start - tier_step(tier)
    if node_ids is None:
        # The whole run: its GPUs already folded per minute (hour) on the write path, one row a bucket.
        seconds = envelope_store.MINUTE if tier == "minute" else envelope_store.HOUR
        folded = RunEnvelope.objects.filter(run=run, seconds=seconds, start__gt=after, start__lte=end)
        buckets = folded.annotate(b=_bucket_expression("start", t0, w)).values("b")
        acc.add_rows(list(buckets.annotate(**envelope_store.bucket_fold(fields)).order_by()), fields)
        if not acc.empty:
            return
    # One node, or rollups written without their fold: every GPU's rows, folded here the same way.
    model, time_field = (GpuMinute, "minute") if tier == "minute" else (GpuHour, "hour")
    rows = model.objects.filter(run=run, **{f"{time_field}__gt": after, f"{time_field}__lte": end})
    if node_ids is not None:
        rows = rows.filter(node_id__in=node_ids)
    grouped = rows.annotate(b=_bucket_expression(time_field, t0, w)).values("b")
    acc.add_rows(list(grouped.annotate(**envelope_store.gpu_fold(fields)).order_by()), fields)


def _minute_floor(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(second=0, microsecond=0)


def _read_raw(
    run: Run, fields: Sequence[str], start: datetime, end: datetime, acc: _Buckets, t0: float, w: float,
    node_scope: Collection[int],
) -> None:  # fmt: skip
    """Blocks decoded once (every field at once), then the hot rows of the node-minutes no block covers."""
    first_minute = _minute_floor(start)
    cold = GpuSampleBlock.objects.filter(run=run, node_id__in=list(node_scope), minute__gte=first_minute,
                                         minute__lte=end).values_list("node_id", "minute", "data")  # fmt: skip
    covered: set[tuple[int, datetime]] = set()
    times: list[np.ndarray] = []
    columns: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    for node_id, minute, data in cold.iterator(chunk_size=500):
        covered.add((node_id, minute))
        _, offsets, decoded = blocks.decode_arrays(data, fields)
        times.append(_epoch(minute) + offsets / 1e6)
        for f in fields:
            columns[f].append(decoded[f])
    span = _epoch(end) - t0
    if times:
        t = np.concatenate(times) - t0
        keep = (t >= 0) & (t <= span)
        index = np.minimum((t[keep] // w).astype(np.int64), acc.n - 1)
        order = np.argsort(index, kind="stable")
        acc.add_arrays(index[order], {f: np.concatenate(columns[f])[keep][order] for f in fields})
    # The node-minutes of the window no block covers: only there can hot rows be.
    minutes = []
    minute = first_minute
    while minute <= end:
        minutes.append(minute)
        minute += timedelta(minutes=1)
    spans: list[tuple[int, datetime, datetime]] = []
    for node_id in node_scope:
        open_at: datetime | None = None
        for minute in minutes:
            if (node_id, minute) in covered:
                if open_at is not None:
                    spans.append((node_id, open_at, minute))
                    open_at = None
            elif open_at is None:
                open_at = minute
        if open_at is not None:
            spans.append((node_id, open_at, minutes[-1] + timedelta(minutes=1)))
    if not spans:
        return
    acc.add_rows(_hot_rows(run, fields, spans, start, end, t0, w), fields)


def _hot_rows(
    run: Run, fields: Sequence[str], spans: Sequence[tuple[int, datetime, datetime]], start: datetime, end: datetime,
    t0: float, w: float,
) -> list[Mapping[str, Any]]:  # fmt: skip
    """The hot rows of `spans` (node, first minute, end) grouped by bucket in SQL: one row a bucket, all GPUs folded.

    Each span, cut to [start, end], is one exact range of the (node_id, ts) index
    (`hot_reads.span_filter`), read with no sequential scan and no parallel workers
    (`hot_reads.index_ranges`): the run's own rows only, never every running run's window
    or the pages compaction emptied before vacuum has run (runs/telemetry/hot_reads.py).
    """
    aggregates: dict[str, Any] = {}
    for f in fields:
        aggregates |= {f"lo_{f}": Min(f), f"hi_{f}": Max(f), f"sum_{f}": Sum(f), f"n_{f}": Count(f)}
    rows: list[Mapping[str, Any]] = []
    with hot_reads.index_ranges():
        # Spans are disjoint: a bucket split across queries adds up in `_Buckets.add_rows`.
        for hot in hot_reads.hot_rows([(run.pk, *span) for span in spans], start, end):
            grouped = hot.annotate(b=_bucket_expression("ts", t0, w)).values("b").annotate(**aggregates).order_by()
            rows.extend(grouped)
    return rows


def _worst(
    run: Run, fields: Sequence[str], start: datetime, end: datetime, node_ids: Collection[int] | None,
    names: dict[int, tuple[int, int, str]], whole_life: bool = False,
) -> tuple[int, dict[str, Worst | None]]:  # fmt: skip
    """(GPUs in scope, field -> worst GPU) from each GPU's mean over the window: one grouped rollup query.

    Windows over WORST_FROM_MINUTES read hour rollups, so the mean may take in up to half an hour
    before the window's start; the query reads GPUs x hours rows, not GPUs x minutes. The whole
    run's life (`whole_life`, the "all" range) reads each GPU's GpuLife row instead, the mean of
    all of its hours kept on the write path (runs/telemetry/gpu_life.py): a row a GPU however old
    the run (its 20,000 hours for a 13-day 64-GPU run were ~9 ms, and grew every hour).
    """
    means: list[Mapping[str, Any]] = gpu_life.whole_life_means(run.pk, fields, node_ids) if whole_life else []
    if not means:
        model: type[GpuMinute] | type[GpuHour]
        if end - start <= WORST_FROM_MINUTES:
            model, time_field, after = GpuMinute, "minute", start - timedelta(minutes=1)
        else:
            # The hours whose middle lies in the window: the first hour counts when it is at least half inside.
            model, time_field, after = GpuHour, "hour", start - timedelta(minutes=30, microseconds=1)
        rows = model.objects.filter(run=run, **{f"{time_field}__gt": after, f"{time_field}__lte": end})
        if node_ids is not None:
            rows = rows.filter(node_id__in=node_ids)
        means = list(rows.values("node_id", "gpu_index").annotate(**{f: Avg(f"{f}_avg") for f in fields}).order_by())
    if not means:
        # Raw rows not rolled up (loaded without the ingest path): their own means, hot part only.
        hot = GpuSample.objects.filter(run=run, ts__gte=start, ts__lte=end)
        if node_ids is not None:
            hot = hot.filter(node_id__in=node_ids)
        means = list(hot.values("node_id", "gpu_index").annotate(**{f: Avg(f) for f in fields}).order_by())
    out: dict[str, Worst | None] = {}
    for f in fields:
        present = [(row[f], row["node_id"], row["gpu_index"]) for row in means if row[f] is not None]
        if len(present) < 2:
            out[f] = None
            continue
        low = f in LOW_IS_WORSE
        value, node_id, gpu = min(present) if low else max(present)
        rest = [v for v, n, g in present if (n, g) != (node_id, gpu)]
        prefix = names.get(node_id, (0, node_id, f"node #{node_id}"))[2]
        out[f] = Worst(name=f"{prefix} · {gpu_label(gpu)}", mean=value, others=sum(rest) / len(rest), low=low)
    return len(means), out


def read_envelopes(
    run: Run,
    fields: Sequence[str],
    start: datetime | None = None,
    end: datetime | None = None,
    width: int = DEFAULT_WIDTH,
    *,
    node_ids: Collection[int] | None = None,
    names: dict[int, tuple[int, int, str]] | None = None,
    bucket_seconds: float | None = None,
) -> dict[str, Envelope]:
    """field -> Envelope of the run (or of `node_ids`) over [start, end] (the run's data when not given).

    1. The tier comes from the window and the width (`pick_tier`); buckets are span / width
       seconds wide, never finer than the tier's own step, so a panel gets at most `width`.
       `bucket_seconds` (the read API's `step`) asks buckets that wide instead, never more
       than MAX_WIDTH of them, from the tier `step_tier` picks.
    2. Every field is read in the same queries (and each block decoded once), then folded
       into per-bucket min, max, sum and count (`_Buckets`).
    3. An empty tier falls back to the next one, as `charts.gpu_series` does.
    4. The per-GPU means of the window name the worst GPU (one more query; GpuLife rows for the whole life).
    """
    for f in fields:
        if f not in ROLLUP_FIELDS:
            raise ValueError(f"{f!r} is not a telemetry field with a rollup: {ROLLUP_FIELDS}")
    names = names if names is not None else charts.series_names(run)
    # No window given: the run's whole life, whose per-GPU means are kept on the write path.
    whole_life = start is None and end is None
    if start is None or end is None:
        found = tier_reads.extent(run)
        if found is None:
            return {}
        start, end = start or found[0], end or found[1]
    span = max((end - start).total_seconds(), 1.0)
    if bucket_seconds is not None:
        bucket_seconds = max(bucket_seconds, span / MAX_WIDTH)
        width = math.ceil(span / bucket_seconds)
    # The page's panels ask at least MIN_WIDTH (`clamp_width`); the read API may ask fewer buckets.
    width = max(1, min(MAX_WIDTH, width))
    tier = pick_tier(span, width) if bucket_seconds is None else step_tier(span, bucket_seconds)
    orders: dict[str, list[Tier]] = {"hour": ["hour", "minute", "raw"], "minute": ["minute", "raw", "hour"]}
    order = orders.get(tier, ["raw", "minute", "hour"])
    t0 = _epoch(start)
    node_scope = list(node_ids) if node_ids is not None else list(names)
    acc, w = _Buckets(fields, 1), 1.0
    for candidate in order:
        w = max(bucket_seconds or span / width, tier_step(candidate).total_seconds())
        acc = _Buckets(fields, math.ceil(span / w) + 1)
        if candidate == "raw":
            _read_raw(run, fields, start, end, acc, t0, w, node_scope)
        else:
            _read_rollups(run, fields, candidate, start, end, acc, t0, w, node_ids)
        if not acc.empty:
            tier = candidate
            break
    if acc.empty:
        return {}
    gpus, worst = _worst(run, fields, start, end, node_ids, names, whole_life)
    out = {}
    for f in fields:
        seen = acc.count[f] > 0
        at = np.flatnonzero(seen)
        mean = (acc.sum[f][at] / acc.count[f][at]).tolist()
        out[f] = Envelope(
            field=f,
            tier=tier,
            bucket_seconds=w,
            x=[round((t0 + i * w) * 1000) for i in at.tolist()],
            mean=mean,
            low=acc.lo[f][at].tolist(),
            high=acc.hi[f][at].tolist(),
            gpus=gpus,
            worst=worst.get(f),
        )
    return out


# --- Figures ----------------------------------------------------------------------------

# (title, y axis, unit, scale, digits) of every field a panel draws.
UNITS: dict[str, tuple[str, str, str, float, int]] = {
    "utilization_gpu": ("GPU utilization", "utilization (%)", "%", 1, 0),
    "memory_used_bytes": ("GPU memory used", "memory used (GB)", "GB", charts.BYTES_PER_GB, 2),
    **charts.FIELD_UNITS,
}


def _with_gaps(env: Envelope) -> tuple[list[int | None], list[list[float | None]]]:
    """x and the three series with a None row wherever two buckets sit further apart than the tier's gap."""
    gap_ms = max(tier_reads.GAP_SECONDS[env.tier], 3 * env.bucket_seconds) * 1000
    xs: list[int | None] = []
    cols: list[list[float | None]] = [[], [], []]
    previous = None
    for i, x in enumerate(env.x):
        if previous is not None and x - previous > gap_ms:
            xs.append((x + previous) // 2)
            for col in cols:
                col.append(None)
        xs.append(x)
        for col, source in zip(cols, (env.low, env.high, env.mean), strict=True):
            col.append(source[i])
        previous = x
    return xs, cols


def envelope_figure(env: Envelope, node: int | None = None) -> Figure | None:
    """The panel of one field: the mean line inside its min-max band, the worst GPU named; None when empty."""
    if not env.has_values:
        return None
    title, y_title, unit, scale, digits = UNITS[env.field]
    xs, (low, high, mean) = _with_gaps(env)

    def scaled(values: list[float | None]) -> list[float | None]:
        return [None if v is None else round(v / scale, digits) for v in values]

    who = f"{env.gpus} GPUs" if env.gpus > 1 else "the GPU"
    value = f"%{{y:.{digits}f}} {unit}"
    traces = [
        {"type": "scatter", "mode": "lines", "name": "min", "x": xs, "y": scaled(low), "line": {"width": 0},
         "showlegend": False, "hovertemplate": f"min {value}<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "max", "y": scaled(high), "fill": "tonexty",
         "fillcolor": BAND_COLOR, "line": {"width": 0.5, "color": BAND_COLOR},
         "showlegend": False, "hovertemplate": f"max {value}<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "mean", "y": scaled(mean),
         "line": {"width": 1.5, "color": LINE_COLOR}, "hovertemplate": f"mean {value}<extra></extra>"},
    ]  # fmt: skip
    per = {"raw": "second", "minute": "minute", "hour": "hour"}[env.tier]
    bucket = f"{env.bucket_seconds:.0f} s" if env.bucket_seconds < 120 else f"{env.bucket_seconds / 60:.0f} min"
    note = f"mean of {who}, min\u2013max band · {bucket} buckets of per-{per} data · UTC"
    worst = ""
    if env.worst is not None:
        word = "lowest" if env.worst.low else "highest"
        worst_mean, others = env.worst.mean / scale, env.worst.others / scale
        worst = plotly_markup(
            "<br><span style='font-size:11px'>{word}: {name} averaged {mean} {unit}; the others {others} {unit}</span>",
            word=word, name=env.worst.name, mean=f"{worst_mean:.{digits}f}", others=f"{others:.{digits}f}", unit=unit,
        )  # fmt: skip
    heading = plotly_markup("{title} <span style='font-size:12px'>· {note}</span>", title=title, note=note)
    layout = charts.time_layout(PlotlyMarkup(heading + worst), y_title, series_count=3, height=340)
    layout["margin"] = {**layout["margin"], "t": 62 if worst else 44}
    layout["showlegend"] = False
    layout["xaxis"] = {**layout["xaxis"], "showspikes": True, "spikemode": "across", "spikesnap": "cursor",
                       "spikethickness": 1, "spikedash": "dot"}  # fmt: skip
    if env.field in charts.PERCENT_FIELDS:
        layout["yaxis"]["range"] = [0, 105]
    # The three traces share their times: sent once, in the first trace (a third of the bytes
    # of a panel); charts.js and live.js give them to the others (`shared_x`) before drawing.
    meta: dict[str, Any] = {
        "telemetry_field": env.field, "tier": env.tier, "view": "envelope", "gpus": env.gpus, "shared_x": True,
    }  # fmt: skip
    if node is not None:
        meta["node"] = node
    if env.worst is not None:
        meta["worst"] = {"name": env.worst.name, "mean": env.worst.mean, "others": env.worst.others}
    layout["meta"] = meta
    return {"data": traces, "layout": layout}
