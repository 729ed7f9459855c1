"""Storing GPU samples and MLflow metric points: batch in, bulk insert, idempotent.

The natural keys live in the database (`gpusample_natural_key`, `metricpoint_natural_key`),
so a resent row conflicts and is skipped, whichever worker writes it and however often.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Avg, Count, Max, Min
from django.db.models.functions import TruncMinute

from runs.models import ROLLUP_FIELDS, GpuMinute, GpuSample, MetricPoint

# Rows per INSERT statement: well under SQLite's 32,766 bound parameters at 14 columns a row.
INSERT_CHUNK = 1000


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
    """Insert samples, skipping ones already stored, then refresh the minute rollups they touch.

    1. Count which natural keys already exist (so the caller can report duplicates).
    2. Bulk insert with conflict-ignore: a concurrent writer of the same rows is harmless.
    3. Recompute the rollup rows of the (run, node, gpu, minute) keys in this batch from raw
       samples: idempotent, and proportional to the batch, not the run.
    """
    if not samples:
        return StoreResult(0, 0)
    fields = ("run_id", "node_id", "gpu_index", "ts")
    keys = list({(s.run_id, s.node_id, s.gpu_index, s.ts) for s in samples})
    in_batch_repeats = len(samples) - len(keys)
    with transaction.atomic():
        existing = _count_where(GpuSample, keys, fields)
        for start in range(0, len(samples), INSERT_CHUNK):
            GpuSample.objects.bulk_create(samples[start : start + INSERT_CHUNK], ignore_conflicts=True)
        refresh_minutes({(s.run_id, s.node_id, s.gpu_index, _minute(s.ts)) for s in samples})
    return StoreResult(inserted=len(keys) - existing, duplicates=existing + in_batch_repeats)


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


def refresh_minutes(keys: Iterable[tuple[int, int, int, datetime]]) -> int:
    """Rebuild the GpuMinute rows for (run_id, node_id, gpu_index, minute) keys from raw samples."""
    keys = sorted(set(keys))
    if not keys:
        return 0
    aggregates = {"samples": Count("id"), "memory_total_bytes": Max("memory_total_bytes")}
    aggregates["power_limit_watts"] = Max("power_limit_watts")
    for field in ROLLUP_FIELDS:
        aggregates[f"{field}_min"] = Min(field)
        aggregates[f"{field}_avg"] = Avg(field)
        aggregates[f"{field}_max"] = Max(field)
    rows: list[GpuMinute] = []
    # Group keys by (run, node, gpu) and read the span of minutes each needs in one query.
    spans: dict[tuple[int, int, int], list[datetime]] = {}
    for run_id, node_id, gpu, minute in keys:
        spans.setdefault((run_id, node_id, gpu), []).append(minute)
    for (run_id, node_id, gpu), minutes in spans.items():
        wanted = set(minutes)
        first, last = min(minutes), max(minutes)
        qs = (
            GpuSample.objects.filter(
                run_id=run_id,
                node_id=node_id,
                gpu_index=gpu,
                ts__gte=first,
                ts__lt=last + timedelta(minutes=1),
            )
            .annotate(minute=TruncMinute("ts"))
            .values("minute")
            .annotate(**aggregates)
        )
        for agg in qs:
            minute = agg.pop("minute")
            if minute not in wanted:
                continue
            rows.append(GpuMinute(run_id=run_id, node_id=node_id, gpu_index=gpu, minute=minute, **agg))
    update_fields = list(aggregates)
    GpuMinute.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "node", "gpu_index", "minute"],
        update_fields=update_fields,
        batch_size=500,
    )
    return len(rows)
