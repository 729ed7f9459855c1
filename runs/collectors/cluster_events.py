"""Lifecycle events of a classic cluster, as `databricks clusters events CLUSTER_ID -o json` prints them.

The Clusters API (`POST /api/2.1/clusters/events`, https://docs.databricks.com/api/clusters/v2)
answers `{"events": [...], "next_page": {...}, "total_count": N}`; the CLI prints the events
list itself. Each event: `cluster_id`, `timestamp` (epoch milliseconds), `type` (CREATING,
STARTING, RESTARTING, RUNNING, RESIZING, UPSIZE_COMPLETED, TERMINATING, ...) and `details`
(`current_num_workers`, `target_num_workers`, `reason`, `user`...). They are what
`runs.models.uptime` reads a cluster's billable uptime and worker count from.

An event that is not of that shape is named with its position and skipped; the others are
stored. Storing is idempotent: an event is (cluster, timestamp, type), stored once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dashboard.kit.commands import CollectorError, run_json, split_command
from dashboard.kit.schemas import unstorable_json
from runs.models import Cluster, ClusterEvent
from runs.models.uptime import MAX_CLUSTER_WORKERS, plausible_workers

# Epoch milliseconds accepted: 2000-01-01 to 2100-01-01 (anything else is not a real event time).
MIN_MS, MAX_MS = 946_684_800_000, 4_102_444_800_000
MAX_EVENTS = 100_000
# Pages of one cluster's events read at most (the API answers up to 500 events a page).
MAX_PAGES = 200
WORKER_FIELDS = ("current_num_workers", "target_num_workers")


@dataclass
class EventsRead:
    """What a payload held: events to store, and each one refused with why."""

    events: list[tuple[datetime, str, dict[str, Any]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_events(payload: Any, cluster_id: str) -> EventsRead:
    """The events of `cluster_id` in a `clusters events` answer (the API's object or the CLI's list)."""
    out = EventsRead()
    if isinstance(payload, dict):
        payload = payload.get("events", [])
    if not isinstance(payload, list):
        out.problems.append("expected a list of events or an object with an 'events' list")
        return out
    if len(payload) > MAX_EVENTS:
        out.problems.append(f"{len(payload)} events in one answer; at most {MAX_EVENTS} are read")
        payload = payload[:MAX_EVENTS]
    for n, event in enumerate(payload, start=1):
        if not isinstance(event, dict):
            out.problems.append(f"event {n}: not an object")
            continue
        stamp, kind, details = event.get("timestamp"), event.get("type"), event.get("details")
        details = {} if details is None else details
        if event.get("cluster_id") not in (None, cluster_id):
            out.problems.append(f"event {n}: belongs to cluster {str(event['cluster_id'])[:100]!r}, not {cluster_id!r}")
        elif isinstance(stamp, bool) or not isinstance(stamp, int) or not MIN_MS <= stamp < MAX_MS:
            out.problems.append(f"event {n}: 'timestamp' must be epoch milliseconds, got {str(stamp)[:40]!r}")
        elif not isinstance(kind, str) or not kind.strip() or len(kind) > 64:
            out.problems.append(f"event {n}: 'type' must be an event type such as RUNNING, got {str(kind)[:40]!r}")
        elif not isinstance(details, dict):
            out.problems.append(f"event {n}: 'details' must be an object")
        elif why := unstorable_json(details):
            # PostgreSQL refuses NaN in jsonb, and with it every event of the same insert.
            out.problems.append(f"event {n}: 'details' {why}")
        elif bad := [k for k in WORKER_FIELDS if k in details and plausible_workers(details[k]) is None]:
            out.problems.append(
                f"event {n}: {bad[0]!r} must be a worker count from 0 to {MAX_CLUSTER_WORKERS:,}, "
                f"got {str(details[bad[0]])[:40]!r}"
            )
        else:
            out.events.append((datetime.fromtimestamp(stamp / 1000, tz=UTC), kind.strip().upper(), details))
    return out


def store_events(cluster: Cluster, events: list[tuple[datetime, str, dict[str, Any]]]) -> int:
    """Store the events (conflicts ignored: a re-read adds nothing); returns how many were new."""
    before = ClusterEvent.objects.filter(cluster=cluster).count()
    ClusterEvent.objects.bulk_create(
        [ClusterEvent(cluster=cluster, ts=ts, kind=kind, details=details) for ts, kind, details in events],
        ignore_conflicts=True,
        batch_size=1000,
    )
    if events:
        # The rollups re-price the cluster's runs on their next pass (`Cluster.updated_at`).
        cluster.save(update_fields=["updated_at"])
    return ClusterEvent.objects.filter(cluster=cluster).count() - before


def read_events(cluster_id: str, template: str, timeout: float) -> EventsRead:
    """Every page of a cluster's events: `next_page` followed until the answer names none.

    `databricks clusters events` follows the pages itself and prints a list. A command printing
    the API's object (`databricks api post /api/2.1/clusters/events --json {request}`, or a script
    around it) gets `{request}` filled with the request body: `{"cluster_id": ...}`, then each
    answer's `next_page` ("the parameters required to retrieve the next page of events"), for our
    cluster. A paged answer to a command without `{request}` is read as one page and says so.
    Loop guards: a `next_page` seen before stops the read, and so do MAX_PAGES pages or
    MAX_EVENTS events; each says so.
    """
    out = EventsRead()
    parts = split_command(template)
    request: dict[str, Any] = {"cluster_id": cluster_id}
    seen: set[str] = set()
    for page in range(1, MAX_PAGES + 1):
        body = json.dumps(request, sort_keys=True)
        argv = [arg.replace("{cluster_id}", cluster_id).replace("{request}", body) for arg in parts]
        payload = run_json(argv, timeout)
        read = parse_events(payload or [], cluster_id)
        out.events += read.events
        out.problems += [f"page {page}: {p}" if page > 1 else p for p in read.problems]
        next_page = payload.get("next_page") if isinstance(payload, dict) else None
        if not isinstance(next_page, dict) or not next_page:
            return out
        if not any("{request}" in part for part in parts):
            total = payload.get("total_count")
            of = f" of {total}" if isinstance(total, int) and not isinstance(total, bool) else ""
            out.problems.append(
                f"the command printed one page ({len(read.events)}{of} events) and names a next_page: only that"
                " page was read; put {request} in AIRBOARD_CLUSTER_EVENTS_COMMAND where the request body goes"
                " (`databricks api post /api/2.1/clusters/events --json {request}`), or use `databricks clusters"
                " events {cluster_id} -o json`, which follows the pages itself"
            )
            return out
        request = {**next_page, "cluster_id": cluster_id}
        key = json.dumps(request, sort_keys=True)
        if key in seen:
            out.problems.append(f"page {page}: next_page repeats an earlier page; stopped after {page} pages")
            return out
        seen.add(key)
        if len(out.events) >= MAX_EVENTS:
            out.problems.append(f"{len(out.events)} events in {page} pages; at most {MAX_EVENTS} are read")
            out.events = out.events[:MAX_EVENTS]
            return out
    out.problems.append(f"more than {MAX_PAGES} pages of events; the first {MAX_PAGES} were read")
    return out


def collect_events(
    clusters: Iterable[Cluster], template: str, timeout: float, skip: Callable[[str, str], None] | None = None
) -> list[str]:
    """Run the operator's events command for each cluster (`{cluster_id}` filled per argument,
    no shell; every page, `read_events`) and store what it prints; returns the collector's
    lines (one per problem).

    With `skip` (the pass's `CollectResult.skip`), each refused event is counted and named on
    the collectors page instead of only becoming a line."""
    lines: list[str] = []
    stored = 0
    for cluster in clusters:
        try:
            read = read_events(cluster.cluster_id, template, timeout)
        except CollectorError as exc:
            lines.append(f"cluster events {cluster.cluster_id}: {exc}")
            continue
        for problem in read.problems:
            if skip is None:
                lines.append(f"cluster events {cluster.cluster_id}: {problem}")
            else:
                skip(f"cluster {cluster.cluster_id} events", problem)
        stored += store_events(cluster, read.events)
    lines.append(f"cluster events: {stored} new")
    return lines
