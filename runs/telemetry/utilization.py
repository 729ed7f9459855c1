"""Per-run utilization summary (`RunUtilization`), kept equal to the run's minute rollups.

Advice's low-utilization rule wants each multi-GPU run's mean `utilization_gpu_avg` over its
GpuMinute rows; averaging them on every page view read every minute of the window (2.88
million rows, ~400 ms at 100,000 runs). The summary holds, per run, how many minutes reported
utilization and the sum of their means, so the page reads one row a run.

The invariant: a run's summary equals the aggregate of its stored GpuMinute rows
(`aggregate_minutes`), exactly, because each minute's mean enters as a whole number of
millionths of a percent (`as_units`: the same rounding in SQL and in Python), and integers add
up the same in any order. It is kept by:

1. `refresh_minutes` (runs.telemetry.store), the one place minute rollups are written from raw
   samples: it locks the runs' summary rows first (`lock`), so two workers writing minutes of
   one run take turns and each reads the other's committed rows, then reads the minutes'
   stored values, upserts the new ones and adds the difference (`add`). Rewriting a minute
   with the same values adds nothing: idempotent.
2. retention (`subtract_minutes`): minutes pruned after AIRBOARD_TELEMETRY_MINUTE_DAYS are taken
   out in the transaction that deletes them.
3. `rebuild` for minutes written some other way (the demo seed, the benchmark's COPY, a repair
   by hand): recomputes the given runs from their minutes; `manage.py rebuild_run_utilization`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Count, F, FloatField, QuerySet, Sum, Value
from django.db.models.functions import Floor

from runs.models import UTILIZATION_SCALE, GpuMinute, RunUtilization

# Runs per query when rebuilding or locking many: keeps IN lists under SQLite's variable limit.
CHUNK = 2000

Delta = tuple[int, int]  # (gpu_minutes, utilization_sum)


def as_units(value: float | None, scale: int = UTILIZATION_SCALE) -> int | None:
    """A mean as a whole number of 1/`scale` of its unit, rounded half up (as `units_sql`): a
    minute's utilization in millionths of a percent by default (GpuLife.means: MEAN_SCALE)."""
    return None if value is None else math.floor(value * scale + 0.5)


def units_sql(column: str = "utilization_gpu_avg", scale: int = UTILIZATION_SCALE) -> Floor:
    """`as_units` in SQL over a rollup row's `column` (IEEE doubles on both backends)."""
    return Floor(F(column) * Value(float(scale)) + Value(0.5), output_field=FloatField())


def aggregate_minutes(minutes: QuerySet[GpuMinute]) -> dict[int, Delta]:
    """(gpu_minutes, utilization_sum) per run of the given minutes, computed from the rows."""
    rows = (
        minutes.filter(utilization_gpu_avg__isnull=False)
        .values("run_id")
        .annotate(n=Count("id"), s=Sum(units_sql()))
        .order_by()
    )
    return {row["run_id"]: (row["n"], int(row["s"])) for row in rows}


def lock(run_ids: Iterable[int]) -> None:
    """Create the runs' summary rows if missing and lock them, in id order (no deadlocks).

    Inside the caller's transaction; on SQLite (one writer at a time) the lock is a no-op.
    """
    ids = sorted(set(run_ids))
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i : i + CHUNK]
        RunUtilization.objects.bulk_create([RunUtilization(run_id=pk) for pk in chunk], ignore_conflicts=True)
        list(RunUtilization.objects.select_for_update().filter(run_id__in=chunk).order_by("run_id").values_list("pk"))


def difference(old: Iterable[tuple[int, float | None]], new: Iterable[tuple[int, float | None]]) -> dict[int, Delta]:
    """Per run, what replacing minutes with values `old` by minutes with values `new` changes."""
    deltas: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for sign, values in ((-1, old), (1, new)):
        for run_id, value in values:
            units = as_units(value)
            if units is not None:
                deltas[run_id][0] += sign
                deltas[run_id][1] += sign * units
    return {pk: (n, s) for pk, (n, s) in deltas.items() if n or s}


def add(deltas: dict[int, Delta]) -> None:
    """Add each run's (gpu_minutes, utilization_sum) difference to its (locked) summary row."""
    for run_id, (n, s) in sorted(deltas.items()):
        RunUtilization.objects.filter(run_id=run_id).update(
            gpu_minutes=F("gpu_minutes") + n, utilization_sum=F("utilization_sum") + s
        )


def subtract_minutes(minutes: QuerySet[GpuMinute]) -> None:
    """Take the given minutes (about to be deleted, in the caller's transaction) out of their runs' summaries."""
    found = aggregate_minutes(minutes)
    if found:
        lock(found)
        add({pk: (-n, -s) for pk, (n, s) in found.items()})


def rebuild(run_ids: Iterable[int] | None = None) -> int:
    """Recompute the summaries of `run_ids` (all runs with minutes when None) from their minutes."""
    if run_ids is None:
        ids = set(GpuMinute.objects.values_list("run_id", flat=True).distinct().order_by())
        ids |= set(RunUtilization.objects.values_list("run_id", flat=True))
    else:
        ids = set(run_ids)
    ordered = sorted(ids)
    for i in range(0, len(ordered), CHUNK):
        chunk = ordered[i : i + CHUNK]
        with transaction.atomic():
            lock(chunk)
            found = aggregate_minutes(GpuMinute.objects.filter(run_id__in=chunk))
            RunUtilization.objects.bulk_create(
                [RunUtilization(run_id=pk, gpu_minutes=n, utilization_sum=s) for pk, (n, s) in found.items()],
                update_conflicts=True,
                unique_fields=["run"],
                update_fields=["gpu_minutes", "utilization_sum"],
                batch_size=1000,
            )
            RunUtilization.objects.filter(run_id__in=[pk for pk in chunk if pk not in found]).update(
                gpu_minutes=0, utilization_sum=0
            )
    return len(ids)
