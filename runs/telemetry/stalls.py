"""Stalled and idle GPUs of running runs: busy-but-no-work (a hung collective) and GPUs with no process.

A rank stuck in an NCCL collective keeps its GPU "100% utilized" (NVML's utilization counts
any kernel resident, and the collective's spin kernel is one) while the SMs do nothing and the
power draw falls to near idle. So a GPU is *hung* at a sample when

    utilization_gpu >= BUSY_UTILIZATION and (sm_active < SM_IDLE or power < POWER_FRACTION x limit)

(sm_active only where the agent reports it, Hopper and newer; power only with a known limit).
A GPU with `processes == []` (reported, and empty) is billed to the run with nothing on it.

Either condition must hold on every sample of a GPU for at least MIN_STALL, up to its latest
sample, and that sample must be recent (the agent still reports): a stall that ended, or a GPU
that went silent, is not flagged. Only the last LOOKBACK of raw samples is read, so a stall
longer than that is reported as "at least" LOOKBACK.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from billing.costs.run_costs import gpu_hour_prices
from billing.prices.money import billed_hours, exact_product, exact_sum, to_cents
from runs.choices import RunStatus, StallKind
from runs.models import Node, Run
from runs.telemetry import blocks
from runs.telemetry.labels import gpu_label

BUSY_UTILIZATION = 90.0
SM_IDLE = 10.0
POWER_FRACTION = 0.30
MIN_STALL = timedelta(minutes=10)
# Raw samples read per run: enough to see a 10-minute stall and say how long it has lasted.
LOOKBACK = timedelta(hours=1)
# The latest sample must be at most this old for the GPU to count as still stalled.
FRESH = timedelta(minutes=5)


@dataclass(frozen=True)
class GpuStall:
    """One GPU of a running run stalled since `since` (up to its latest sample at `until`)."""

    kind: str
    node_index: int
    gpu_index: int
    since: datetime
    until: datetime

    @property
    def minutes(self) -> float:
        return (self.until - self.since).total_seconds() / 60

    @property
    def label(self) -> str:
        """`GPU 3`, or `GPU 0 MIG 7` for a MIG instance stored as a GPU of its own."""
        return gpu_label(self.gpu_index)


@dataclass(frozen=True)
class RunStalls:
    """A run's stalled GPUs of one kind, how long, and what they have cost so far."""

    run: Run
    kind: str
    gpus: tuple[GpuStall, ...]
    cost: Decimal | None  # None when the accelerator has no price

    @property
    def label(self) -> str:
        return StallKind(self.kind).label

    @property
    def since(self) -> datetime:
        return min(g.since for g in self.gpus)

    @property
    def minutes(self) -> float:
        return max(g.minutes for g in self.gpus)

    @property
    def gpu_minutes(self) -> float:
        return sum(g.minutes for g in self.gpus)

    @property
    def capped(self) -> bool:
        """True when the stall reaches back to the start of the window read (it may be longer)."""
        return self.minutes >= LOOKBACK.total_seconds() / 60 - 1


def is_hung(utilization: float | None, sm_active: float | None, power: float | None, limit: float | None) -> bool:
    """The hung-collective signature at one sample (see the module docstring)."""
    if utilization is None or utilization < BUSY_UTILIZATION:
        return False
    if sm_active is not None and sm_active < SM_IDLE:
        return True
    return power is not None and bool(limit) and power < POWER_FRACTION * limit


def _trailing_streak(samples: list[tuple[datetime, bool]]) -> tuple[datetime, datetime] | None:
    """(first, last) time of the run of True samples that ends at the latest sample, or None."""
    if not samples or not samples[-1][1]:
        return None
    start = samples[-1][0]
    for ts, flagged in reversed(samples):
        if not flagged:
            break
        start = ts
    return start, samples[-1][0]


STALL_FIELDS = ["utilization_gpu", "sm_active", "power_watts", "power_limit_watts", "processes"]


def gpu_stalls(run: Run, now: datetime | None = None) -> list[GpuStall]:
    """The stalled GPUs of one run now, both kinds (see `stalls_of_runs`)."""
    return stalls_of_runs([run], now).get(run.pk, [])


def stalls_of_runs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, list[GpuStall]]:
    """The stalled GPUs of each run now, both kinds, in three queries whatever the number of runs.

    1. Read the runs' raw samples of the last LOOKBACK, both parts of the raw tier
       (runs/telemetry/blocks.py: the last hour is mostly compacted minutes), per (node, GPU) in time order.
    2. Per GPU, mark each sample hung (the signature) and process-less (processes == []).
    3. For each kind, the trailing streak up to the latest sample; keep it when that sample
       is FRESH and the streak lasts MIN_STALL or more.
    """
    now = now or timezone.now()
    by_run = blocks.raw_rows_of_runs([run.pk for run in runs], now - LOOKBACK, now, STALL_FIELDS)
    node_ids = {row[0] for rows in by_run.values() for row in rows}
    node_indexes = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "index")) if node_ids else {}
    found: dict[int, list[GpuStall]] = {}
    for run_id, rows in by_run.items():
        per_gpu: dict[tuple[int, int, int], list[tuple]] = {}
        for node_id, gpu, ts, *values in rows:
            per_gpu.setdefault((node_id, node_indexes[node_id], gpu), []).append((ts, *values))
        for (_, node_index, gpu), samples in per_gpu.items():
            if now - samples[-1][0] > FRESH:
                continue
            checks = {
                StallKind.HUNG: [(s[0], is_hung(s[1], s[2], s[3], s[4])) for s in samples],
                StallKind.NO_PROCESS: [(s[0], s[5] == []) for s in samples],
            }
            for kind, marks in checks.items():
                streak = _trailing_streak(marks)
                if streak and streak[1] - streak[0] >= MIN_STALL:
                    found.setdefault(run_id, []).append(GpuStall(kind, node_index, gpu, streak[0], streak[1]))
    return found


def run_stalls(runs: Iterable[Run], now: datetime | None = None) -> list[RunStalls]:
    """Stalls of each running run, grouped by kind and priced as the cost engine prices a GPU-hour.

    Cost so far = stalled GPU-hours (exact, `billing.prices.money.billed_hours`) x the price of one
    GPU-hour of the run in force now (`billing.costs.run_costs.gpu_hour_prices`: the accelerator-hour
    price of a serverless run, the worker instance price per GPU of a classic one), to the cent.
    """
    now = now or timezone.now()
    running = [r for r in runs if r.status == RunStatus.RUNNING]
    prices = gpu_hour_prices(running, now) if running else {}
    result = []
    stalls_by_run = stalls_of_runs(running, now)
    for run in running:
        stalls = stalls_by_run.get(run.pk, [])
        price = prices[run.pk].at(now)
        for kind in StallKind:
            gpus = tuple(g for g in stalls if g.kind == kind)
            if not gpus:
                continue
            hours = exact_sum(billed_hours(g.since, g.until) for g in gpus)
            cost = None if price is None else to_cents(exact_product(hours, price))
            result.append(RunStalls(run, kind, gpus, cost))
    return result
