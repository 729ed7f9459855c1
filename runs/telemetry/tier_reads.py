"""GPU series as the charts read them: one field of a run, from the tier a range calls for
(raw samples, minute or hour rollups), as epoch-second columns with the data's gaps broken.

`runs.telemetry.charts.gpu_series` chooses the tier and calls these; the telemetry API and the
envelope read the same rows. Times go to Plotly as naive UTC strings (`plotly_time`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import groupby, pairwise
from typing import Any

from django.db.models import FloatField, Func

from runs.models import GpuHour, GpuMinute, Run
from runs.telemetry import blocks
from runs.telemetry.downsample import MAX_POINTS, Tier, minmax_buckets, tier_step
from runs.telemetry.labels import gpu_label


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's values over time: raw samples, or per-minute max with the minute's average."""

    name: str
    x: list[str]
    y: list[float | None]
    tier: Tier
    avg: list[float | None] | None = None

    @property
    def has_values(self) -> bool:
        return any(v is not None for v in self.y)


def plotly_time(ts: datetime) -> str:
    """A datetime as the naive UTC string plotly.js reads without guessing a zone."""
    if ts.tzinfo is not None:
        if ts.utcoffset():  # the database hands back UTC already; convert only what is not
            ts = ts.astimezone(UTC)
        ts = ts.replace(tzinfo=None)
    return ts.isoformat(sep=" ")


class EpochSeconds(Func):
    """A datetime column as seconds since 1970 (a float), computed by the database.

    The chart only needs numbers to bucket: building ~33,000 aware datetimes in the driver
    just to call `.timestamp()` on them was most of a long run's chart time.
    """

    output_field = FloatField()
    arity = 1
    # date_part, not EXTRACT: EXTRACT(EPOCH ...) is numeric on PostgreSQL 14+, which the
    # driver loads as Decimal (slower again); date_part stays double precision.
    template = "date_part('epoch', %(expressions)s)"

    @property
    def convert_value(self) -> Callable[..., Any]:
        # Both databases hand back a float already: no per-row float() converter.
        return self._convert_value_noop  # type: ignore[attr-defined]  # Django's own (BaseExpression)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # as_sql's (sql, params)
        # Django stores "YYYY-MM-DD HH:MM:SS[.ffffff]" in UTC. strftime('%s') is exact whole
        # seconds; julianday arithmetic would turn 09:00:00 into 08:59:59.99998. '%f' - '%S'
        # adds the milliseconds back. (%%%% here becomes %% in SQL, which Django makes %.)
        template = (
            "(CAST(strftime('%%%%s', %(expressions)s) AS REAL)"
            " + (strftime('%%%%f', %(expressions)s) - strftime('%%%%S', %(expressions)s)))"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


def extent(run: Run) -> tuple[datetime, datetime] | None:
    """First and last instant of a run's GPU telemetry: from the minute rollups, else the hours
    (minutes past AIRBOARD_TELEMETRY_MINUTE_DAYS are pruned), else raw samples."""
    minutes = _first_last(GpuMinute.objects.filter(run=run), "minute")
    if minutes is not None:
        return minutes[0], minutes[1] + timedelta(seconds=59)
    hours = _first_last(GpuHour.objects.filter(run=run), "hour")
    if hours is not None:
        return hours[0], hours[1] + timedelta(minutes=59, seconds=59)
    return blocks.raw_extent(run.pk)


def _first_last(rows: Any, field: str) -> tuple[datetime, datetime] | None:
    """First and last `field` of one run's rollup rows: two one-row reads in the natural key's order.

    The rollup keys lead with (run, time), so each is a single index probe; the grouped MIN/MAX of
    `blocks.time_span` read every row of the run (1.2 million minutes for a 13-day 64-GPU run).
    """
    first = rows.order_by("run_id", field).values_list(field, flat=True).first()
    if first is None:
        return None
    return first, rows.order_by("-run_id", f"-{field}").values_list(field, flat=True).first()


def tier_rows(
    run: Run, field: str, tier: Tier, start: datetime, end: datetime, node_ids: Collection[int] | None = None
) -> Iterable[tuple]:
    """(node_id, gpu, epoch seconds, value, low, avg) rows of one tier in [start, end], in series and time order."""
    if tier == "raw":
        # Both parts of the raw tier: hot rows and compacted minutes (runs/telemetry/blocks.py).
        raw = blocks.raw_rows(run.pk, start, end, [field], node_ids=node_ids)
        return [(node, gpu, ts.timestamp(), value) for node, gpu, ts, value in raw]
    model, time_field = (GpuMinute, "minute") if tier == "minute" else (GpuHour, "hour")
    # A bucket that starts before `start` still overlaps it: widen the lower bound by one row.
    lower = start - tier_step(tier)
    rows = model.objects.filter(run=run, **{f"{time_field}__gt": lower, f"{time_field}__lte": end})
    if node_ids is not None:
        rows = rows.filter(node_id__in=node_ids)
    return rows.order_by("node_id", "gpu_index", time_field).values_list(
        "node_id", "gpu_index", EpochSeconds(time_field), f"{field}_max", f"{field}_min", f"{field}_avg"
    )


def collect_series(
    rows: Iterable[tuple], names: dict[int, tuple[int, int, str]], tier: Tier, max_points: int = MAX_POINTS
) -> list[GpuSeries]:
    """Group (node_id, gpu, epoch, value[, low, avg]) rows into downsampled series, in attempt, node, GPU order."""
    keyed: list[tuple[tuple[int, int, int], GpuSeries]] = []
    # The GPUs of a node share their timestamps: format each instant once for all of them.
    labels: dict[float, str] = {}
    # One fetch, not a server-side cursor: the tier is chosen so that a range has at most a few
    # tens of thousands of rows, and fetchmany round trips cost more than holding them.
    for (node_id, gpu), group in groupby(list(rows), key=lambda r: (r[0], r[1])):
        points = list(group)
        attempt, index, prefix = names.get(node_id, (0, node_id, f"node #{node_id}"))
        x: list[float] = [p[2] for p in points]
        y: list[float | None] = [p[3] for p in points]
        avg = [p[5] for p in points] if tier != "raw" else None
        lows = [p[4] for p in points] if tier != "raw" else None
        # Gaps before any reduction: a bucket of the reduced series keeps its None (downsample).
        if avg is None or lows is None:
            x, (y,) = with_gaps(x, [y], GAP_SECONDS[tier])
        else:
            x, (y, avg, lows) = with_gaps(x, [y, avg, lows], GAP_SECONDS[tier])
        if len(x) > max_points:
            reduced = minmax_buckets(x, y, max_points, lows=lows)
            x = [t for t, _ in reduced]
            y = [v for _, v in reduced]
            avg = None  # a bucket's min and max points are not any one row's average
        keyed.append(
            (
                (attempt, index, gpu),
                GpuSeries(name=f"{prefix} · {gpu_label(gpu)}", x=_epoch_labels(x, labels), y=y, avg=avg, tier=tier),
            )
        )
    # Node ids need not follow node indexes (a retry's nodes are inserted later), so sort here.
    keyed.sort(key=lambda pair: pair[0])
    return [s for _, s in keyed]


# A silence longer than this between two points of a tier is a gap in the data: the chart
# breaks the line there (a None point) instead of drawing a straight line across it. The agent
# ships at least once a minute, so raw samples a minute apart are a lost batch or a stopped
# agent (a shorter hole may still be in flight: the live page appends after its last point);
# rollups come every minute or hour.
GAP_SECONDS: dict[str, float] = {"raw": 60.0, "minute": 150.0, "hour": 2 * 3600.0 + 60}


def with_gaps(x: list[float], columns: list[list[Any]], gap: float) -> tuple[list[float], list[list[Any]]]:
    """x and its parallel `columns` with a None row (at the midpoint) wherever two neighbours are more than
    `gap` s (and three median steps) apart; unchanged when there is no such silence."""
    if len(x) < 2:
        return x, columns
    # A series sampled every 15 s (nvidia-smi -l 15, a slower agent) is not a row of gaps: a gap
    # is also more than three of the series' own usual steps.
    steps = sorted(b - a for a, b in pairwise(x))
    gap = max(gap, 3 * steps[len(steps) // 2])
    if steps[-1] <= gap:
        return x, columns
    out_x: list[float] = [x[0]]
    out = [[column[0]] for column in columns]
    for i in range(1, len(x)):
        if x[i] - x[i - 1] > gap:
            out_x.append((x[i] + x[i - 1]) / 2)
            for column in out:
                column.append(None)
        out_x.append(x[i])
        for column, source in zip(out, columns, strict=True):
            column.append(source[i])
    return out_x, out


def _epoch_labels(epochs: Iterable[float], cache: dict[float, str]) -> list[str]:
    """Epoch seconds as plotly_time strings, memoized in `cache` across the series of one chart."""
    out = []
    for t in epochs:
        label = cache.get(t)
        if label is None:
            label = cache[t] = plotly_time(datetime.fromtimestamp(t, UTC))
        out.append(label)
    return out
