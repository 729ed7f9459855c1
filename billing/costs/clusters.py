"""Classic GPU clusters' money: what their uptime cost, busy vs idle GPU-hours, and a serverless what-if.

A classic ML runtime cluster is billed by uptime, driver + workers, busy or idle (docs/costs.md, "The money rule").
This module answers, per cluster and per team (runs reads it through `billing.engine`):

- uptime cost: uptime x (driver price + workers x worker price) from `InstancePrice`, split at
  price changes and UTC days by `billing.costs.serverless.compute_cost` (exact Decimals);
- GPU-hours held, split into busy, idle and unknown: a GPU-minute of a run on the cluster
  (`GpuMinute`, inside the uptime) is idle when its `utilization_gpu_max` is below
  `AIRBOARD_IDLE_UTILIZATION_PERCENT` (the same test as `billing.costs.run_costs`), busy otherwise;
  held GPU-hours no telemetry covers are "unknown", never guessed;
- idle cost: idle GPU-hours x the worker instance's price per GPU, as the cluster's runs were
  charged it (`billing.costs.run_costs`): the clusters page and /costs/ read the same figure;
- what-if: the same busy GPU-hours priced as serverless accelerator-hours at the price book's
  `AcceleratorPrice` of the nearest serverless shape (`serverless_equivalent`), or "no
  serverless equivalent" when there is none (A100, T4, V100, H200...).

Uptime and worker counts follow one rule (`runs.models.uptime`): lifecycle events, else
`last_restarted_time`, never `start_time`; resize events set the worker count, else a fixed
size's `num_workers` or an autoscaling cluster's minimum, stated as an estimate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, localcontext

from django.conf import settings
from django.utils import timezone

from billing.costs.run_costs import breakdowns_for_runs, idle_hours
from billing.costs.serverless import accelerator_prices
from billing.costs.uptime import ClusterUptime, cluster_uptime, instance_prices
from billing.prices.money import (
    EXACT,
    ZERO,
    Figure,
    PricePeriod,
    billed_hours,
    estimate,
    exact_sum,
    price_in_force,
    utc,
)
from runs.choices import AcceleratorType, RunSource
from runs.models import Cluster, GpuMinute, Run
from runs.models.instance_types import cluster_gpus, instance_gpus, is_gpu_instance


def serverless_equivalent(instance_type: str) -> str | None:
    """The nearest serverless shape for an instance type's GPUs, or None when there is none.

    A10 GPUs map to GPU_1xA10 (priced per accelerator-hour, any count); one H100 to
    GPU_1xH100 and several to GPU_8xH100 (multi-GPU work runs only on the 8-GPU shapes).
    There is no serverless A100, H200, L4, T4 or V100 shape.
    """
    spec = instance_gpus(instance_type)
    if spec is None:
        return None
    if spec.model == "A10":
        return AcceleratorType.A10_1.value
    if spec.model == "H100":
        return AcceleratorType.H100_1.value if spec.count == 1 else AcceleratorType.H100_8.value
    return None


@dataclass
class ClusterCost:
    """One cluster's uptime, cost, busy/idle/unknown GPU-hours and the serverless what-if."""

    cluster: Cluster
    intervals: list[tuple[datetime, datetime]]
    uptime_hours: Decimal
    gpus: int
    uptime_cost: Decimal
    gpu_hours: Decimal
    busy_gpu_hours: Decimal
    idle_gpu_hours: Decimal
    unknown_gpu_hours: Decimal
    idle_cost: Decimal
    serverless_shape: str | None
    what_if_cost: Decimal | None
    notes: list[str] = field(default_factory=list)
    unattributed_cost: Decimal = ZERO
    runs: int = 0
    as_of: datetime | None = None

    @property
    def figure(self) -> Figure:
        """The uptime cost and what it is: estimated, or a lower bound naming what has no price."""
        unpriced = [n for n in self.notes if n.startswith("no instance price") or "lower bound" in n]
        return estimate(self.uptime_cost, self.as_of or timezone.now(), unpriced)

    @property
    def has_gpus(self) -> bool:
        """False for a CPU-only cluster: shown apart, its hours never counted as GPU time."""
        return is_gpu_instance(self.cluster.node_type_id) or is_gpu_instance(
            self.cluster.driver_node_type_id or self.cluster.node_type_id
        )

    @property
    def what_if_saving(self) -> Decimal | None:
        """Uptime cost less the what-if: positive means serverless would have cost less."""
        if self.what_if_cost is None:
            return None
        with localcontext(EXACT):
            return self.uptime_cost - self.what_if_cost


@dataclass
class TeamClusterCost:
    """The sum of one team's clusters (what-if over the clusters that have an equivalent)."""

    team: str
    clusters: int = 0
    uptime_cost: Decimal = ZERO
    busy_gpu_hours: Decimal = ZERO
    idle_gpu_hours: Decimal = ZERO
    unknown_gpu_hours: Decimal = ZERO
    idle_cost: Decimal = ZERO
    what_if_cost: Decimal = ZERO
    compared_uptime_cost: Decimal = ZERO
    without_equivalent: int = 0

    @property
    def what_if_saving(self) -> Decimal:
        """Saving over the clusters that have a serverless equivalent."""
        with localcontext(EXACT):
            return self.compared_uptime_cost - self.what_if_cost


def cluster_costs(clusters: Iterable[Cluster], now: datetime | None = None) -> list[ClusterCost]:
    """Cost, busy/idle GPU-hours and what-if of each cluster, in a constant number of queries.

    1. Uptime, its cost and its split among runs from `billing.costs.uptime.cluster_uptime`:
       the one rule (`runs.models.uptime`), the same the runs' costs and the rollups read.
    2. Idle GPU-hours and idle cost: the sum of the cluster's runs' own (`breakdowns_for_runs`,
       worker instance price per GPU), so the clusters page and /costs/ say the same.
    3. One query for the GPU-minutes of runs on these clusters; a minute inside the uptime and
       not idle is busy; held GPU-hours less busy and idle is unknown.
    4. One query for serverless prices of the equivalent shapes (busy minutes at the serverless
       price in force: the what-if).
    """
    clusters = list(clusters)
    as_of = utc(now or timezone.now(), "now")
    uptimes = cluster_uptime(clusters, now=as_of)
    # Idle cost is the runs' own (billing.costs.run_costs prices it), so /costs/ and this page agree.
    members = list(Run.objects.filter(cluster__in=clusters, source=RunSource.CLASSIC))
    idle: dict[int | None, list[tuple[Decimal, Decimal]]] = defaultdict(list)
    breakdowns = breakdowns_for_runs(members, now=as_of) if members else {}
    for run in members:
        idle[run.cluster_id].append((breakdowns[run.pk].idle_gpu_hours, breakdowns[run.pk].idle))
    prices = instance_prices({(c.node_type_id, uptimes[c.pk].region) for c in clusters})

    threshold = settings.AIRBOARD_IDLE_UTILIZATION_PERCENT
    minutes: dict[int, list[tuple[datetime, bool]]] = defaultdict(list)
    rows = GpuMinute.objects.filter(run__cluster__in=clusters, utilization_gpu_max__isnull=False)
    for cluster_id, minute, peak in rows.values_list("run__cluster_id", "minute", "utilization_gpu_max"):
        assert peak is not None  # utilization_gpu_max__isnull=False
        minutes[cluster_id].append((minute, peak < threshold))
    shapes = {c.pk: serverless_equivalent(c.node_type_id) for c in clusters}
    accel = accelerator_prices({(s, c.region) for c in clusters if (s := shapes[c.pk]) and c.region})

    out = []
    for c in clusters:
        uptime = uptimes[c.pk]
        shape = shapes[c.pk]
        worker_prices = prices.get((c.node_type_id, uptime.region), [])
        out.append(
            _cluster_cost(
                uptime,
                worker_prices,
                minutes[c.pk],
                shape,
                accel.get((shape, c.region), []) if shape else [],
                as_of,
                idle[c.pk],
            )
        )
    return out


def _cluster_cost(
    uptime: ClusterUptime,
    worker_prices: list[PricePeriod],
    minutes: list[tuple[datetime, bool]],
    shape: str | None,
    serverless: list[PricePeriod],
    as_of: datetime,
    run_idle: list[tuple[Decimal, Decimal]],
) -> ClusterCost:
    cluster = uptime.cluster
    notes: list[str] = list(uptime.notes)
    intervals = uptime.stretches
    uptime_hours = uptime.hours
    # Each piece's lines add up to its own billed hours exactly (money.split_billed_hours).
    with localcontext(EXACT):
        gpu_hours = exact_sum(
            billed_hours(piece.start, piece.end) * cluster_gpus(cluster, piece.workers) for piece in uptime.pieces
        )
    gpus = max((cluster_gpus(cluster, p.workers) for p in uptime.pieces), default=cluster_gpus(cluster, 0))

    # Busy minutes inside the uptime, grouped by the serverless price in force, hours rounded once a group.
    busy_groups: dict[Decimal | None, int] = defaultdict(int)
    serverless_starts = [p.effective_from for p in serverless]
    for minute, idle in minutes:
        if idle or not any(start <= minute < end for start, end in intervals):
            continue
        price = price_in_force(serverless, serverless_starts, minute)
        busy_groups[price.usd_per_hour if price else None] += 1
    busy_gpu_hours = idle_hours(sum(busy_groups.values()))
    # Idle: what the cluster's runs were charged for idle GPUs (billing.costs.run_costs), summed.
    idle_gpu_hours = exact_sum(hours for hours, _ in run_idle)
    idle_cost = exact_sum(usd for _, usd in run_idle)
    with localcontext(EXACT):
        unknown = max(gpu_hours - idle_gpu_hours - busy_gpu_hours, ZERO)
    if not worker_prices and idle_gpu_hours:
        notes.append("idle GPU-hours without an instance price are counted, not priced")

    what_if: Decimal | None = None
    if shape is None:
        notes.append("no serverless equivalent for " + (cluster.node_type_id or "this instance type"))
    else:
        with localcontext(EXACT):
            what_if = exact_sum(idle_hours(n) * price for price, n in busy_groups.items() if price is not None)
        if busy_groups.get(None):
            notes.append(f"no serverless {shape} price in {cluster.region or 'this region'} for part of the busy hours")
    return ClusterCost(
        cluster=cluster, intervals=intervals, uptime_hours=uptime_hours, gpus=gpus,
        uptime_cost=uptime.cost, gpu_hours=gpu_hours, busy_gpu_hours=busy_gpu_hours,
        idle_gpu_hours=idle_gpu_hours, unknown_gpu_hours=unknown, idle_cost=idle_cost, serverless_shape=shape,
        what_if_cost=what_if, notes=notes, unattributed_cost=uptime.unattributed_cost, runs=uptime.runs,
        as_of=as_of,
    )  # fmt: skip


def team_totals(costs: Iterable[ClusterCost]) -> list[TeamClusterCost]:
    """Per-team sums of cluster costs, by team name."""
    teams: dict[str, TeamClusterCost] = {}
    for cost in costs:
        row = teams.setdefault(cost.cluster.team.name, TeamClusterCost(cost.cluster.team.name))
        with localcontext(EXACT):
            row.clusters += 1
            row.uptime_cost += cost.uptime_cost
            row.busy_gpu_hours += cost.busy_gpu_hours
            row.idle_gpu_hours += cost.idle_gpu_hours
            row.unknown_gpu_hours += cost.unknown_gpu_hours
            row.idle_cost += cost.idle_cost
            if cost.what_if_cost is None:
                row.without_equivalent += 1
            else:
                row.what_if_cost += cost.what_if_cost
                row.compared_uptime_cost += cost.uptime_cost
    return [teams[name] for name in sorted(teams)]
