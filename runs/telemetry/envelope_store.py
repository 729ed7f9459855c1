"""The run envelope kept on the write path: every GPU of a run folded into one row per minute and per hour.

The run page's panels draw, per time bucket, the lowest and highest value of any GPU and the
mean across GPUs (runs/telemetry/envelope.py). Folding a 64-GPU run's minute rollups into
that on every view read 64 rows per minute: 92,160 rows for 24 hours, 3.9x the 1-GPU run's
time at 6 hours. Here the fold across GPUs is done once, when the rollups are written:

    RunEnvelope seconds   folded from   written by
    60                    GpuMinute     store.refresh_minutes, for the minutes a batch touched
    3600                  GpuHour       store.refresh_hours, for the hours a batch touched

so a run-wide panel reads one row per minute (hour) whatever the number of GPUs.

The fold is defined once, `gpu_fold` (across GPU rollup rows) and `bucket_fold` (across
folded rows): the lowest minimum, the highest maximum, the sum of the GPUs' averages and how
many there were. Sums and counts add up across buckets, so a wider bucket's mean is exact:
the mean of every GPU-minute average in it, what reading GpuMinute directly gives.

Like the rollups, a folded row is a pure function of the rows below it: recomputed from all of
the minute's (hour's) GPU rows each time, never incremented, so a resent or late sample cannot
count twice. Rows written outside the ingest path (bench COPY, the demo seed) are folded by
`rebuild`; the reader falls back to folding GpuMinute itself where a window has no folded row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Min, Q, Sum

from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, RunEnvelope

MINUTE = 60
HOUR = 3600
# (run, span) terms OR-ed into one fold query (SQLite caps the depth of an OR tree at 1,000).
SPANS_PER_QUERY = 200
# Folded rows deleted per transaction by `prune_minutes`.
DELETE_BATCH = 10_000


def gpu_fold(fields: Sequence[str]) -> dict[str, Any]:
    """Aggregates that fold per-GPU rollup rows (GpuMinute, GpuHour): `lo_`, `hi_`, `sum_`, `n_` per field."""
    out: dict[str, Any] = {}
    for f in fields:
        out |= {f"lo_{f}": Min(f"{f}_min"), f"hi_{f}": Max(f"{f}_max"), f"sum_{f}": Sum(f"{f}_avg"),
                f"n_{f}": Count(f"{f}_avg")}  # fmt: skip
    return out


def bucket_fold(fields: Sequence[str]) -> dict[str, Any]:
    """Aggregates that fold RunEnvelope rows into a wider bucket, named as `gpu_fold`'s."""
    out: dict[str, Any] = {}
    for f in fields:
        out |= {f"lo_{f}": Min(f"{f}_min"), f"hi_{f}": Max(f"{f}_max"), f"sum_{f}": Sum(f"{f}_sum"),
                f"n_{f}": Sum(f"{f}_n")}  # fmt: skip
    return out


def _source(seconds: int) -> tuple[type, str]:
    if seconds == MINUTE:
        return GpuMinute, "minute"
    if seconds == HOUR:
        return GpuHour, "hour"
    raise ValueError(f"a run envelope is kept per {MINUTE} or {HOUR} seconds, not {seconds}")


def _spans(keys: Iterable[tuple[int, datetime]], step: timedelta) -> list[tuple[int, datetime, datetime]]:
    """Each run's bucket starts merged into contiguous [first, end) spans."""
    by_run: dict[int, list[datetime]] = {}
    for run_id, start in keys:
        by_run.setdefault(run_id, []).append(start)
    spans = []
    for run_id, starts in by_run.items():
        starts.sort()
        first = last = starts[0]
        for start in starts[1:]:
            if start - last > step:
                spans.append((run_id, first, last + step))
                first = start
            last = start
        spans.append((run_id, first, last + step))
    return spans


def _fold(where: Q, seconds: int) -> int:
    """Fold the GPU rollup rows matching `where` per (run, bucket) and upsert them; returns the rows written."""
    source, time_field = _source(seconds)
    grouped = (
        source.objects.filter(where)
        .values("run_id", time_field)
        .annotate(gpus_folded=Count("id"), **gpu_fold(ROLLUP_FIELDS))
        .order_by()
    )
    rows = []
    for agg in grouped:
        values: dict[str, Any] = {}
        for f in ROLLUP_FIELDS:
            values |= {f"{f}_min": agg[f"lo_{f}"], f"{f}_max": agg[f"hi_{f}"], f"{f}_sum": agg[f"sum_{f}"],
                       f"{f}_n": agg[f"n_{f}"]}  # fmt: skip
        rows.append(RunEnvelope(run_id=agg["run_id"], seconds=seconds, start=agg[time_field],
                                gpus=agg["gpus_folded"], **values))  # fmt: skip
    if rows:
        RunEnvelope.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "seconds", "start"],
            update_fields=["gpus", *(f"{f}_{part}" for f in ROLLUP_FIELDS for part in ("min", "max", "sum", "n"))],
            batch_size=500,
        )
    return len(rows)


def refresh(keys: Iterable[tuple[int, datetime]], seconds: int) -> int:
    """Refold the (run_id, minute or hour start) keys from every GPU's rollup of that bucket.

    1. Merge each run's buckets into contiguous spans, SPANS_PER_QUERY OR-ed per query.
    2. GROUP BY (run, bucket) with `gpu_fold`; upsert on the natural key. A bucket whose GPU
       rows are all gone (pruned) keeps its folded row, as a rollup outlives the tier below it.
    """
    _, time_field = _source(seconds)
    spans = _spans(set(keys), timedelta(seconds=seconds))
    written = 0
    for at in range(0, len(spans), SPANS_PER_QUERY):
        q = Q()
        for run_id, first, end in spans[at : at + SPANS_PER_QUERY]:
            q |= Q(run_id=run_id, **{f"{time_field}__gte": first, f"{time_field}__lt": end})
        written += _fold(q, seconds)
    return written


def rebuild(run_ids: Iterable[int]) -> int:
    """Refold every minute and hour of `run_ids` (rollups written outside the ingest path); returns the rows."""
    ids = sorted(set(run_ids))
    written = 0
    with transaction.atomic():
        for at in range(0, len(ids), 50):
            chunk = ids[at : at + 50]
            RunEnvelope.objects.filter(run_id__in=chunk).delete()
            written += _fold(Q(run_id__in=chunk), MINUTE) + _fold(Q(run_id__in=chunk), HOUR)
    return written


def prune_minutes(cutoff: datetime, batch_size: int = DELETE_BATCH, max_batches: int | None = None) -> int:
    """Delete the folded minutes before `cutoff` (retention's minute cutoff), oldest first; hours stay."""
    deleted = batches = 0
    while max_batches is None or batches < max_batches:
        doomed = RunEnvelope.objects.filter(seconds=MINUTE, start__lt=cutoff)
        ids = list(doomed.order_by("start").values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        count, _ = RunEnvelope.objects.filter(id__in=ids).delete()
        deleted += count
        batches += 1
        if len(ids) < batch_size:
            break
    return deleted
