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

from django.db import connection, transaction
from django.db.models import Count, Max, Min, Model, Sum

from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, RunEnvelope
from runs.telemetry.upsert_sql import keys_cte, rows_written

MINUTE = 60
HOUR = 3600
# (run, bucket) keys one fold query joins (three bound values each): under SQLite's 32,766 variables.
KEYS_PER_QUERY = 1000
# Folded rows deleted per transaction by `prune_minutes`.
DELETE_BATCH = 10_000


# The fold, defined once: per field, the RunEnvelope column's suffix -> (aggregate, column of the
# rows folded). `gpu_fold` folds GPU rollup rows (GpuMinute, GpuHour), `bucket_fold` folded rows
# into a wider bucket. The ORM aggregates (the reader) and the write path's SQL are both made from it.
GPU_FOLD = {"min": ("MIN", "{f}_min"), "max": ("MAX", "{f}_max"), "sum": ("SUM", "{f}_avg"), "n": ("COUNT", "{f}_avg")}
BUCKET_FOLD = {"min": ("MIN", "{f}_min"), "max": ("MAX", "{f}_max"), "sum": ("SUM", "{f}_sum"), "n": ("SUM", "{f}_n")}
# The aggregate names as the reader's keys: `lo_`, `hi_`, `sum_`, `n_` per field.
ALIASES = {"min": "lo", "max": "hi", "sum": "sum", "n": "n"}
_ORM = {"MIN": Min, "MAX": Max, "SUM": Sum, "COUNT": Count}
PARTS = tuple(GPU_FOLD)


def _aggregates(fold: dict[str, tuple[str, str]], fields: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        for part, (func, column) in fold.items():
            out[f"{ALIASES[part]}_{f}"] = _ORM[func](column.format(f=f))
    return out


def gpu_fold(fields: Sequence[str]) -> dict[str, Any]:
    """Aggregates that fold per-GPU rollup rows (GpuMinute, GpuHour): `lo_`, `hi_`, `sum_`, `n_` per field."""
    return _aggregates(GPU_FOLD, fields)


def bucket_fold(fields: Sequence[str]) -> dict[str, Any]:
    """Aggregates that fold RunEnvelope rows into a wider bucket, named as `gpu_fold`'s."""
    return _aggregates(BUCKET_FOLD, fields)


def gpu_fold_sql(fields: Sequence[str], alias: str = "s") -> dict[str, str]:
    """`gpu_fold` as SQL over GPU rollup rows (aliased `alias`), by RunEnvelope column."""
    quote = connection.ops.quote_name
    return {
        f"{f}_{part}": f"{func}({alias}.{quote(column.format(f=f))})"
        for f in fields
        for part, (func, column) in GPU_FOLD.items()
    }


def _source(seconds: int) -> tuple[type[Model], str]:
    if seconds == MINUTE:
        return GpuMinute, "minute"
    if seconds == HOUR:
        return GpuHour, "hour"
    raise ValueError(f"a run envelope is kept per {MINUTE} or {HOUR} seconds, not {seconds}")


# The envelope's keys: (run_id, bucket start).
KEY_COLUMNS = (("run_id", "bigint"), ("bucket", "timestamptz"))


def _fold(seconds: int, keys: Sequence[tuple[int, datetime]] = (), run_ids: Sequence[int] = ()) -> int:
    """Fold the GPU rollup rows of the (run, bucket) `keys`, or of every bucket of `run_ids`, per
    (run, bucket) with `gpu_fold` and upsert them, in the database; returns the rows written.

    One INSERT ... SELECT ... GROUP BY ... ON CONFLICT DO UPDATE, as the rollups below it are
    rebuilt (runs/telemetry/store.py): nothing travels to Python and back.
    """
    source, time_field = _source(seconds)
    quote = connection.ops.quote_name
    target, rollups, at = quote(RunEnvelope._meta.db_table), quote(source._meta.db_table), f"s.{quote(time_field)}"
    folded = {"gpus": "COUNT(*)", **gpu_fold_sql(ROLLUP_FIELDS)}
    columns = ", ".join(quote(name) for name in folded)
    updates = ", ".join(f"{quote(name)} = EXCLUDED.{quote(name)}" for name in folded)
    if keys:
        cte, params = keys_cte(KEY_COLUMNS, keys, timedelta(seconds=seconds))
        run, bucket = "k.run_id", "k.bucket"
        rows = f"k JOIN {rollups} s ON s.run_id = k.run_id AND {at} >= k.bucket AND {at} < k.bucket_end WHERE 1 = 1"
        where: list[Any] = []
    else:
        cte, params = "", []
        run, bucket = "s.run_id", at
        rows = f"{rollups} s WHERE s.run_id IN ({', '.join(['%s'] * len(run_ids))})"
        where = list(run_ids)
    # Only our own constants and quoted names are formatted in; every value is bound. `WHERE`
    # before GROUP BY: SQLite would otherwise read the upsert's ON as the join's.
    sql = (
        f"{cte} INSERT INTO {target} (run_id, seconds, {quote('start')}, {columns}) "  # noqa: S608
        f"SELECT {run}, %s, {bucket}, {', '.join(folded.values())} FROM {rows} GROUP BY {run}, {bucket} "
        f"ON CONFLICT (run_id, seconds, {quote('start')}) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, seconds, *where])
        return rows_written(cursor)


def refresh(keys: Iterable[tuple[int, datetime]], seconds: int) -> int:
    """Refold the (run_id, minute or hour start) keys from every GPU's rollup of that bucket.

    GROUP BY (run, bucket) with `gpu_fold` in one INSERT ... SELECT per KEYS_PER_QUERY keys,
    upserted on the natural key. A bucket whose GPU rows are all gone (pruned) finds no group
    and keeps its folded row, as a rollup outlives the tier below it.
    """
    _source(seconds)
    ordered = sorted(set(keys))
    written = 0
    for at in range(0, len(ordered), KEYS_PER_QUERY):
        written += _fold(seconds, keys=ordered[at : at + KEYS_PER_QUERY])
    return written


def rebuild(run_ids: Iterable[int]) -> int:
    """Refold every minute and hour of `run_ids` (rollups written outside the ingest path); returns the rows."""
    ids = sorted(set(run_ids))
    written = 0
    with transaction.atomic():
        for at in range(0, len(ids), 50):
            chunk = ids[at : at + 50]
            RunEnvelope.objects.filter(run_id__in=chunk).delete()
            written += _fold(MINUTE, run_ids=chunk) + _fold(HOUR, run_ids=chunk)
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
