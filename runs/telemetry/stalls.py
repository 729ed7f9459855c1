"""Stalled and idle GPUs of running runs: busy-but-no-work (a hung collective) and GPUs with no process.

A rank stuck in an NCCL collective keeps its GPU "100% utilized" (NVML's utilization counts
any kernel resident, and the collective's spin kernel is one) while the SMs do nothing and the
power draw falls to near idle. So a GPU is *hung* at a sample when

    utilization_gpu >= BUSY_UTILIZATION and (sm_active < SM_IDLE or power < POWER_FRACTION x limit)

(sm_active only where the agent reports it, Hopper and newer; power only with a known limit).
A GPU with `processes == []` (reported, and empty) is billed to the run with nothing on it.

Either condition must hold on every sample of a GPU for at least MIN_STALL, up to its latest
sample, and that sample must be recent (the agent still reports): a stall that ended, or a GPU
that went silent, is not flagged. A stall longer than LOOKBACK is reported as "at least" LOOKBACK.

Ingest keeps where each GPU's streaks stand (runs/telemetry/streaks.py, one `GpuStreak` row a
GPU), so finding the stalls of many runs reads one row a GPU, never raw samples: the overview
costs the same with an hour of 1 Hz samples of 200 GPUs behind it as with none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from billing.engine import stall_costs
from runs.choices import RunStatus, StallKind
from runs.models import GpuStreak, Run
from runs.telemetry.labels import gpu_label
from runs.telemetry.streaks import BUSY_UTILIZATION, LOOKBACK, POWER_FRACTION, SM_IDLE, is_hung

__all__ = ["BUSY_UTILIZATION", "POWER_FRACTION", "SM_IDLE", "is_hung"]  # the signature lives with the streaks

MIN_STALL = timedelta(minutes=10)
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


def gpu_stalls(run: Run, now: datetime | None = None) -> list[GpuStall]:
    """The stalled GPUs of one run now, both kinds (see `stalls_of_runs`)."""
    return stalls_of_runs([run], now).get(run.pk, [])


def stalls_of_runs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, list[GpuStall]]:
    """The stalled GPUs of each run now, both kinds, in one query whatever the number of runs or samples.

    1. Read the runs' GPU streak rows (`GpuStreak`, kept by ingest) with their node's index.
    2. Skip a GPU whose latest sample is older than FRESH (the agent went silent).
    3. For each kind with an open streak: it starts no earlier than LOOKBACK before `now` (the
       window the panel speaks for) and is kept when it lasts MIN_STALL or more up to the
       latest sample.
    """
    now = now or timezone.now()
    rows = (
        GpuStreak.objects.filter(run_id__in=[run.pk for run in runs])
        .order_by("run_id", "node__index", "gpu_index")
        .values_list("run_id", "node__index", "gpu_index", "last_ts", "hung_since", "no_process_since")
    )
    found: dict[int, list[GpuStall]] = {}
    for run_id, node_index, gpu, last_ts, hung_since, no_process_since in rows:
        if now - last_ts > FRESH:
            continue
        for kind, since in ((StallKind.HUNG, hung_since), (StallKind.NO_PROCESS, no_process_since)):
            if since is None:
                continue
            since = max(since, now - LOOKBACK)
            if last_ts - since >= MIN_STALL:
                found.setdefault(run_id, []).append(GpuStall(kind, node_index, gpu, since, last_ts))
    return found


def run_stalls(runs: Iterable[Run], now: datetime | None = None) -> list[RunStalls]:
    """Stalls of each running run, grouped by kind and priced as the cost engine prices a GPU-hour
    (`billing.engine.stall_costs`: stalled GPU-hours x the run's GPU-hour price now, to the cent)."""
    now = now or timezone.now()
    running = [r for r in runs if r.status == RunStatus.RUNNING]
    stalls_by_run = stalls_of_runs(running, now)
    groups = []
    for run in running:
        stalls = stalls_by_run.get(run.pk, [])
        for kind in StallKind:
            gpus = tuple(g for g in stalls if g.kind == kind)
            if gpus:
                groups.append((run, kind, gpus))
    costs = stall_costs([(run, [(g.since, g.until) for g in gpus]) for run, _, gpus in groups], now)
    return [RunStalls(run, kind, gpus, cost) for (run, kind, gpus), cost in zip(groups, costs, strict=True)]
