"""Retention of GPU telemetry: raw samples go after AIRBOARD_TELEMETRY_RAW_DAYS, minute rollups
after AIRBOARD_TELEMETRY_MINUTE_DAYS (their hours stay, as long as the run).

The tiers (see runs/telemetry/store.py) are built so that pruning raw samples loses no chart: the
minute and hour rollups were recomputed from them as they arrived, and a rollup row whose raw
samples are gone is never rebuilt from nothing (`_rebuild` only upserts groups it found).

On PostgreSQL the raw table is partitioned by UTC day (runs/telemetry/partitions.py), so whole days past
the cutoff go first as DETACH + DROP TABLE: no dead tuples, no vacuum debt, a few catalog
writes instead of hundreds of millions of row deletes. What is left below the cutoff (the
earlier hours of the day that holds the cutoff, late samples that landed in the DEFAULT
partition, a partition whose lock could not be had) is deleted in batches, as on SQLite.

Deletes go in batches so that no single statement holds a long lock or bloats the WAL: on
SQLite a 10,000-row delete is a short write transaction the web process can interleave with,
on PostgreSQL it keeps each transaction's dead tuples and replication lag small.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from runs.models import GpuMinute, GpuSample, GpuSampleBlock, Node, Run
from runs.telemetry import envelope_store, partitions, utilization

# Rows per delete: small enough for a short transaction, large enough that a day's worth of a
# large fleet (8 GPUs x 1 Hz x 500 runs = 345M rows) goes in a bounded number of statements.
DELETE_BATCH = 10_000


@dataclass(frozen=True)
class PruneResult:
    deleted: int
    batches: int
    cutoff: datetime
    # PostgreSQL: partitions dropped whole; their rows are not counted in `deleted`.
    partitions_dropped: tuple[str, ...] = ()
    # Compacted minutes (GpuSampleBlock rows) and minute rollups deleted row by row.
    blocks_deleted: int = 0
    minutes_deleted: int = 0
    # PostgreSQL: partitions of the compacted part (GpuSampleBlock) dropped whole.
    block_partitions_dropped: tuple[str, ...] = ()
    # Raw samples whose run or node no longer exists (GpuSample has no database foreign keys).
    orphans_deleted: int = 0


def raw_cutoff(now: datetime | None = None) -> datetime:
    """Raw samples stamped before this instant are past retention."""
    return (now or timezone.now()) - timedelta(days=settings.AIRBOARD_TELEMETRY_RAW_DAYS)


def minute_cutoff(now: datetime | None = None) -> datetime:
    """Minute rollups that start before this instant are past retention; their hours are kept."""
    return (now or timezone.now()) - timedelta(days=settings.AIRBOARD_TELEMETRY_MINUTE_DAYS)


def _delete_before(model: type[Model], field: str, cutoff: datetime, batch_size: int, max_batches: int | None) -> int:
    """Delete `model` rows whose `field` is before `cutoff`, oldest first, `batch_size` ids per transaction."""
    deleted = batches = 0
    while max_batches is None or batches < max_batches:
        before = {f"{field}__lt": cutoff}
        ids = list(model._default_manager.filter(**before).order_by(field).values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        with transaction.atomic():
            doomed = model._default_manager.filter(id__in=ids, **before)
            if model is GpuMinute:
                # The runs' utilization summaries stay equal to their stored minutes.
                utilization.subtract_minutes(cast("QuerySet[GpuMinute]", doomed))
            count, _ = doomed.delete()
        deleted += count
        batches += 1
        if len(ids) < batch_size:
            break
    return deleted


def prune_raw_samples(
    now: datetime | None = None, batch_size: int = DELETE_BATCH, max_batches: int | None = None
) -> PruneResult:
    """Delete raw GpuSample rows older than the retention cutoff, `batch_size` at a time.

    1. PostgreSQL: detach and drop the partitions that lie wholly before the cutoff
       (`partitions.drop_partitions_before`); on SQLite nothing happens here.
    2. Read the ids of the oldest `batch_size` samples before the cutoff, walking
       `gpusample_ts_idx` from its start (so each batch costs an index range, not a scan).
    3. Delete exactly those ids, re-checked against the cutoff, in a transaction of its own
       (GpuSample has no dependants, so Django issues one DELETE, no per-row collection).
    4. Repeat until a batch comes back short, or `max_batches` have run (the next daily run
       continues where this one stopped).
    5. The same for the compacted part (GpuSampleBlock: partitions first, then the rest) and
       for minute rollups past AIRBOARD_TELEMETRY_MINUTE_DAYS (plain batched deletes: a
       minute row is ~300 bytes, a year of 1,000 GPUs' minutes is what the setting bounds).
       GpuHour is never touched.
    """
    cutoff = raw_cutoff(now)
    dropped = tuple(partitions.drop_partitions_before(cutoff))
    block_partitions = tuple(partitions.drop_partitions_before(cutoff, table=partitions.BLOCKS))
    # A block is kept until its whole minute is past the cutoff.
    blocks_deleted = _delete_before(GpuSampleBlock, "minute", cutoff - timedelta(minutes=1), batch_size, max_batches)
    minutes_deleted = _delete_before(GpuMinute, "minute", minute_cutoff(now), batch_size, max_batches)
    # The run envelope's minutes go with the minutes they fold (its hours stay, as GpuHour).
    envelope_store.prune_minutes(minute_cutoff(now), batch_size, max_batches)
    orphans_deleted = prune_orphan_samples(batch_size, max_batches)
    deleted = batches = 0
    while max_batches is None or batches < max_batches:
        ids = list(GpuSample.objects.filter(ts__lt=cutoff).order_by("ts").values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        with transaction.atomic():
            count, _ = GpuSample.objects.filter(id__in=ids, ts__lt=cutoff).delete()
        deleted += count
        batches += 1
        if len(ids) < batch_size:
            break
    return PruneResult(
        deleted=deleted,
        batches=batches,
        cutoff=cutoff,
        partitions_dropped=dropped,
        blocks_deleted=blocks_deleted,
        minutes_deleted=minutes_deleted,
        block_partitions_dropped=block_partitions,
        orphans_deleted=orphans_deleted,
    )


def _missing_ids(column: str, parent: type[Model]) -> list[int]:
    """The distinct `column` values of the raw samples that name no `parent` row.

    A loose index scan (a recursive CTE stepping from one value to the next: one index probe
    per distinct run or node, `gpusample_natural_key` for runs, `gpusample_node_ts_idx` for
    nodes), not a scan of the raw rows.
    """
    quote = connection.ops.quote_name
    table, parents = quote(GpuSample._meta.db_table), quote(parent._meta.db_table)
    with connection.cursor() as cursor:
        # Only our own constants and quoted table names are formatted in.
        cursor.execute(
            f"WITH RECURSIVE ids(v) AS (SELECT MIN({column}) FROM {table} UNION ALL "  # noqa: S608
            f"SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > ids.v) FROM ids WHERE ids.v IS NOT NULL) "
            f"SELECT v FROM ids WHERE v IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {parents} p WHERE p.id = ids.v)"
        )
        return [row[0] for row in cursor.fetchall()]


def prune_orphan_samples(batch_size: int = DELETE_BATCH, max_batches: int | None = None) -> int:
    """Delete raw samples whose run or node no longer exists; returns how many went.

    GpuSample's run and node keys have no database constraint (runs/models/telemetry.py: the
    commit-time checks cost ingest ~70 ms a batch). Django's cascade deletes a run's samples
    with it, but a batch a worker writes after its run was deleted (accepted before, processed
    after) leaves rows that name nothing: this sweep removes them, `batch_size` ids a
    transaction, as the retention deletes do. Cost when there are none: one index probe per
    distinct run and node.
    """
    missing_runs, missing_nodes = _missing_ids("run_id", Run), _missing_ids("node_id", Node)
    if not missing_runs and not missing_nodes:
        return 0
    orphans = GpuSample.objects.filter(run_id__in=missing_runs) | GpuSample.objects.filter(node_id__in=missing_nodes)
    deleted = batches = 0
    while max_batches is None or batches < max_batches:
        ids = list(orphans.values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        with transaction.atomic():
            count, _ = GpuSample.objects.filter(id__in=ids).delete()
        deleted += count
        batches += 1
        if len(ids) < batch_size:
            break
    return deleted
