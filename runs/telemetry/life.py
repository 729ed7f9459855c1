"""A run's rollups over its whole life, per node: one aggregate the run page's frame shares.

The frame asks three things of every hour of the run: which signals its GPUs reported (the
panels it draws), which nodes reported (the coverage line) and each node's mean utilization (the
node-skew table). Asked apart, that was three scans of the hour rollups, ~26 ms for a 13-day
64-GPU run's 20,000 hour rows against ~2 ms for a 1-GPU run's; `life(run)` is one scan, grouped
by node and joined to nothing, and the three answers are read from it.

From the run's GpuLife rows, its GPUs' hours already summed on the write path
(runs/telemetry/gpu_life.py): one row a GPU whatever the run's age, where the hour rollups
were 20,000 rows (~9 ms) for 13 days of 64 GPUs and growing. A run without them (minute
rollups loaded without hours) is read from its minute rollups.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count

from runs.models import ROLLUP_FIELDS, GpuHour, GpuLife, GpuMinute, Run, mean_utilization


@dataclass(frozen=True)
class NodeLife:
    """One node's rollups over the run: how many rows, the mean of their utilization means
    (None when none has one) and the ROLLUP_FIELDS at least one of them holds."""

    node_id: int
    rows: int
    mean_utilization: float | None
    signals: frozenset[str]


@dataclass(frozen=True)
class RunLife:
    """Every node with rollups, by node id."""

    nodes: dict[int, NodeLife]

    def signals(self, node_ids: Collection[int] | None = None) -> frozenset[str]:
        """The signals the run's GPUs (or those of `node_ids`) reported at least once."""
        picked = self.nodes.values() if node_ids is None else (self.nodes[pk] for pk in node_ids if pk in self.nodes)
        return frozenset().union(*(node.signals for node in picked))

    def has_rows(self, node_ids: Collection[int] | None = None) -> bool:
        if node_ids is None:
            return bool(self.nodes)
        return any(pk in self.nodes for pk in node_ids)


def life(run: Run) -> RunLife:
    """The run's GpuLife rows (one a GPU, runs/telemetry/gpu_life.py) summed by node; for a run
    with none (minute rollups loaded without their hours), its minute rollups grouped by node."""
    found = _from_gpu_lives(run)
    return found if found.nodes else tier(GpuMinute, run)


def _from_gpu_lives(run: Run) -> RunLife:
    sums: dict[int, list[int]] = {}
    signals: dict[int, set[str]] = {}
    rows = GpuLife.objects.filter(run=run, hours__gt=0).values_list(
        "node_id", "hours", "mean_hours", "mean_sum", "reported"
    )
    for node_id, hours, mean_hours, mean_sum, reported in rows:
        total = sums.setdefault(node_id, [0, 0, 0])
        total[0] += hours
        total[1] += mean_hours
        total[2] += mean_sum
        signals.setdefault(node_id, set()).update(name for name, count in reported.items() if count > 0)
    return RunLife({
        pk: NodeLife(pk, hours, mean_utilization(mean_hours, mean_sum), frozenset(signals[pk]))
        for pk, (hours, mean_hours, mean_sum) in sums.items()
    })  # fmt: skip


def tier(model: type[GpuHour] | type[GpuMinute], run: Run, node_ids: Collection[int] | None = None) -> RunLife:
    """The run's rollups of one tier (those of `node_ids`, or all), grouped by node."""
    counts = {field: Count(f"{field}_max") for field in ROLLUP_FIELDS}
    rows = model.objects.filter(run=run)
    if node_ids is not None:
        rows = rows.filter(node_id__in=node_ids)
    found: dict[int, NodeLife] = {}
    for row in rows.values("node_id").annotate(rows=Count("pk"), util=Avg("utilization_gpu_avg"), **counts).order_by():
        values: dict[str, Any] = dict(row)
        signals = frozenset(f for f in ROLLUP_FIELDS if values[f])
        found[values["node_id"]] = NodeLife(values["node_id"], values["rows"], values["util"], signals)
    return RunLife(found)
