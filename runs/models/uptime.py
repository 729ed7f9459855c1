"""A classic cluster's billable uptime and worker count: the one rule (issue 16).

Classic clusters are billed by uptime, driver + workers, busy or idle (docs/costs.md, "The money rule"). This module
answers *when* a cluster was up and *how many workers* it had, from the cluster's lifecycle
events (the Clusters API's `POST /api/2.1/clusters/events`, `databricks clusters events`:
https://docs.databricks.com/api/clusters/v2). The clusters page, run costs, rollups and advice
all read it through `billing.costs.uptime.cluster_uptime`; nothing else decides uptime.

Stretches:
1. Walk the events in time order. An up kind (CREATING, STARTING, RESTARTING, RUNNING, and
   RESIZING / UPSIZE_COMPLETED, which only happen on a live cluster) opens a stretch when none
   is open; TERMINATING or TERMINATED closes it. A RESTARTING while up keeps it open: the
   nodes are replaced, the bill goes on.
2. The cluster's `start_time` is never a start: the API documents it as "the time when the
   cluster creation request was received", so a cluster created in January and restarted in
   April was not up in between. Events our run source derived from it are skipped.
3. The current stretch, when no event covers it, starts at `last_restarted_time` ("the time
   when the cluster was started/restarted") and runs to `terminated_time` or now.
4. With neither, the uptime is not known; the caller bills the runs' own attempts instead and
   says so (`UptimePiece.from_attempts`).

Workers: from the last event at or before each instant whose `details` carry
`current_num_workers` (RESIZING, UPSIZE_COMPLETED, NODES_LOST, RUNNING...); before any, a
fixed-size cluster has its `num_workers` and an autoscaling one the minimum of its range,
marked `estimated`. A single-node cluster has no workers.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from runs.models import Cluster, ClusterEvent

UP_KINDS = frozenset({"CREATING", "STARTING", "RESTARTING", "RUNNING", "RESIZING", "UPSIZE_COMPLETED"})
DOWN_KINDS = frozenset({"TERMINATING", "TERMINATED"})
# Workers an event may report. No cluster comes near it; 10^30 (an event the collector once
# stored) made the cost engine's exact arithmetic overflow and stopped every team's rollup.
MAX_CLUSTER_WORKERS = 100_000
# Fields of a cluster record that are not an instant the cluster came up.
NOT_A_START = frozenset({"start_time"})


@dataclass(frozen=True)
class UptimePiece:
    """A stretch (or part of one) of uptime with one worker count.

    `estimated` when the worker count is the autoscale minimum rather than a reported count;
    `from_attempts` when the cluster's uptime is unknown and the piece is a run's attempt.
    """

    start: datetime
    end: datetime
    workers: int
    estimated: bool = False
    from_attempts: bool = False


def plausible_workers(value: object) -> int | None:
    """A worker count an event may report: an int from 0 to MAX_CLUSTER_WORKERS, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CLUSTER_WORKERS:
        return None
    return value


def _reported_workers(event: ClusterEvent) -> int | None:
    details = event.details if isinstance(event.details, dict) else {}
    return plausible_workers(details.get("current_num_workers"))


def default_workers(cluster: Cluster) -> tuple[int, bool]:
    """Workers before any event reports a count, and whether that is an estimate (module doc)."""
    if cluster.single_node:
        return 0, False
    if cluster.autoscale_min_workers is not None or cluster.autoscale_max_workers is not None:
        return cluster.autoscale_min_workers or 0, True
    return cluster.num_workers, False


def _derived_from_start_time(event: ClusterEvent) -> bool:
    details = event.details if isinstance(event.details, dict) else {}
    return details.get("derived_from") in NOT_A_START


def stretches(cluster: Cluster, events: Iterable[ClusterEvent], now: datetime) -> list[tuple[datetime, datetime]]:
    """Stretches of uptime [start, end), clipped to `now` (module doc, steps 1-3)."""
    out: list[tuple[datetime, datetime]] = []
    opened: datetime | None = None
    for event in sorted(events, key=lambda e: e.ts):
        kind = event.kind.upper()
        if _derived_from_start_time(event):
            continue
        if kind in UP_KINDS and opened is None:
            opened = event.ts
        elif kind in DOWN_KINDS and opened is not None:
            out.append((opened, event.ts))
            opened = None
    if opened is not None:
        # Still up at the last event: until the cluster's recorded termination, else now.
        terminated = cluster.terminated_time
        out.append((opened, terminated if terminated is not None and terminated > opened else now))
    restarted = cluster.last_restarted_time
    if restarted is not None and restarted < now and not any(a <= restarted < b for a, b in out):
        end = cluster.terminated_time if cluster.terminated_time and cluster.terminated_time > restarted else now
        out.append((restarted, min(end, now)))
    out = [(min(a, now), min(b, now)) for a, b in sorted(out)]
    merged: list[tuple[datetime, datetime]] = []
    for a, b in out:
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def uptime_pieces(
    cluster: Cluster,
    events: Sequence[ClusterEvent],
    now: datetime,
    attempts: Iterable[tuple[datetime, datetime]] = (),
) -> list[UptimePiece]:
    """The cluster's uptime cut where its worker count changes (module doc).

    With no stretch known from events or `last_restarted_time`, the runs' `attempts` stand in
    for the uptime (their union, `from_attempts`): a lower bound of what the cluster cost.
    """
    default, estimated = default_workers(cluster)
    spans = stretches(cluster, events, now)
    from_attempts = False
    if not spans:
        from_attempts = True
        for a, b in sorted((a, min(b, now)) for a, b in attempts):
            if b <= a:
                continue
            if spans and a <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(b, spans[-1][1]))
            else:
                spans.append((a, b))
    changes = sorted(
        (event.ts, count)
        for event in events
        if not _derived_from_start_time(event) and (count := _reported_workers(event)) is not None
    )
    times = [ts for ts, _ in changes]
    pieces: list[UptimePiece] = []
    for start, end in spans:
        # The count in force at the stretch's start: the last report at or before it, else the default.
        first = bisect_right(times, start)
        workers, guess = (changes[first - 1][1], False) if first else (default, estimated)
        cut = start
        # Reports strictly inside the stretch, found by bisection: linear in what is read.
        for ts, count in changes[first : bisect_left(times, end)]:
            if count != workers or guess:
                # A new count, or the first report after an estimate: the estimate ends here.
                pieces.append(UptimePiece(cut, ts, workers, guess, from_attempts))
                cut, workers, guess = ts, count, False
        pieces.append(UptimePiece(cut, end, workers, guess, from_attempts))
    return pieces


def worker_note(cluster: Cluster, pieces: Sequence[UptimePiece]) -> str:
    """What the page says about the worker count, e.g. 'workers estimated at the autoscale minimum (1)'."""
    if cluster.single_node:
        return "single node: driver only"
    if any(p.estimated for p in pieces):
        return (
            f"workers estimated at the autoscale minimum ({cluster.autoscale_min_workers or 0}) where no resize "
            "event reports a count"
        )
    counts = sorted({p.workers for p in pieces})
    if len(counts) > 1:
        return f"{counts[0]} to {counts[-1]} workers, from resize events"
    return f"{counts[0] if counts else cluster.num_workers} workers"
