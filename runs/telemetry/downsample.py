"""Server-side downsampling of telemetry series, and the choice of tier for a time range.

A chart never needs more points than it has pixels: at most MAX_POINTS per series go to the
browser. Plain decimation (every n-th point) or averaging would hide a one-second spike on a
30-hour run, which is exactly what an engineer looks for, so each time bucket keeps both its
minimum and its maximum (the "min/max" or M4-lite reduction).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal

Tier = Literal["raw", "minute", "hour"]

# Points per series sent to the browser: about what an SVG line chart of 8 GPUs draws smoothly.
MAX_POINTS = 2_000
# The nominal sampling interval of the node agent (NVML at 1 Hz): estimates raw points per range.
NOMINAL_SAMPLE_SECONDS = 1.0
# Above this many rollup rows per series a range reads the next coarser tier: 4 x MAX_POINTS
# minutes is about 5.5 days; beyond that, hours (two weeks = 336 rows).
ROLLUP_ROWS_PER_SERIES = 4 * MAX_POINTS
# Buckets holding more points than this find their extremes with min()/max() over a slice (C
# loops: 3x faster on a 125,000-point series); smaller ones, as on a 2,083-minute run, scan in
# Python, where two slices and an index() per bucket cost more than the scan.
SLICE_SCAN_MIN = 16


def choose_tier(start: datetime, end: datetime, raw_points: int = MAX_POINTS, rollup_rows: int | None = None) -> Tier:
    """The coarsest-needed tier for [start, end]: raw if it holds at most `raw_points` samples
    per series at the nominal rate, minutes while they stay under `rollup_rows` (default
    ROLLUP_ROWS_PER_SERIES), else hours."""
    span = max((end - start).total_seconds(), 0.0)
    if span / NOMINAL_SAMPLE_SECONDS + 1 <= raw_points:
        return "raw"
    if span / 60 + 1 <= (ROLLUP_ROWS_PER_SERIES if rollup_rows is None else rollup_rows):
        return "minute"
    return "hour"


def tier_step(tier: Tier) -> timedelta:
    """The width of one row of a tier (raw: the nominal sampling interval)."""
    return {"raw": timedelta(seconds=NOMINAL_SAMPLE_SECONDS), "minute": timedelta(minutes=1)}.get(
        tier, timedelta(hours=1)
    )


def minmax_buckets(
    ts: Sequence[float],
    values: Sequence[float | None],
    max_points: int = MAX_POINTS,
    lows: Sequence[float | None] | None = None,
) -> list[tuple[float, float | None]]:
    """Reduce one series to at most `max_points` (time, value) points, keeping every extreme.

    `ts` are numbers in ascending order (epoch seconds); `values` the series. `lows`, when
    given, are each point's own minimum (a rollup row's `_min` beside its `_max` in `values`).

    1. Up to `max_points` points: returned as they are (None values kept: they are gaps).
    2. Otherwise split [ts[0], ts[-1]] into max_points // 2 equal time buckets.
    3. Per bucket, keep the point holding the smallest value (of `lows`, else `values`) and
       the one holding the largest value of `values`, in time order; one point when they
       coincide (two at one time when a rollup row holds both). A bucket with samples but no
       values keeps one None (the gap stays a gap).
    4. The result is in time order and never longer than `max_points`.
    """
    n = len(ts)
    if n != len(values) or (lows is not None and len(lows) != n):
        raise ValueError("ts, values (and lows) must have the same length")
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    if n <= max_points:
        return list(zip(ts, values, strict=True))
    buckets = max_points // 2
    first, last = ts[0], ts[-1]
    width = (last - first) / buckets or 1.0
    low_values = values if lows is None else lows
    out: list[tuple[float, float | None]] = []
    i, bucket = 0, -1
    while i < n:
        # Never the same bucket twice, whatever float rounding says: that keeps the bound.
        bucket = max(min(int((ts[i] - first) / width), buckets - 1), bucket + 1)
        # `ts` is sorted: the bucket ends where bisect says, not after a division per point.
        end = n if bucket == buckets - 1 else max(bisect_left(ts, first + (bucket + 1) * width, i), i + 1)
        if end - i > SLICE_SCAN_MIN:
            lo_i, lo = _extreme(low_values, i, end, min)
            hi_i, hi = _extreme(values, i, end, max)
        else:
            lo_i = hi_i = -1
            lo = hi = 0.0
            for k in range(i, end):
                v, low = values[k], low_values[k]
                if low is not None and (lo_i < 0 or low < lo):
                    lo_i, lo = k, low
                if v is not None and (hi_i < 0 or v > hi):
                    hi_i, hi = k, v
        if lo_i < 0 and hi_i < 0:
            out.append((ts[i], None))
        elif lo_i == hi_i and lows is not None and lo != hi:
            # One rollup row holds both extremes: draw its range as a vertical stroke.
            out += [(ts[lo_i], lo), (ts[hi_i], hi)]
        elif lo_i < 0 or hi_i < 0 or lo_i == hi_i:
            j = hi_i if hi_i >= 0 else lo_i
            out.append((ts[j], hi if hi_i >= 0 else lo))
        elif lo_i < hi_i:
            out += [(ts[lo_i], lo), (ts[hi_i], hi)]
        else:
            out += [(ts[hi_i], hi), (ts[lo_i], lo)]
        i = end
    return out


def _extreme(values: Sequence[float | None], start: int, end: int, pick: Callable[..., float]) -> tuple[int, float]:
    """(index, value) of the first min or max (`pick`) non-None value in values[start:end]; (-1, 0.0) if none."""
    part = values[start:end]
    if None in part:
        present = [v for v in part if v is not None]
        if not present:
            return -1, 0.0
        best = pick(present)
    else:
        best = pick(part)
    return start + part.index(best), best
