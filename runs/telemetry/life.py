"""A run's rollups over its whole life, per node: one aggregate the run page's frame shares.

The frame asks three things of every hour of the run: which signals its GPUs reported (the
panels it draws), which nodes reported (the coverage line) and each node's mean utilization (the
node-skew table). Asked apart, that was three scans of the hour rollups, ~26 ms for a 13-day
64-GPU run's 20,000 hour rows against ~2 ms for a 1-GPU run's; `life(run)` is one scan, grouped
by node and joined to nothing, and the three answers are read from it.

From the hour rollups (60 times fewer rows than the minutes; ingest keeps them with the
minutes), else the minute rollups (rollups loaded without hours).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count

from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, Run


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
    """One aggregate over the run's hour rollups (else its minute rollups), grouped by node."""
    for model in (GpuHour, GpuMinute):
        found = tier(model, run)
        if found.nodes:
            return found
    return RunLife({})


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
