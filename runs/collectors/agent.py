"""The GPU node agent's door: `POST /api/v1/gpu-samples?bad_rows=drop`, the API's drop-and-count option.

The node agent posts its batches to the HTTP API with its node's ingest key, like any pusher;
it holds no broker credentials. What it needs that the plain push lacks is this option:

- **Drop and count** (`bad_rows=drop`): a plain push is refused whole (422) when one row is
  bad, which suits a client that can fix its rows. An agent cannot, and a retry would fail
  again, so with this option each row is checked on its own with the API's own schema
  (`GpuSampleIn`) and the API's own resolver (`resolve_runs`, the key's team only): a bad row,
  a row naming a run the key's team does not have, or one too far in the future is dropped,
  counted, and named in `problems`; the good rows are recorded and queued as one batch (202,
  or 200 for a batch seen before), exactly as a plain push's.
- **Events** (`events`, with either mode): `gpu_lost` and `xid` events
  (`RunEventIn`), stored at once; a re-sent event is skipped (`runevent_natural_key`).
- `dropped_samples`: what the agent's disk buffer had to drop during an outage, logged.

The body is otherwise GpuSampleBatchIn's: `{"source": "nvml", "samples": [...], "events":
[...], "dropped_samples": 0}`. The answer is `GpuSamplesDroppedOut`: the batch (None when no
row was usable), counts, and the first problems. A body that is not that object at all is a
422; more than AIRBOARD_MAX_SAMPLES_PER_BATCH samples (or MAX_EVENTS events) a 413. Drops are
also counted on the collectors page (CollectorState "agent", `refused_total`).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja import Status
from ninja.errors import HttpError
from pydantic import ValidationError

from dashboard.api import fair_ingest
from dashboard.api.core import Access, InvalidRows, check_count, own_source, resolve_runs
from runs import ingest
from runs.choices import BatchKind, CollectorKind, TelemetrySource
from runs.collectors.state import count_refusals, state_for
from runs.models import IngestBatch, Node, Run, RunEvent
from runs.schemas import GpuSampleIn, RunEventIn

logger = logging.getLogger(__name__)

# Events one request may carry: an agent sends a handful (a GPU lost, an XID), never thousands.
MAX_EVENTS = 1000
# Problems named in one answer; the rest are only counted.
MAX_PROBLEMS = 50
BAD_ROWS = ("refuse", "drop")


def push_dropping(request: HttpRequest) -> Status:
    """Record the usable rows of a push as one batch and store its events; count and name the rest."""
    team = Access(request).require_write()
    body = _body(request.body)
    samples, events = body.get("samples") or [], body.get("events") or []
    check_count(samples, "samples")
    if len(events) > MAX_EVENTS:
        raise HttpError(413, f"{len(events)} events in one request; the limit is {MAX_EVENTS}.")
    problems: list[str] = []
    valid = _valid_rows(samples, GpuSampleIn, "samples", problems)
    good_events = _valid_rows(events, RunEventIn, "events", problems)
    # A row naming no run source names a run of the key's own source, as the API's other pushes.
    named = [row for _, row in [*valid, *good_events]]
    own_source(request, named, [(row.run_source, row.run, row.ts) for row in named])
    # The limits of the strict door hold here too: nodes per request, rows per key a minute.
    fair_ingest.check_nodes(len({(r.run_source, r.run, r.attempt, r.node) for r in named}))
    fair_ingest.charge_rows(request, len(samples), "samples")
    runs = resolve_runs(request, {(row.run_source, row.run) for row in named})
    horizon = timezone.now() + timedelta(seconds=settings.AIRBOARD_MAX_FUTURE_SKEW_SECONDS)
    nodes: dict[tuple[int, int | None, int], Node] = {}
    rows: list[list[Any]] = []
    batch: IngestBatch | None = None
    duplicate = False
    with transaction.atomic():
        for i, s in valid:
            run = _checked_run(runs, s, horizon, f"samples[{i}]", problems)
            if run is not None:
                node = _node(nodes, run, s.attempt, s.node, s.host)
                values = s.model_dump(include=set(ingest.SAMPLE_VALUE_COLUMNS))
                rows.append([run.pk, node.pk, s.gpu, s.ts.isoformat(), *map(values.get, ingest.SAMPLE_VALUE_COLUMNS)])
        if rows:
            batch, duplicate = ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows, body.get("source") or "")
            if not duplicate:
                ingest.enqueue_batch(batch)
        stored_events = []
        for i, e in good_events:
            run = _checked_run(runs, e, horizon, f"events[{i}]", problems)
            if run is not None:
                node = _node(nodes, run, e.attempt, e.node, e.host)
                details = {**e.details, "gpu_uuid": e.gpu_uuid} if e.gpu_uuid else e.details
                stored_events.append(RunEvent(run=run, node=node, gpu_index=e.gpu, ts=e.ts, kind=e.kind,
                                              message=e.message, details=details))  # fmt: skip
        # A re-sent event conflicts on (run, kind, ts, gpu_index) and is skipped.
        RunEvent.objects.bulk_create(stored_events, ignore_conflicts=True)
    dropped_rows, dropped_events = len(samples) - len(rows), len(events) - len(stored_events)
    _report(team, body, dropped_rows + dropped_events, problems)
    out = {
        "batch": batch.answer(duplicate) if batch is not None else None, "rows": len(rows),
        "dropped_rows": dropped_rows, "events": len(stored_events), "dropped_events": dropped_events,
        "problems": problems[:MAX_PROBLEMS],
    }  # fmt: skip
    return Status(202 if batch is not None and not duplicate else 200, out)


def _body(raw: bytes) -> dict[str, Any]:
    """The push's envelope, or a 422 naming what is wrong with it (the rows are checked one by one later)."""
    try:
        # Python's reader, not orjson: a NaN or Infinity is then one row's problem, not the body's.
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRows([{"field": "body", "message": f"not JSON: {str(exc)[:200]}"}]) from None
    if not isinstance(body, dict):
        raise InvalidRows([{"field": "body", "message": "must be an object with `samples` and/or `events`"}])
    errors = [
        {"field": name, "message": "must be a list"}
        for name in ("samples", "events")
        if body.get(name) is not None and not isinstance(body[name], list)
    ]
    source = body.get("source")
    if source is not None and source not in TelemetrySource.values:
        errors.append({"field": "source", "message": f"must be one of {', '.join(TelemetrySource.values)}"})
    if not body.get("samples") and not body.get("events"):
        errors.append({"field": "samples", "message": "no samples and no events: nothing to store"})
    if errors:
        raise InvalidRows(errors)
    return body


def _valid_rows(raw: list[Any], schema: Any, what: str, problems: list[str]) -> list[tuple[int, Any]]:
    """(index, model) of each row the schema accepts; a problem named for each it refuses."""
    valid = []
    for i, item in enumerate(raw):
        try:
            valid.append((i, schema.model_validate(item)))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            problems.append(f"{what}[{i}]{'.' + where if where else ''}: {first['msg']}")
    return valid


def _checked_run(
    runs: dict[tuple[str | None, str], Run], row: Any, horizon: datetime, where: str, problems: list[str]
) -> Run | None:
    """The row's run, or None with a problem named: not the key's team's (or no such run), or too far ahead."""
    run = runs.get((row.run_source, row.run))
    if run is None:
        problems.append(f"{where}.run: no run {row.run!r} ({row.run_source}) in your team")
    elif row.ts > horizon:
        problems.append(f"{where}.ts: is more than the allowed skew in the future")
        return None
    return run


def _node(nodes: dict[tuple[int, int | None, int], Node], run: Run, attempt: int | None, index: int, host: str) -> Node:
    key = (run.pk, attempt, index)
    if key not in nodes:
        nodes[key] = ingest.node_for(run, attempt, index, host)
    return nodes[key]


def _report(team: Group, body: dict[str, Any], dropped: int, problems: list[str]) -> None:
    """Drops on the collectors page and in the log; the agent's own buffer drops in the log."""
    buffered_away = body.get("dropped_samples")
    if isinstance(buffered_away, int) and buffered_away > 0:
        logger.warning("an agent of team %s dropped %d sample(s) while the site was away", team.name, buffered_away)
    if dropped:
        count_refusals(state_for("agent", CollectorKind.AGENT), dropped, f"team {team.name}: {'; '.join(problems[:3])}")
        logger.warning("agent push of team %s: %d row(s) or event(s) dropped; first: %s", team.name, dropped,
                       "; ".join(problems[:5]))  # fmt: skip
