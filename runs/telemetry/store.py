"""Storing GPU samples and MLflow metric points: batch in, bulk insert, idempotent.

The natural keys live in the database (`gpusample_natural_key`, `metricpoint_natural_key`),
so a resent row conflicts and is skipped, whichever worker writes it and however often.

GPU telemetry is kept in three tiers, shaped like Sentry's TSDB rollups:

    tier        table           kept for                            written by
    raw, hot    GpuSample       AIRBOARD_TELEMETRY_COMPACT_AFTER     store_gpu_samples
                                _MINUTES (10)
    raw, cold   GpuSampleBlock  AIRBOARD_TELEMETRY_RAW_DAYS (14)     blocks.compact_samples (from hot)
    minute      GpuMinute       AIRBOARD_TELEMETRY_MINUTE_DAYS (30)  refresh_minutes (from hot raw)
    hour        GpuHour         as long as the run                   refresh_hours (from minutes)
    envelope    RunEnvelope     as the minutes / hours it folds      the same two (envelope_store)

The raw tier's two parts are described in runs/telemetry/blocks.py: a batch that reaches into a
compacted minute reopens it first, so a minute's rollup is always rebuilt from hot rows only.

Each rollup row is recomputed from the tier below for exactly the keys a batch touched, so an
out-of-order or duplicate sample can never double-count: the rollup is a pure function of the
rows below it, and a batch costs one grouped query per tier, whatever its number of series.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Avg, Case, Count, F, FloatField, Max, Min, Q, Sum, When
from django.db.models.functions import NullIf, TruncHour, TruncMinute

from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, GpuSample, MetricPoint
from runs.telemetry import blocks, envelope_store, streaks, utilization

# Rows per INSERT statement: 1,000 x 24 columns stays under PostgreSQL's 65,535 bind
# parameters and SQLite's 32,766.
INSERT_CHUNK = 1000
# Series spans OR-ed into one rollup query: SQLite parses `a OR b OR ...` into a tree whose
# depth is capped at 1,000, so a batch touching more spans than this takes several queries.
SPANS_PER_QUERY = 200
# Columns written by the raw insert, in order; the natural key first. Columns added later go
# after `processes` (and before `source`): stored ingest batches are positional rows, and one
# recorded before a column existed is shorter, its missing tail read as NULL (runs/ingest.py).
INSERT_COLUMNS = (
    "run_id", "node_id", "gpu_index", "ts", "utilization_gpu", "utilization_memory", "memory_used_bytes",
    "memory_total_bytes", "power_watts", "power_limit_watts", "temperature_c", "sm_clock_mhz", "mem_clock_mhz",
    "sm_active", "tensor_active", "throttle_reasons", "ecc_corrected", "ecc_uncorrected", "pcie_tx_kbps",
    "pcie_rx_kbps", "processes", "nvlink_tx_kbps", "nvlink_rx_kbps", "source",
)  # fmt: skip
assert INSERT_COLUMNS == blocks.ROW_COLUMNS, "a reopened block's rows are inserted as they come"
_TS = INSERT_COLUMNS.index("ts")
# PostgreSQL: skip stored keys and hand back the keys actually inserted (exact count, rollup keys).
ON_CONFLICT_RETURNING = (
    "ON CONFLICT (run_id, node_id, gpu_index, ts) DO NOTHING RETURNING run_id, node_id, gpu_index, ts"
)
_PROCESSES = INSERT_COLUMNS.index("processes")
# PostgreSQL: the per-transaction table a batch is COPYed into before the conflict-ignoring insert.
STAGING_TABLE = "airboard_gpusample_staging"

ONE_MINUTE = timedelta(minutes=1)
SeriesKey = tuple[int, int, int]  # (run_id, node_id, gpu_index)
BucketKey = tuple[int, int, int, datetime]  # (run_id, node_id, gpu_index, minute or hour start)


@dataclass(frozen=True)
class StoreResult:
    inserted: int
    duplicates: int


def _count_where(model: type, keys: Sequence[tuple], fields: Sequence[str]) -> int:
    """How many of `keys` (tuples over `fields`) already exist; batched by the first field."""
    if not keys:
        return 0
    first = fields[0]
    wanted = set(keys)
    found = 0
    for first_value in {k[0] for k in keys}:
        candidates = [k for k in wanted if k[0] == first_value]
        ts_values = list({k[-1] for k in candidates})
        existing = model.objects.filter(**{first: first_value, f"{fields[-1]}__in": ts_values}).values_list(*fields)
        found += len(wanted.intersection(existing))
    return found


def store_gpu_samples(samples: Sequence[GpuSample]) -> StoreResult:
    """Insert GpuSample instances (unsaved); see `store_sample_rows`."""
    return store_sample_rows([[getattr(s, name) for name in INSERT_COLUMNS] for s in samples])


def store_sample_rows(rows: Sequence[Sequence[Any]]) -> StoreResult:
    """Insert sample rows (INSERT_COLUMNS order, `ts` an aware datetime), skipping stored ones,
    then refresh the rollups they touch.

    Rows rather than model instances: building 10,000 GpuSample objects cost a worker a third
    of a second per batch for nothing the insert needs.

    1. Drop in-batch repeats of a natural key (the first wins, as the database would keep it).
    2. Insert with conflict-ignore in one transaction, counting the rows the database really
       inserted: COPY + `RETURNING` on PostgreSQL (which also says which keys are new), the
       summed `changes()` of an `executemany` of `INSERT OR IGNORE` on SQLite.
    3. Recompute the minute rollups of the (series, minute) keys that gained rows, then the
       hour rollups of their hours: one grouped query per tier per batch. A batch of pure
       duplicates changes nothing and skips both.
    4. Fold the new samples into their GPUs' stall streaks (runs/telemetry/streaks.py), so no
       page reads raw samples to find a stall.
    """
    if not rows:
        return StoreResult(0, 0)
    unique: dict[BucketKey, Sequence[Any]] = {}
    for row in rows:
        unique.setdefault((row[0], row[1], row[2], row[_TS]), row)
    prepared = [_adapt(row) for row in unique.values()]
    # Minutes old enough to have been compacted (with a margin for a pass running meanwhile).
    reopen_before = blocks.compact_cutoff() + 2 * ONE_MINUTE
    late = {(r, n, g, _minute(ts)) for r, n, g, ts in unique if ts < reopen_before}
    with transaction.atomic():
        # A pass folding one of these minutes finishes first, or waits for this batch.
        blocks.minute_lock({key[3] for key in late}, shared=True)
        reopened = blocks.reopen_minutes(late) if late else []
        if reopened:
            # Back to hot rows first, so the natural key refuses a re-sent sample of the minute
            # and its rollup is rebuilt from all of its samples.
            _insert([_adapt(row) for row in reopened])
        if connection.vendor == "postgresql":
            new_keys = _insert_postgresql(prepared)
            inserted = len(new_keys)
            touched = {(r, n, g, _minute(ts)) for r, n, g, ts in new_keys}
            fresh = set(new_keys)
        else:
            inserted = _insert_sqlite(prepared)
            touched = {(r, n, g, _minute(ts)) for r, n, g, ts in unique} if inserted else set()
            # Which rows were new is not known here: a re-sent one reads as late (streaks.advance).
            fresh = set(unique)
        if touched:
            refresh_minutes(touched)
            refresh_hours({(r, n, g, _hour(m)) for r, n, g, m in touched})
            # After the minutes: their run locks order two workers writing one run (streaks.advance).
            streaks.advance([row for key, row in unique.items() if key in fresh])
    return StoreResult(inserted=inserted, duplicates=len(rows) - inserted)


def _adapt(row: Sequence[Any]) -> list[Any]:
    """One row as the raw insert's parameter list (values adapted for this backend)."""
    out = list(row)
    out[_TS] = connection.ops.adapt_datetimefield_value(out[_TS])
    if out[_PROCESSES] is not None:
        out[_PROCESSES] = GpuSample._meta.get_field("processes").get_db_prep_value(out[_PROCESSES], connection)
    return out


def _insert(rows: list[list[Any]]) -> None:
    """Insert adapted rows, skipping stored keys, on either backend."""
    if connection.vendor == "postgresql":
        _insert_postgresql(rows)
    else:
        _insert_sqlite(rows)


def _insert_postgresql(rows: list[list[Any]]) -> list[BucketKey]:
    """COPY the batch into a temporary table, then INSERT ... SELECT ... ON CONFLICT DO NOTHING.

    RETURNING hands back the natural keys actually inserted (exact count, rollup keys). COPY
    instead of a multi-row VALUES list: psycopg parses a 22,000-placeholder statement in
    Python for every chunk, which cost more than the insert itself.
    """
    table = connection.ops.quote_name(GpuSample._meta.db_table)
    columns = ", ".join(INSERT_COLUMNS)
    with connection.cursor() as cursor:
        # ON COMMIT DROP: an error rolls back past the CREATE and leaves nothing behind.
        cursor.execute(
            f"CREATE TEMPORARY TABLE {STAGING_TABLE} ON COMMIT DROP AS "  # noqa: S608
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        with cursor.cursor.copy(f"COPY {STAGING_TABLE} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        # Only our own constants and the quoted table name are formatted in.
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {STAGING_TABLE} {ON_CONFLICT_RETURNING}"  # noqa: S608
        )
        new_keys = [tuple(key) for key in cursor.fetchall()]
        # Inside an outer transaction (two batches in one), ON COMMIT has not come yet: drop it now.
        cursor.execute(f"DROP TABLE {STAGING_TABLE}")
        return new_keys


def _insert_sqlite(rows: list[list[Any]]) -> int:
    """`executemany` of INSERT OR IGNORE; sqlite3 sums each statement's changes into rowcount."""
    table = connection.ops.quote_name(GpuSample._meta.db_table)
    placeholders = ", ".join(["%s"] * len(INSERT_COLUMNS))
    # Only our own constants and the quoted table name are formatted in; values are bound.
    sql = f"INSERT OR IGNORE INTO {table} ({', '.join(INSERT_COLUMNS)}) VALUES ({placeholders})"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
        return max(cursor.rowcount, 0)


def store_metric_points(points: Sequence[MetricPoint]) -> StoreResult:
    """Insert MLflow metric points, skipping ones already stored."""
    if not points:
        return StoreResult(0, 0)
    fields = ("run_id", "key", "step", "ts")
    keys = list({(p.run_id, p.key, p.step, p.ts) for p in points})
    in_batch_repeats = len(points) - len(keys)
    with transaction.atomic():
        existing = _count_where(MetricPoint, keys, fields)
        for start in range(0, len(points), INSERT_CHUNK):
            MetricPoint.objects.bulk_create(points[start : start + INSERT_CHUNK], ignore_conflicts=True)
    return StoreResult(inserted=len(keys) - existing, duplicates=existing + in_batch_repeats)


def _minute(ts: datetime) -> datetime:
    return ts.replace(second=0, microsecond=0)


def _hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def _spans(keys: Iterable[BucketKey], step: timedelta) -> list[tuple[SeriesKey, datetime, datetime]]:
    """Merge each series' bucket starts into contiguous [first, end) spans, so one OR term covers a run of buckets."""
    by_series: dict[SeriesKey, list[datetime]] = {}
    for run_id, node_id, gpu, bucket in keys:
        by_series.setdefault((run_id, node_id, gpu), []).append(bucket)
    spans = []
    for series, buckets in by_series.items():
        buckets.sort()
        first = last = buckets[0]
        for bucket in buckets[1:]:
            if bucket - last > step:
                spans.append((series, first, last + step))
                first = bucket
            last = bucket
        spans.append((series, first, last + step))
    return spans


def _span_filters(keys: Iterable[BucketKey], step: timedelta, time_field: str) -> list[Q]:
    """OR-ed filters over the rows below the buckets in `keys`, at most SPANS_PER_QUERY terms each."""
    filters: list[Q] = []
    spans = _spans(keys, step)
    for start in range(0, len(spans), SPANS_PER_QUERY):
        q = Q()
        for (run_id, node_id, gpu), first, end in spans[start : start + SPANS_PER_QUERY]:
            q |= Q(run_id=run_id, node_id=node_id, gpu_index=gpu, **{f"{time_field}__gte": first}) & Q(
                **{f"{time_field}__lt": end}
            )
        filters.append(q)
    return filters


def minute_aggregates() -> dict[str, Any]:
    """Aggregates of GpuSample rows that make one GpuMinute row."""
    aggregates: dict[str, Any] = {
        "samples": Count("id"),
        "memory_total_bytes": Max("memory_total_bytes"),
        "power_limit_watts": Max("power_limit_watts"),
    }
    for field in ROLLUP_FIELDS:
        aggregates[f"{field}_min"] = Min(field)
        aggregates[f"{field}_avg"] = Avg(field)
        aggregates[f"{field}_max"] = Max(field)
    return aggregates


def hour_aggregates() -> dict[str, Any]:
    """Aggregates of GpuMinute rows that make one GpuHour row.

    The hour's average weights each minute's average by its sample count, so an hour with a
    half-reported minute is not skewed by it as a plain mean of minute averages would be
    (exact when the field was reported in every sample, as NVML does for a present field).
    """
    aggregates: dict[str, Any] = {
        "samples": Sum("samples"),
        "memory_total_bytes": Max("memory_total_bytes"),
        "power_limit_watts": Max("power_limit_watts"),
    }
    for field in ROLLUP_FIELDS:
        avg = f"{field}_avg"
        weight = Sum(Case(When(**{f"{avg}__isnull": False}, then=F("samples")), default=0))
        aggregates[f"{field}_min"] = Min(f"{field}_min")
        aggregates[avg] = Sum(F(avg) * F("samples"), output_field=FloatField()) / NullIf(
            weight, 0, output_field=FloatField()
        )
        aggregates[f"{field}_max"] = Max(f"{field}_max")
    return aggregates


def _rebuild(
    source: type, target: type, keys: Iterable[BucketKey], step: timedelta, time_field: str, bucket_field: str
) -> list[Any]:
    """Recompute `target` rows at `keys` from `source` rows, one grouped query per span group, and upsert them.

    1. Turn the keys into contiguous spans per series and OR them into one filter.
    2. GROUP BY (run, node, gpu, truncated time) with the tier's aggregates.
    3. Upsert the results on the target's natural key; keys whose source rows are gone (all
       pruned) are left as they are: a rollup outlives the tier below it. Returns the rows written.
    """
    keys = set(keys)
    if not keys:
        return []
    trunc = TruncMinute if step == timedelta(minutes=1) else TruncHour
    aggregates = minute_aggregates() if source is GpuSample else hour_aggregates()
    rows = []
    for q in _span_filters(keys, step, time_field):
        grouped = (
            source.objects.filter(q)
            .annotate(bucket=trunc(time_field, tzinfo=UTC))
            .values("run_id", "node_id", "gpu_index", "bucket")
            # Prefixed names: an annotation named like a column would shadow it in F().
            .annotate(**{f"agg_{name}": expression for name, expression in aggregates.items()})
            .order_by()
        )
        for agg in grouped:
            values = {name: agg[f"agg_{name}"] for name in aggregates}
            rows.append(
                target(
                    run_id=agg["run_id"],
                    node_id=agg["node_id"],
                    gpu_index=agg["gpu_index"],
                    **{bucket_field: agg["bucket"]},
                    **values,
                )
            )
    if target is GpuHour and rows:
        # An hour never loses samples: ingest only adds them, so a rebuild that finds fewer
        # than the stored row holds is one whose minutes were pruned
        # (AIRBOARD_TELEMETRY_MINUTE_DAYS), and the stored hour is the better record.
        stored = _stored_samples(rows)
        rows = [r for r in rows if r.samples >= stored.get((r.run_id, r.node_id, r.gpu_index, r.hour), 0)]
    target.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "node", "gpu_index", bucket_field],
        update_fields=list(aggregates),
        batch_size=500,
    )
    return rows


def refresh_minutes(keys: Iterable[BucketKey]) -> int:
    """Rebuild the GpuMinute rows for (run_id, node_id, gpu_index, minute) keys from raw samples,
    and keep their runs' utilization summaries (`RunUtilization`) equal to them.

    1. Lock the runs' summary rows (runs.telemetry.utilization.lock), before the raw samples
       are read: a worker writing minutes of the same run waits, then reads what the other
       committed.
    2. Read the stored utilization of the minutes about to be rewritten (one query per span
       group), rebuild and upsert them (`_rebuild`).
    3. Add each run's difference, new minus stored, to its summary.
    4. Refold the run envelope of those minutes across the run's GPUs (envelope_store.refresh).
    """
    keys = set(keys)
    if not keys:
        return 0
    with transaction.atomic():
        utilization.lock({key[0] for key in keys})
        stored = {
            (run_id, node_id, gpu, minute): value
            for q in _span_filters(keys, ONE_MINUTE, "minute")
            for run_id, node_id, gpu, minute, value in GpuMinute.objects.filter(q).values_list(
                "run_id", "node_id", "gpu_index", "minute", "utilization_gpu_avg"
            )
        }
        rows = _rebuild(GpuSample, GpuMinute, keys, ONE_MINUTE, "ts", "minute")
        # Keys whose samples are gone keep their stored minute (see `_rebuild`): only rewritten ones change.
        old = [(r.run_id, stored[key]) for r in rows if (key := (r.run_id, r.node_id, r.gpu_index, r.minute)) in stored]
        utilization.add(utilization.difference(old, [(r.run_id, r.utilization_gpu_avg) for r in rows]))
        # Under the same run locks: a worker writing other GPUs of the run's minute folds after this one.
        envelope_store.refresh({(key[0], key[3]) for key in keys}, envelope_store.MINUTE)
    return len(rows)


def refresh_hours(keys: Iterable[BucketKey]) -> int:
    """Rebuild the GpuHour rows for (run_id, node_id, gpu_index, hour) keys from the minute rollups.

    An hour whose minutes were (partly) pruned keeps its stored row (see `_rebuild`). Then the
    run envelope of those hours is refolded from them (runs/telemetry/envelope_store.py).
    """
    keys = set(keys)
    written = len(_rebuild(GpuMinute, GpuHour, keys, timedelta(hours=1), "minute", "hour"))
    envelope_store.refresh({(key[0], key[3]) for key in keys}, envelope_store.HOUR)
    return written


def _stored_samples(rows: Sequence[GpuHour]) -> dict[BucketKey, int]:
    """The `samples` of the stored GpuHour rows at the keys of `rows`, one query per span group."""
    keys = {(r.run_id, r.node_id, r.gpu_index, r.hour) for r in rows}
    stored: dict[BucketKey, int] = {}
    for q in _span_filters(keys, timedelta(hours=1), "hour"):
        for run_id, node_id, gpu, hour, samples in GpuHour.objects.filter(q).values_list(
            "run_id", "node_id", "gpu_index", "hour", "samples"
        ):
            stored[(run_id, node_id, gpu, hour)] = samples
    return stored
