"""Each GPU's hour rollups summed over the run's life (`GpuLife`), kept equal to them on the write path.

The run page's frame asks three things of every hour of the run (runs/telemetry/life.py:
which signals, which nodes, each node's mean), the power panel the highest power limit
(charts.power_limit), and an ended run's under-use flag each GPU's mean over its whole life
(runs/telemetry/underuse.py). Read from GpuHour, both grow with
GPUs x hours: 20,000 rows (~9 ms and ~12 ms) for a 13-day 64-GPU run, ~300 ms for a runs table
of 25 such ended runs, and more every hour the run lives. GpuLife holds, per GPU, the sums those
answers are made of, so they read one row a GPU whatever the run's age.

The invariant: a GPU's row equals `aggregate` of its stored GpuHour rows, exactly: means enter
as whole millionths of a percent, other fields' as thousandths of their unit (`utilization.as_units`,
the same rounding in SQL and Python), and integers add up the same in any order. It is kept by:

1. `store.refresh_hours`, the one place hour rollups are written from minutes: it reads the
   hours at its keys before and after rebuilding them and adds the difference (`difference`,
   `add`). Its ingest caller holds the runs' locks (`utilization.lock`, taken by
   `refresh_minutes` in the same transaction), so two workers writing one run take turns and
   each reads what the other committed. Rewriting an hour with the same values adds nothing.
2. `rebuild` for hours written some other way (the benchmark's COPY, a repair by hand):
   recomputes the given runs from their hours. GpuHour rows last as long as the run (no
   retention prunes them), so nothing else changes them.

Readers take a run's GpuLife rows as its hours' sums: hours written without them read as none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Count, F, FloatField, Max, Q, Sum

from runs.models import MEAN_SCALE, ROLLUP_FIELDS, GpuHour, GpuLife, mean_utilization
from runs.telemetry import utilization

GpuKey = tuple[int, int, int]  # (run_id, node_id, gpu_index)
# One stored hour as `store.hour_values` reads it: the GPU, its samples, its utilization mean,
# its power limit, then per ROLLUP_FIELDS whether the hour holds that field, then per MEAN_FIELDS
# its mean (None when it has none).
HourRow = Sequence[Any]
# The fields whose whole-life means GpuLife.means keeps (utilization's are mean_hours and mean_sum).
MEAN_FIELDS = tuple(name for name in ROLLUP_FIELDS if name != "utilization_gpu")
SUMS = ("hours", "mean_hours", "mean_sum", "weight", "weighted_sum")
# Runs per query when rebuilding: keeps IN lists under SQLite's variable limit.
CHUNK = 2000


@dataclass
class Sums:
    """What a GPU's hours add up to (GpuLife's columns), or a change of it."""

    hours: int = 0
    mean_hours: int = 0
    mean_sum: int = 0
    weight: int = 0
    weighted_sum: int = 0
    reported: Counter[str] = field(default_factory=Counter)
    # Per MEAN_FIELDS: hours with a mean, and those means summed in MEAN_SCALE units.
    mean_counts: Counter[str] = field(default_factory=Counter)
    mean_units: Counter[str] = field(default_factory=Counter)
    # Not a sum: the highest power limit of the hours added. An hour's (a MAX over its minutes)
    # only rises as it gains samples, so the GPU's keeps the higher of stored and new.
    power_limit: float | None = None

    def add_hour(
        self, sign: int, samples: int, mean: float | None, power_limit: float | None, reported: Sequence[Any],
        means: Sequence[Any] = (),
    ) -> None:  # fmt: skip
        self.hours += sign
        if sign > 0 and power_limit is not None:
            self.power_limit = power_limit if self.power_limit is None else max(self.power_limit, power_limit)
        units = utilization.as_units(mean)
        if units is not None:
            self.mean_hours += sign
            self.mean_sum += sign * units
            self.weight += sign * samples
            self.weighted_sum += sign * units * samples
        for name, present in zip(ROLLUP_FIELDS, reported, strict=True):
            if present:
                self.reported[name] += sign
        for name, value in zip(MEAN_FIELDS, means, strict=False):
            units = utilization.as_units(value, MEAN_SCALE)
            if units is not None:
                self.mean_counts[name] += sign
                self.mean_units[name] += sign * units

    @property
    def changes(self) -> bool:
        return (
            any(getattr(self, name) for name in SUMS)
            or any(self.reported.values())
            or any(self.mean_counts.values())
            or any(self.mean_units.values())
            or self.power_limit is not None
        )

    @property
    def means(self) -> dict[str, list[int]]:
        """GpuLife.means: field -> [hours, units], fields with no hour left out."""
        return {name: [self.mean_counts[name], self.mean_units[name]] for name in MEAN_FIELDS if self.mean_counts[name]}


def difference(before: Iterable[HourRow], after: Iterable[HourRow]) -> dict[GpuKey, Sums]:
    """Per GPU, what replacing hours `before` by hours `after` changes (both as `store.hour_values` reads them)."""
    deltas: dict[GpuKey, Sums] = {}
    held = len(ROLLUP_FIELDS)
    for sign, rows in ((-1, before), (1, after)):
        for run_id, node_id, gpu, samples, mean, power_limit, *rest in rows:
            deltas.setdefault((run_id, node_id, gpu), Sums()).add_hour(
                sign, samples, mean, power_limit, rest[:held], rest[held:]
            )
    return {key: delta for key, delta in deltas.items() if delta.changes}


def add(deltas: dict[GpuKey, Sums]) -> None:
    """Add each GPU's change to its row (made when missing), in the caller's transaction and run locks."""
    if not deltas:
        return
    runs = {key[0] for key in deltas}
    nodes = {key[1] for key in deltas}
    stored = {
        (row.run_id, row.node_id, row.gpu_index): row
        for row in GpuLife.objects.filter(run_id__in=sorted(runs), node_id__in=sorted(nodes))
        if (row.run_id, row.node_id, row.gpu_index) in deltas
    }
    out = []
    for (run_id, node_id, gpu), delta in sorted(deltas.items()):
        row = stored.get((run_id, node_id, gpu)) or GpuLife(run_id=run_id, node_id=node_id, gpu_index=gpu)
        for name in SUMS:
            setattr(row, name, getattr(row, name) + getattr(delta, name))
        counts = Counter(row.reported)
        counts.update(delta.reported)
        row.reported = {name: counts[name] for name in ROLLUP_FIELDS if counts[name] > 0}
        hours = Counter({name: pair[0] for name, pair in row.means.items()})
        units = Counter({name: pair[1] for name, pair in row.means.items()})
        hours.update(delta.mean_counts)
        units.update(delta.mean_units)
        row.means = {name: [hours[name], units[name]] for name in MEAN_FIELDS if hours[name] > 0}
        limits = [value for value in (row.power_limit_watts, delta.power_limit) if value is not None]
        row.power_limit_watts = max(limits) if limits else None
        out.append(row)
    GpuLife.objects.bulk_create(
        out,
        update_conflicts=True,
        unique_fields=["run", "node", "gpu_index"],
        update_fields=[*SUMS, "reported", "means", "power_limit_watts"],
    )


def whole_life_means(
    run_id: int, fields: Sequence[str], node_ids: Iterable[int] | None = None
) -> list[Mapping[str, Any]]:
    """Each GPU's mean of `fields` over its whole life, the mean of its hours' means, from its GpuLife row:
    [{node_id, gpu_index, field: mean or None}], one row a GPU (none when the run has no rows).

    What averaging the `{field}_avg` of all of the GPU's GpuHour rows gives, without reading them.
    """
    rows = GpuLife.objects.filter(run_id=run_id)
    if node_ids is not None:
        rows = rows.filter(node_id__in=list(node_ids))
    out: list[Mapping[str, Any]] = []
    for node_id, gpu, mean_hours, mean_sum, means in rows.values_list(
        "node_id", "gpu_index", "mean_hours", "mean_sum", "means"
    ):
        found: dict[str, Any] = {"node_id": node_id, "gpu_index": gpu}
        for name in fields:
            if name == "utilization_gpu":
                found[name] = mean_utilization(mean_hours, mean_sum)
            else:
                hours, units = (means or {}).get(name, (0, 0))
                found[name] = units / MEAN_SCALE / hours if hours else None
        out.append(found)
    return out


def aggregate(hours: Any) -> dict[GpuKey, Sums]:
    """Each GPU's sums over the given GpuHour rows, computed from the rows in one grouped query."""
    units = utilization.units_sql()
    reported = Count("utilization_gpu_avg")
    rows = (
        hours.values("run_id", "node_id", "gpu_index")
        .annotate(
            n=Count("id"),
            mean_hours=reported,
            mean_sum=Sum(units),
            weight=Sum("samples", filter=Q(utilization_gpu_avg__isnull=False)),
            weighted_sum=Sum(units * F("samples"), output_field=FloatField()),
            power_limit=Max("power_limit_watts"),
            **{f"reported_{name}": Count(f"{name}_max") for name in ROLLUP_FIELDS},
            **{f"hours_{name}": Count(f"{name}_avg") for name in MEAN_FIELDS},
            **{f"units_{name}": Sum(utilization.units_sql(f"{name}_avg", MEAN_SCALE)) for name in MEAN_FIELDS},
        )
        .order_by()
    )
    out = {}
    for row in rows:
        out[(row["run_id"], row["node_id"], row["gpu_index"])] = Sums(
            hours=row["n"],
            mean_hours=row["mean_hours"],
            mean_sum=int(row["mean_sum"] or 0),
            weight=int(row["weight"] or 0),
            weighted_sum=int(row["weighted_sum"] or 0),
            reported=Counter({name: row[f"reported_{name}"] for name in ROLLUP_FIELDS if row[f"reported_{name}"]}),
            mean_counts=Counter({name: row[f"hours_{name}"] for name in MEAN_FIELDS if row[f"hours_{name}"]}),
            mean_units=Counter({name: int(row[f"units_{name}"]) for name in MEAN_FIELDS if row[f"hours_{name}"]}),
            power_limit=row["power_limit"],
        )
    return out


def _row(key: GpuKey, sums: Sums) -> GpuLife:
    run_id, node_id, gpu = key
    values = {name: getattr(sums, name) for name in SUMS}
    return GpuLife(run_id=run_id, node_id=node_id, gpu_index=gpu, reported=dict(sums.reported), means=sums.means,
                   power_limit_watts=sums.power_limit, **values)  # fmt: skip


def rebuild(run_ids: Iterable[int] | None = None) -> int:
    """Recompute the rows of `run_ids` (every run with hours or rows when None) from their hour rollups;
    returns the GPUs written."""
    if run_ids is None:
        ids = set(GpuHour.objects.values_list("run_id", flat=True).distinct().order_by())
        ids |= set(GpuLife.objects.values_list("run_id", flat=True).distinct().order_by())
    else:
        ids = set(run_ids)
    ordered = sorted(ids)
    written = 0
    for i in range(0, len(ordered), CHUNK):
        chunk = ordered[i : i + CHUNK]
        with transaction.atomic():
            utilization.lock(chunk)
            found = aggregate(GpuHour.objects.filter(run_id__in=chunk))
            GpuLife.objects.filter(run_id__in=chunk).delete()
            GpuLife.objects.bulk_create([_row(key, sums) for key, sums in sorted(found.items())], batch_size=1000)
            written += len(found)
    return written
