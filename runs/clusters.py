"""Classic GPU clusters: what their GPUs are, what their uptime cost, busy vs idle, and a what-if.

A classic ML runtime cluster is billed by uptime, driver + workers, busy or idle (DESIGN.md).
This module answers, per cluster and per team:

- uptime cost: uptime x (driver price + workers x worker price) from `InstancePrice`, split at
  price changes and UTC days by `billing.costs.compute_cost` (exact Decimals);
- GPU-hours held, split into busy, idle and unknown: a GPU-minute of a run on the cluster
  (`GpuMinute`, inside the uptime) is idle when its `utilization_gpu_max` is below
  `AIRBOARD_IDLE_UTILIZATION_PERCENT` (the same test as `billing.run_costs`), busy otherwise;
  held GPU-hours no telemetry covers are "unknown", never guessed;
- idle cost: idle GPU-hours x the worker instance's price per GPU;
- what-if: the same busy GPU-hours priced as serverless accelerator-hours at the price book's
  `AcceleratorPrice` of the nearest serverless shape (`serverless_equivalent`), or "no
  serverless equivalent" when there is none (A100, T4, V100, H200...).

Autoscaling clusters are priced at their recorded `num_workers` (the count the source last
reported), or the autoscale minimum when that is 0: resize events are not modelled yet.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal, Inexact, localcontext

from django.conf import settings
from django.utils import timezone

from billing.costs import (
    _EXACT,
    ZERO,
    PricePeriod,
    _accelerator_prices,
    _exact_sum,
    _price_in_force,
    _utc,
    billed_hours,
    compute_cost,
)
from billing.run_costs import _instance_prices, combined_rate, idle_hours
from runs.choices import AcceleratorType
from runs.models import Cluster, ClusterEvent, GpuMinute

# Instance families -> (GPU model, GPUs per instance by size). AWS names first; Azure and GCP
# names carry the model in the name and the count is read from the size where it can be.
_AWS_GPUS: dict[str, tuple[str, dict[str, int], int]] = {
    # family: (model, {size: gpus}, default gpus for sizes not listed)
    "g5": ("A10", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
    "g6": ("L4", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
    "g4dn": ("T4", {"12xlarge": 4, "metal": 8}, 1),
    "p3": ("V100", {"8xlarge": 4, "16xlarge": 8}, 1),
    "p3dn": ("V100", {}, 8),
    "p4d": ("A100", {}, 8),
    "p4de": ("A100", {}, 8),
    "p5": ("H100", {}, 8),
    "p5e": ("H200", {}, 8),
    "p5en": ("H200", {}, 8),
}
_AWS = re.compile(r"^(?P<family>[a-z]+\d+[a-z]*)\.(?P<size>[a-z0-9]+)$")
_MODELS = ("H100", "H200", "A100", "A10", "L4", "T4", "V100", "B200", "B300")
# Azure: Standard_ND96isr_H100_v5 (8), Standard_NC24ads_A100_v4 (1); GCP: a3-highgpu-8g (H100 x8).
_AZURE_COUNT = {"ND96": 8, "ND40": 8, "NC96": 4, "NC48": 2, "NC24": 1, "NC12": 1, "NC6": 1}
_GCP = re.compile(r"^(?P<family>a2|a3|g2)-\w+-(?P<count>\d+)g$")
_GCP_MODELS = {"a2": "A100", "a3": "H100", "g2": "L4"}


@dataclass(frozen=True)
class GpuSpec:
    """The GPUs one instance type carries."""

    model: str
    count: int


def instance_gpus(instance_type: str) -> GpuSpec | None:
    """GPU model and count of an instance type, or None for a CPU (or unknown) type."""
    name = (instance_type or "").strip()
    if match := _AWS.match(name):
        entry = _AWS_GPUS.get(match["family"])
        if entry:
            model, sizes, default = entry
            return GpuSpec(model, sizes.get(match["size"], default))
        return None
    if match := _GCP.match(name):
        return GpuSpec(_GCP_MODELS[match["family"]], int(match["count"]))
    if name.startswith("Standard_N"):
        model = next((m for m in _MODELS if f"_{m}" in name or f"{m}_" in name), None)
        if model:
            prefix = re.match(r"Standard_(N[CD]\d+)", name)
            return GpuSpec(model, _AZURE_COUNT.get(prefix[1] if prefix else "", 1))
    return None


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


def is_gpu_instance(instance_type: str) -> bool:
    """True when the instance type carries GPUs we recognise."""
    return instance_gpus(instance_type) is not None


def worker_count(cluster: Cluster) -> int:
    """Workers billed beside the driver: 0 on a single node, else the recorded count (see module doc)."""
    if cluster.single_node:
        return 0
    return cluster.num_workers or (cluster.autoscale_min_workers or 0)


def cluster_gpus(cluster: Cluster) -> int:
    """GPUs the cluster holds while up: the driver's (when a GPU type) plus each worker's."""
    driver = instance_gpus(cluster.driver_node_type_id or cluster.node_type_id)
    worker = instance_gpus(cluster.node_type_id)
    return (driver.count if driver else 0) + worker_count(cluster) * (worker.count if worker else 0)


# Lifecycle event kinds that start and end a stretch of uptime.
_UP = {"STARTING", "RESTARTING", "CREATING", "RUNNING"}
_DOWN = {"TERMINATING", "TERMINATED"}


def uptime_intervals(cluster: Cluster, events: list[ClusterEvent], now: datetime) -> list[tuple[datetime, datetime]]:
    """Stretches of uptime, from lifecycle events, else from start_time to terminated_time.

    1. Walk the events in time order: the first "up" kind opens a stretch (later ones while
       open are ignored), the first "down" kind closes it.
    2. A stretch still open at the end runs to the cluster's terminated_time, or to `now`.
    3. No event opens a stretch: fall back to [start_time, terminated_time or now).
    """
    stretches: list[tuple[datetime, datetime]] = []
    opened: datetime | None = None
    for event in sorted(events, key=lambda e: e.ts):
        kind = event.kind.upper()
        if kind in _UP and opened is None:
            opened = event.ts
        elif kind in _DOWN and opened is not None:
            stretches.append((opened, event.ts))
            opened = None
    if opened is not None:
        stretches.append((opened, min(cluster.terminated_time or now, now)))
    if not stretches and cluster.start_time is not None:
        stretches.append((cluster.start_time, min(cluster.terminated_time or now, now)))
    return [(start, end) for start, end in stretches if end > start]


def _per_gpu(usd: Decimal, gpus: int) -> Decimal:
    """usd / gpus: exact when it can be (1, 2, 4, 8 GPUs always are), else half-even to 1e-12."""
    try:
        with localcontext(_EXACT):
            return usd / gpus
    except Inexact:
        with localcontext() as ctx:
            ctx.prec, ctx.rounding = 60, ROUND_HALF_EVEN
            return (usd / gpus).quantize(Decimal("1e-12"))


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

    @property
    def what_if_saving(self) -> Decimal | None:
        """Uptime cost less the what-if: positive means serverless would have cost less."""
        if self.what_if_cost is None:
            return None
        with localcontext(_EXACT):
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
        with localcontext(_EXACT):
            return self.compared_uptime_cost - self.what_if_cost


def cluster_costs(clusters: Iterable[Cluster], now: datetime | None = None) -> list[ClusterCost]:
    """Cost, busy/idle GPU-hours and what-if of each cluster, in a constant number of queries.

    1. One query for the lifecycle events of all clusters; uptime stretches per cluster.
    2. One query for instance prices (driver and worker types); uptime cost per stretch is
       `compute_cost` at the combined rate (driver + workers x worker).
    3. One query for the GPU-minutes of runs on these clusters; each minute inside a stretch
       is busy or idle; held GPU-hours less both is unknown.
    4. One query for serverless prices of the equivalent shapes; idle minutes are priced at
       the worker price per GPU in force, busy minutes at the serverless price in force.
    """
    clusters = list(clusters)
    as_of = _utc(now or timezone.now(), "now")
    events: dict[int, list[ClusterEvent]] = defaultdict(list)
    for event in ClusterEvent.objects.filter(cluster__in=clusters).only("cluster_id", "ts", "kind"):
        events[event.cluster_id].append(event)
    keys: set[tuple[str, str]] = set()
    for c in clusters:
        keys |= {(c.node_type_id, c.region), (c.driver_node_type_id or c.node_type_id, c.region)}
    prices = _instance_prices(keys)

    threshold = settings.AIRBOARD_IDLE_UTILIZATION_PERCENT
    minutes: dict[int, list[tuple[datetime, bool]]] = defaultdict(list)
    rows = GpuMinute.objects.filter(run__cluster__in=clusters, utilization_gpu_max__isnull=False)
    for cluster_id, minute, peak in rows.values_list("run__cluster_id", "minute", "utilization_gpu_max"):
        minutes[cluster_id].append((minute, peak < threshold))
    shapes = {c.pk: serverless_equivalent(c.node_type_id) for c in clusters}
    accel = _accelerator_prices({(s, c.region) for c in clusters if (s := shapes[c.pk]) and c.region})

    out = []
    for c in clusters:
        intervals = uptime_intervals(c, events[c.pk], as_of)
        shape = shapes[c.pk]
        out.append(_cluster_cost(c, intervals, prices, minutes[c.pk], shape, accel.get((shape, c.region), [])))
    return out


def _cluster_cost(
    cluster: Cluster,
    intervals: list[tuple[datetime, datetime]],
    prices: dict[tuple[str, str], list[PricePeriod]],
    minutes: list[tuple[datetime, bool]],
    shape: str | None,
    serverless: list[PricePeriod],
) -> ClusterCost:
    notes: list[str] = []
    driver_type = cluster.driver_node_type_id or cluster.node_type_id
    workers = worker_count(cluster)
    worker_prices = prices.get((cluster.node_type_id, cluster.region), [])
    rate = combined_rate(prices.get((driver_type, cluster.region), []), worker_prices, workers)
    lines = [line for start, end in intervals for line in compute_cost(start, end, 1, rate)]
    if any(line.unpriced for line in lines):
        notes.append(
            f"no instance price for {driver_type} driver + {workers} x {cluster.node_type_id} for part of the uptime"
        )
    uptime_hours = _exact_sum(billed_hours(start, end) for start, end in intervals)
    gpus = cluster_gpus(cluster)
    with localcontext(_EXACT):
        gpu_hours = uptime_hours * gpus

    # Count minutes inside the uptime, grouped by the price in force, then round hours once a group.
    idle_groups: dict[Decimal | None, int] = defaultdict(int)
    busy_groups: dict[Decimal | None, int] = defaultdict(int)
    worker_starts = [p.effective_from for p in worker_prices]
    serverless_starts = [p.effective_from for p in serverless]
    for minute, idle in minutes:
        if not any(start <= minute < end for start, end in intervals):
            continue
        if idle:
            price = _price_in_force(worker_prices, worker_starts, minute)
            idle_groups[price.usd_per_hour if price else None] += 1
        else:
            price = _price_in_force(serverless, serverless_starts, minute)
            busy_groups[price.usd_per_hour if price else None] += 1
    idle_gpu_hours = idle_hours(sum(idle_groups.values()))
    busy_gpu_hours = idle_hours(sum(busy_groups.values()))
    with localcontext(_EXACT):
        unknown = max(gpu_hours - idle_gpu_hours - busy_gpu_hours, ZERO)
    spec = instance_gpus(cluster.node_type_id)
    per_instance = spec.count if spec else 1
    idle_cost = _exact_sum(
        _per_gpu(idle_hours(n) * price, per_instance) for price, n in idle_groups.items() if price is not None
    )
    if idle_groups.get(None):
        notes.append("idle GPU-hours without an instance price are counted, not priced")

    what_if: Decimal | None = None
    if shape is None:
        notes.append("no serverless equivalent for " + (cluster.node_type_id or "this instance type"))
    else:
        with localcontext(_EXACT):
            what_if = _exact_sum(idle_hours(n) * price for price, n in busy_groups.items() if price is not None)
        if busy_groups.get(None):
            notes.append(f"no serverless {shape} price in {cluster.region or 'this region'} for part of the busy hours")
    return ClusterCost(
        cluster=cluster, intervals=intervals, uptime_hours=uptime_hours, gpus=gpus,
        uptime_cost=_exact_sum(line.usd for line in lines), gpu_hours=gpu_hours, busy_gpu_hours=busy_gpu_hours,
        idle_gpu_hours=idle_gpu_hours, unknown_gpu_hours=unknown, idle_cost=idle_cost, serverless_shape=shape,
        what_if_cost=what_if, notes=notes,
    )  # fmt: skip


def team_totals(costs: Iterable[ClusterCost]) -> list[TeamClusterCost]:
    """Per-team sums of cluster costs, by team name."""
    teams: dict[str, TeamClusterCost] = {}
    for cost in costs:
        row = teams.setdefault(cost.cluster.team.name, TeamClusterCost(cost.cluster.team.name))
        with localcontext(_EXACT):
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


# Access modes that dedicate a cluster to one user or group (old and new API names).
DEDICATED_MODES = {"SINGLE_USER", "DATA_SECURITY_MODE_DEDICATED", "DEDICATED"}
STANDARD_MODES = {"USER_ISOLATION", "DATA_SECURITY_MODE_STANDARD", "STANDARD"}


def access_mode(cluster: Cluster) -> str:
    """The access mode in words: dedicated (to whom), standard, or the raw mode."""
    mode = (cluster.data_security_mode or "").upper()
    if mode in DEDICATED_MODES:
        return f"dedicated to {cluster.single_user_name}" if cluster.single_user_name else "dedicated"
    if mode in STANDARD_MODES:
        return "standard (shared)"
    return mode.lower().replace("_", " ") if mode else "not set"


def is_photon(cluster: Cluster) -> bool:
    """Photon asked for, by the engine field or a '-photon-' runtime version."""
    return (cluster.runtime_engine or "").upper() == "PHOTON" or "photon" in (cluster.spark_version or "").lower()


def is_ml_runtime(cluster: Cluster) -> bool:
    """The cluster asks for the ML runtime ('15.4.x-gpu-ml-scala2.12', '14.3.x-cpu-ml-...')."""
    version = (cluster.spark_version or "").lower()
    return "-ml-" in version or "gpu-ml" in version


def runtime_version(cluster: Cluster) -> tuple[int, int] | None:
    """(major, minor) of the runtime version, or None when it does not parse."""
    match = re.match(r"^(\d+)\.(\d+)", cluster.spark_version or "")
    return (int(match[1]), int(match[2])) if match else None
