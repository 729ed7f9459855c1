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

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from psycopg import errors as psycopg_errors

from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, GpuSample, MetricPoint
from runs.telemetry import blocks, envelope_store, gpu_life, streaks, utilization
from runs.telemetry.upsert_sql import keys_cte, rows_written

# Rows per INSERT statement: 1,000 x 24 columns stays under PostgreSQL's 65,535 bind
# parameters and SQLite's 32,766.
INSERT_CHUNK = 1000
# Rollup keys a query joins (five bound values each): under SQLite's 32,766 variables.
KEYS_PER_QUERY = 1000
# Columns written by the raw insert, in order; the natural key first. Columns added later go
# after `processes` (and before `source`): stored ingest batches are positional rows, and one
# recorded before a column existed is shorter, its missing tail read as NULL (runs/ingest_process.py).
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


def _count_where(model: type[Model], keys: Sequence[tuple], fields: Sequence[str]) -> int:
    """How many of `keys` (tuples over `fields`) already exist; batched by the first field."""
    if not keys:
        return 0
    first = fields[0]
    wanted = set(keys)
    found = 0
    for first_value in {k[0] for k in keys}:
        candidates = [k for k in wanted if k[0] == first_value]
        ts_values = list({k[-1] for k in candidates})
        existing = model._default_manager.filter(**{first: first_value, f"{fields[-1]}__in": ts_values}).values_list(
            *fields
        )
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
       inserted: COPY + `RETURNING` grouped by minute on PostgreSQL (which also says which
       minutes gained rows), the summed `changes()` of an `executemany` of `INSERT OR IGNORE`
       on SQLite.
    3. Recompute the minute rollups of the (series, minute) keys that gained rows, then the
       hour rollups of their hours, each in the database: one INSERT ... SELECT per tier per
       batch. A batch of pure duplicates changes nothing and skips both.
    4. Fold the new samples into their GPUs' stall streaks (runs/telemetry/streaks.py), so no
       page reads raw samples to find a stall.
    """
    if not rows:
        return StoreResult(0, 0)
    unique: dict[BucketKey, Sequence[Any]] = {}
    for row in rows:
        unique.setdefault((row[0], row[1], row[2], row[_TS]), row)
    # Minutes old enough to have been compacted (with a margin for a pass running meanwhile).
    reopen_before = blocks.compact_cutoff() + 2 * ONE_MINUTE
    minutes = {ts: _minute(ts) for ts in {key[3] for key in unique}}  # each instant truncated once
    late = {(r, n, g, minutes[ts]) for r, n, g, ts in unique if ts < reopen_before}
    with transaction.atomic():
        # A pass folding one of these minutes finishes first, or waits for this batch.
        blocks.minute_lock({key[3] for key in late}, shared=True)
        reopened = blocks.reopen_minutes(late) if late else []
        if reopened:
            # Back to hot rows first, so the natural key refuses a re-sent sample of the minute
            # and its rollup is rebuilt from all of its samples.
            _insert(reopened)
        if connection.vendor == "postgresql":
            counts = _insert_postgresql(list(unique.values()))
            inserted = sum(counts.values())
            touched = set(counts)
            # Rows of the minutes that gained some: a re-sent one among them reads as late (streaks.advance).
            fresh = list(unique.values())
            if inserted < len(unique):
                fresh = [row for (r, n, g, ts), row in unique.items() if (r, n, g, minutes[ts]) in touched]
        else:
            inserted = _insert_sqlite([_adapt(row) for row in unique.values()])
            touched = {(r, n, g, minutes[ts]) for r, n, g, ts in unique} if inserted else set()
            # Which rows were new is not known here: a re-sent one reads as late (streaks.advance).
            fresh = list(unique.values())
        if touched:
            refresh_minutes(touched)
            refresh_hours({(r, n, g, _hour(m)) for r, n, g, m in touched})
            # After the minutes: their run locks order two workers writing one run (streaks.advance).
            streaks.advance(fresh)
    return StoreResult(inserted=inserted, duplicates=len(rows) - inserted)


def _adapt(row: Sequence[Any]) -> list[Any]:
    """One row as SQLite's insert parameters (values adapted for this backend)."""
    out = list(row)
    out[_TS] = connection.ops.adapt_datetimefield_value(out[_TS])
    if out[_PROCESSES] is not None:
        out[_PROCESSES] = GpuSample._meta.get_field("processes").get_db_prep_value(out[_PROCESSES], connection)
    return out


def _insert(rows: Sequence[Sequence[Any]]) -> None:
    """Insert rows (INSERT_COLUMNS order), skipping stored keys, on either backend."""
    if connection.vendor == "postgresql":
        _insert_postgresql(rows)
    else:
        _insert_sqlite([_adapt(row) for row in rows])


def _insert_postgresql(rows: Sequence[Sequence[Any]]) -> dict[BucketKey, int]:
    """Insert the rows (no two with one natural key), skipping stored keys; returns how many
    rows each (run, node, GPU, minute) really gained: the exact count, and the rollup keys.

    1. The rows become COPY text, column by column (`_copy_cells`). Only the columns some row
       holds are copied (the others stay NULL): NVML reports a dozen of the 24, and each
       copied cell costs Python time. COPY instead of a multi-row VALUES list: psycopg parses
       a 22,000-placeholder statement in Python for every chunk, which cost more than the
       insert itself.
    2. When no stored row shares a series of the batch within the batch's time span (one
       probe of the natural key's index per series), the text is COPYed straight into the
       table, in a savepoint: every row is new, so the counts are the batch's own, grouped in
       Python. This skips the staging table and the conflict-checked INSERT ... SELECT, ~40%
       of the database's time for a 10,000-row batch.
    3. Otherwise, or when the direct COPY hits the natural key anyway (a concurrent writer of
       the same samples, not yet committed at the probe), the text is COPYed into a temporary
       table and moved with INSERT ... SELECT ... ON CONFLICT DO NOTHING, whose RETURNING is
       grouped by minute in the same statement: a row per GPU-minute (~170 for 10,000
       samples) rather than 10,000 timestamps to parse.
    """
    table = connection.ops.quote_name(GpuSample._meta.db_table)
    columns = ", ".join(INSERT_COLUMNS)
    by_column = list(zip(*rows, strict=True))
    present = [i for i, values in enumerate(by_column) if i <= _TS or values.count(None) < len(values)]
    copied = ", ".join(INSERT_COLUMNS[i] for i in present)
    cells = [_copy_cells(by_column[i], json_text=i == _PROCESSES) for i in present]
    text = None
    if all(column is not None for column in cells):
        text = "".join(f"{line}\n" for line in map("\t".join, zip(*cells, strict=True)))
        if not _any_stored(by_column) and copy_direct(table, copied, text):
            counts: dict[BucketKey, int] = {}
            minutes: dict[datetime, datetime] = {}
            for r, n, g, ts in zip(*by_column[:4], strict=True):
                minute = minutes.get(ts)
                if minute is None:
                    minute = minutes[ts] = _minute(ts)
                key = (r, n, g, minute)
                counts[key] = counts.get(key, 0) + 1
            return counts
    with connection.cursor() as cursor:
        # ON COMMIT DROP: an error rolls back past the CREATE and leaves nothing behind.
        cursor.execute(
            f"CREATE TEMPORARY TABLE {STAGING_TABLE} ON COMMIT DROP AS "  # noqa: S608
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        with cursor.cursor.copy(f"COPY {STAGING_TABLE} ({copied}) FROM STDIN") as copy:
            if text is not None:
                copy.write(text)
            else:  # a value of another type: psycopg adapts every row
                field = GpuSample._meta.get_field("processes")
                for row in rows:
                    row = [row[i] for i in present]
                    if _PROCESSES in present and row[present.index(_PROCESSES)] is not None:
                        at = present.index(_PROCESSES)
                        row[at] = field.get_db_prep_value(row[at], connection)
                    copy.write_row(row)
        # Only our own constants and the quoted table name are formatted in.
        cursor.execute(
            f"WITH new AS (INSERT INTO {table} ({columns}) SELECT {columns} FROM {STAGING_TABLE} "  # noqa: S608
            f"{ON_CONFLICT_RETURNING}) "
            "SELECT run_id, node_id, gpu_index, date_trunc('minute', ts), COUNT(*) FROM new GROUP BY 1, 2, 3, 4"
        )
        counts = {(r, n, g, minute): count for r, n, g, minute, count in cursor.fetchall()}
        # Inside an outer transaction (two batches in one), ON COMMIT has not come yet: drop it now.
        cursor.execute(f"DROP TABLE {STAGING_TABLE}")
        return counts


def _any_stored(by_column: Sequence[Sequence[Any]]) -> bool:
    """Whether a stored sample shares a (run, node, GPU) series of the batch within its time span.

    One probe of `gpusample_natural_key` per series (8 for a node's batch), over the day
    partitions the span covers. False means no row of the batch can conflict with a
    committed one.
    """
    series = sorted(set(zip(*by_column[:3], strict=True)))
    stamps = by_column[_TS]
    table = connection.ops.quote_name(GpuSample._meta.db_table)
    with connection.cursor() as cursor:
        # Only our own constants and the quoted table name are formatted in; values are bound.
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM unnest(%s::bigint[], %s::bigint[], %s::integer[]) AS k(r, n, g) "  # noqa: S608
            f"WHERE EXISTS (SELECT 1 FROM {table} s WHERE s.run_id = k.r AND s.node_id = k.n "
            "AND s.gpu_index = k.g AND s.ts >= %s AND s.ts <= %s))",
            [[k[0] for k in series], [k[1] for k in series], [k[2] for k in series], min(stamps), max(stamps)],
        )
        return cursor.fetchone()[0]


def copy_direct(table: str, copied: str, text: str) -> bool:
    """COPY the text straight into the table in a savepoint; False (nothing written) on a natural-key conflict."""
    try:
        with (
            transaction.atomic(),
            connection.cursor() as cursor,
            cursor.cursor.copy(f"COPY {table} ({copied}) FROM STDIN") as copy,
        ):
            copy.write(text)
    except (IntegrityError, psycopg_errors.UniqueViolation):
        return False
    return True


# COPY's text format: these four characters are written as escapes in a cell.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_NUMBERS = {int, float}


def _copy_cells(values: Sequence[Any], json_text: bool = False) -> list[str] | None:
    """One column's values as COPY text cells (NULL as \\N), or None for a type only psycopg should adapt.

    Numbers are written as Python spells them (which PostgreSQL reads back exactly), datetimes
    with their offset, text escaped; `json_text` values are encoded as JSON first (the
    processes column). A column of numbers costs ~1 ms for 10,000 rows here, against ~8 ms a
    column through psycopg's write_row.
    """
    kinds = set(map(type, values)) - {type(None)}
    if kinds == {datetime} and None in values:
        return None
    if json_text:
        values = [None if v is None else json.dumps(v) for v in values]
        kinds = {str} if kinds else kinds
    if kinds and all(issubclass(kind, str) for kind in kinds):  # text choices too (TelemetrySource.API)
        return _spelt_once(values, _text_cell) or list(map(_text_cell, values))
    if not (kinds <= _NUMBERS or kinds == {datetime}):
        return None
    if kinds == {datetime}:  # the GPUs of a node share their instants: each is written once
        spelt = {v: str(v) for v in set(values)}
        return list(map(spelt.__getitem__, values))
    if len(kinds) == 1:  # 1 and 1.0 are one key of a dict, and spelt apart
        cells = _spelt_once(values, _number_cell)
        if cells is not None:
            return cells
    if None in values:
        return ["\\N" if v is None else str(v) for v in values]
    return list(map(str, values))


def _text_cell(value: str | None) -> str:
    return "\\N" if value is None else value.translate(_COPY_ESCAPES)


def _number_cell(value: float | None) -> str:
    return "\\N" if value is None else str(value)


def _spelt_once(values: Sequence[Any], spell: Callable[[Any], str]) -> list[str] | None:
    """The cells, each distinct value spelt once, for a column that repeats a few values; else None.

    A batch's run, node and GPU columns, and NVML's totals, limits, clocks and temperatures, hold
    a handful of values in 10,000 rows: a dict lookup a cell instead of a str() (~6 ms of a
    worker's batch). A probe of 64 evenly spaced cells decides, so a column of distinct values
    costs ~1 microsecond. Never for a column holding 0.0 or NaN: -0.0 equals 0.0 and a NaN no
    NaN, where their spellings differ or the lookup would miss.
    """
    probe = values[:: max(1, len(values) // 64)]
    if len(set(probe)) * 4 > len(probe):
        return None
    distinct = set(values)
    if any(isinstance(v, float) and (v == 0.0 or v != v) for v in distinct):
        return None
    spelt = {v: spell(v) for v in distinct}
    return list(map(spelt.__getitem__, values))


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


@dataclass(frozen=True)
class Tier:
    """A rollup tier: `target` rows, one per (run, node, GPU, bucket of `step`), aggregated from `source` rows."""

    source: type[Model]
    time_field: str  # of `source`
    target: type[Model]
    bucket_field: str  # of `target`
    step: timedelta
    aggregates: dict[str, str]  # target column -> SQL aggregate over `source` rows (aliased s)


def minute_aggregates() -> dict[str, str]:
    """SQL aggregates of GpuSample rows (s) that make one GpuMinute row, by column."""
    aggregates = {
        "samples": "COUNT(*)",
        "memory_total_bytes": "MAX(s.memory_total_bytes)",
        "power_limit_watts": "MAX(s.power_limit_watts)",
    }
    for field in ROLLUP_FIELDS:
        aggregates[f"{field}_min"] = f"MIN(s.{field})"
        aggregates[f"{field}_avg"] = f"AVG(s.{field})"
        aggregates[f"{field}_max"] = f"MAX(s.{field})"
    return aggregates


def hour_aggregates() -> dict[str, str]:
    """SQL aggregates of GpuMinute rows (s) that make one GpuHour row, by column.

    The hour's average weights each minute's average by its sample count, so an hour with a
    half-reported minute is not skewed by it as a plain mean of minute averages would be
    (exact when the field was reported in every sample, as NVML does for a present field).
    Minima of minima and maxima of maxima: a one-second spike survives every tier.
    """
    aggregates = {
        "samples": "SUM(s.samples)",
        "memory_total_bytes": "MAX(s.memory_total_bytes)",
        "power_limit_watts": "MAX(s.power_limit_watts)",
    }
    for field in ROLLUP_FIELDS:
        avg = f"s.{field}_avg"
        weight = f"SUM(CASE WHEN {avg} IS NOT NULL THEN s.samples ELSE 0 END)"
        aggregates[f"{field}_min"] = f"MIN(s.{field}_min)"
        aggregates[f"{field}_avg"] = f"SUM({avg} * s.samples) / NULLIF({weight}, 0)"
        aggregates[f"{field}_max"] = f"MAX(s.{field}_max)"
    return aggregates


MINUTES = Tier(GpuSample, "ts", GpuMinute, "minute", ONE_MINUTE, minute_aggregates())
HOURS = Tier(GpuMinute, "minute", GpuHour, "hour", timedelta(hours=1), hour_aggregates())


# The rollups' keys: (run_id, node_id, gpu_index, bucket start).
KEY_COLUMNS = (("run_id", "bigint"), ("node_id", "bigint"), ("gpu_index", "integer"), ("bucket", "timestamptz"))


def _chunks(keys: Iterable[BucketKey]) -> Iterator[list[BucketKey]]:
    ordered = sorted(keys)
    for start in range(0, len(ordered), KEYS_PER_QUERY):
        yield ordered[start : start + KEYS_PER_QUERY]


def _rebuild(tier: Tier, keys: Iterable[BucketKey]) -> int:
    """Recompute `tier.target` rows at `keys` from `tier.source` rows, in the database; returns the rows written.

    One INSERT ... SELECT ... GROUP BY ... ON CONFLICT DO UPDATE per KEYS_PER_QUERY keys: the
    keys join the source's natural key as (series, time range), nothing travels to Python and
    back. Keys whose source rows are gone (all pruned) find no group and are left as they are:
    a rollup outlives the tier below it. An hour never loses samples (ingest only adds them),
    so a rebuild that finds fewer than the stored hour holds is one whose minutes were pruned
    (AIRBOARD_TELEMETRY_MINUTE_DAYS): the stored hour is the better record and stays.
    """
    quote = connection.ops.quote_name
    target, source = quote(tier.target._meta.db_table), quote(tier.source._meta.db_table)
    columns = ", ".join(quote(name) for name in tier.aggregates)
    selected = ", ".join(tier.aggregates.values())
    updates = ", ".join(f"{quote(name)} = EXCLUDED.{quote(name)}" for name in tier.aggregates)
    keep_fuller = f" WHERE {target}.samples <= EXCLUDED.samples" if tier.target is GpuHour else ""
    written = 0
    for chunk in _chunks(keys):
        cte, params = keys_cte(KEY_COLUMNS, chunk, tier.step)
        # The whole chunk's span as constants too: PostgreSQL then plans for the raw table's
        # day partitions it covers only, instead of all of them (~12 ms of planning a batch).
        adapt = connection.ops.adapt_datetimefield_value
        span = [adapt(min(key[3] for key in chunk)), adapt(max(key[3] for key in chunk) + tier.step)]
        time_field = f"s.{quote(tier.time_field)}"
        # Only our own constants and quoted table names are formatted in; every value is bound.
        # `WHERE` before GROUP BY: SQLite would otherwise read the upsert's ON as the join's.
        sql = (
            f"{cte} INSERT INTO {target} (run_id, node_id, gpu_index, {quote(tier.bucket_field)}, {columns}) "  # noqa: S608
            f"SELECT k.run_id, k.node_id, k.gpu_index, k.bucket, {selected} FROM k JOIN {source} s "
            f"ON s.run_id = k.run_id AND s.node_id = k.node_id AND s.gpu_index = k.gpu_index "
            f"AND {time_field} >= k.bucket AND {time_field} < k.bucket_end "
            f"WHERE {time_field} >= %s AND {time_field} < %s "
            f"GROUP BY k.run_id, k.node_id, k.gpu_index, k.bucket "
            f"ON CONFLICT (run_id, node_id, gpu_index, {quote(tier.bucket_field)}) DO UPDATE SET {updates}{keep_fuller}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params + span)
            written += rows_written(cursor)
    return written


def _stored_at(tier: Tier, selected: str, keys: Iterable[BucketKey]) -> list[tuple[Any, ...]]:
    """`selected` (SQL over the target rows, aliased r) of the stored `tier.target` rows at `keys`."""
    table = connection.ops.quote_name(tier.target._meta.db_table)
    bucket = connection.ops.quote_name(tier.bucket_field)
    found: list[tuple[Any, ...]] = []
    for chunk in _chunks(keys):
        cte, params = keys_cte(KEY_COLUMNS, chunk, tier.step)
        with connection.cursor() as cursor:
            cursor.execute(
                f"{cte} SELECT {selected} FROM k JOIN {table} r ON r.run_id = k.run_id "  # noqa: S608
                f"AND r.node_id = k.node_id AND r.gpu_index = k.gpu_index AND r.{bucket} = k.bucket",
                params,
            )
            found += cursor.fetchall()
    return found


def _minute_utilization(keys: Iterable[BucketKey]) -> list[tuple[int, float | None]]:
    """(run_id, utilization_gpu_avg) of the stored GpuMinute rows at `keys`."""
    return _stored_at(MINUTES, "r.run_id, r.utilization_gpu_avg", keys)


def refresh_minutes(keys: Iterable[BucketKey]) -> int:
    """Rebuild the GpuMinute rows for (run_id, node_id, gpu_index, minute) keys from raw samples,
    and keep their runs' utilization summaries (`RunUtilization`) equal to them.

    1. Lock the runs' summary rows (runs.telemetry.utilization.lock), before the raw samples
       are read: a worker writing minutes of the same run waits, then reads what the other
       committed.
    2. Read the stored utilization of the minutes at the keys, rebuild and upsert them in the
       database (`_rebuild`), read them again.
    3. Add each run's difference, after minus before, to its summary: a key left as it was
       (its samples pruned) counts once on each side and adds nothing.
    4. Refold the run envelope of those minutes across the run's GPUs (envelope_store.refresh).
    """
    keys = set(keys)
    if not keys:
        return 0
    with transaction.atomic():
        utilization.lock({key[0] for key in keys})
        before = _minute_utilization(keys)
        written = _rebuild(MINUTES, keys)
        utilization.add(utilization.difference(before, _minute_utilization(keys)))
        # Under the same run locks: a worker writing other GPUs of the run's minute folds after this one.
        envelope_store.refresh({(key[0], key[3]) for key in keys}, envelope_store.MINUTE)
    return written


def hour_values(keys: Iterable[BucketKey]) -> list[tuple[Any, ...]]:
    """The stored GpuHour rows at `keys` as runs/telemetry/gpu_life.py sums them: (run_id, node_id,
    gpu_index, samples, utilization_gpu_avg, power_limit_watts, then per ROLLUP_FIELDS whether it is held,
    then per gpu_life.MEAN_FIELDS its mean)."""
    quote = connection.ops.quote_name
    held = ", ".join(f"r.{quote(name + '_max')} IS NOT NULL" for name in ROLLUP_FIELDS)
    means = ", ".join(f"r.{quote(name + '_avg')}" for name in gpu_life.MEAN_FIELDS)
    selected = (
        f"r.run_id, r.node_id, r.gpu_index, r.samples, r.utilization_gpu_avg, r.power_limit_watts, {held}, {means}"
    )
    return _stored_at(HOURS, selected, keys)


def refresh_hours(keys: Iterable[BucketKey]) -> int:
    """Rebuild the GpuHour rows for (run_id, node_id, gpu_index, hour) keys from the minute rollups.

    An hour whose minutes were (partly) pruned keeps its stored row (see `_rebuild`). Then the
    run envelope of those hours is refolded from them (runs/telemetry/envelope_store.py), and
    their GPUs' life sums take what changed (runs/telemetry/gpu_life.py). The ingest caller
    holds the runs' locks (`refresh_minutes`), so workers writing one run take turns.
    """
    keys = set(keys)
    with transaction.atomic():
        before = hour_values(keys)
        written = _rebuild(HOURS, keys)
        gpu_life.add(gpu_life.difference(before, hour_values(keys)))
        envelope_store.refresh({(key[0], key[3]) for key in keys}, envelope_store.HOUR)
    return written
