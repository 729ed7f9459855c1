"""Server side of the GPU node agent: one `runs.ingest_agent_batch` payload in, GpuSamples and RunEvents out.

The payload (built by `agent.main.Agent.payload`, JSON through the broker):

    {"version": 1, "key": "ab_…", "host": "gpu-node-17", "node": 0, "attempt": null,
     "sent_at": "2026-11-02T09:00:10+00:00", "dropped_samples": 0,
     "samples": [{"run": "run-1", "run_source": "serverless", "gpu": 0, "gpu_uuid": "GPU-…",
                  "ts": "2026-11-02T09:00:01+00:00", "utilization_gpu": 97.0, …every
                  ingest.SAMPLE_VALUE_COLUMNS name…, "processes": [{"pid": 4242,
                  "used_memory_bytes": 123, "run": "run-1"}]}],
     "events": [{"kind": "gpu_lost" | "xid", "run": "run-1", "run_source": "serverless",
                 "gpu": 3, "gpu_uuid": "GPU-…", "ts": "…", "message": "…", "details": {"xid": 79}}]}

The broker is not a credential: anything that reaches it (a compromised node, a shared Redis)
could name any run. `key` is the node's API key (ingest role, `create_api_key --team T --role
ingest --name gpu-node-17`, given to the agent as AIRBOARD_AGENT_KEY): a payload without a
valid one is refused whole, and rows or events naming a run outside the key's team are
refused one by one. Both are counted on the collectors page (CollectorState "agent",
`refused_total`) and logged without the key.

Rows are checked with the API's own schema (`GpuSampleIn`: ranges, finite numbers, a known
run). A bad row is dropped and counted, never a crash: the agent cannot fix it, and a retry
would only fail again. The batch goes through the same `record_batch` as the API, so a batch
the agent re-sends from its disk buffer hashes the same and is a no-op.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from dashboard.models import ApiKey
from dashboard.schemas import aware
from runs import ingest
from runs.choices import BatchKind, CollectorKind, RunEventKind, RunSource, TelemetrySource
from runs.collectors.state import state_for
from runs.models import CollectorState, IngestBatch, Node, Run, RunEvent
from runs.schemas import GpuSampleIn

logger = logging.getLogger(__name__)

PAYLOAD_VERSION = 1
EVENT_KINDS = {RunEventKind.GPU_LOST, RunEventKind.XID}
MAX_MESSAGE = 2000


@dataclass
class AgentIngestResult:
    """What one payload became."""

    batches: list[IngestBatch] = field(default_factory=list)
    duplicates: int = 0
    rows: int = 0
    dropped_rows: int = 0
    events: int = 0
    dropped_events: int = 0
    # Rows and events naming another team's run, or the whole payload without a valid key.
    refused: int = 0
    problems: list[str] = field(default_factory=list)


def ingest_agent_batch(payload: dict[str, Any]) -> IngestBatch | None:
    """Store one agent payload; returns its (first) recorded batch, or None when no row was usable."""
    result = ingest_agent_payload(payload)
    return result.batches[0] if result.batches else None


def ingest_agent_payload(payload: Any) -> AgentIngestResult:
    """Validate, resolve runs, record one batch per team, write it, and store events.

    1. Check the envelope (version, node, attempt, host); a bad envelope drops everything.
    2. Validate each sample with the API's schema; drop bad rows and rows of unknown runs.
    3. Group rows by the run's team, `record_batch` each group (content-hash dedupe) and
       `process_batch` it here: this already runs in a worker.
    4. Store gpu_lost / xid events, skipping ones already stored (`runevent_natural_key`).
    """
    result = AgentIngestResult()
    envelope = _envelope(payload, result)
    if envelope is None:
        logger.warning("agent batch rejected: %s", "; ".join(result.problems))
        return result
    key = ApiKey.authenticate(payload["key"]) if isinstance(payload.get("key"), str) else None
    if key is None or not key.can_write:
        samples, events = payload.get("samples"), payload.get("events")
        refused = sum(len(part) for part in (samples, events) if isinstance(part, list))
        _count_refusals(refused, "a payload without a valid ingest key")
        result.refused = refused
        result.problems.append("no valid ingest key: payload refused")
        logger.warning("agent batch from %s refused: no valid ingest key", str(payload.get("host"))[:255])
        return result
    node_index, attempt, host = envelope
    samples = payload.get("samples") or []
    events = payload.get("events") or []
    if not isinstance(samples, list) or not isinstance(events, list):
        result.problems.append("samples and events must be lists")
        return result

    valid = _validated_samples(samples, node_index, attempt, host, result)
    refs = {(s.run_source, s.run) for s in valid} | _event_refs(events)
    runs = _runs(key.team, refs)
    # Another team's run is refused (and counted); a run nobody has yet is only dropped, as before.
    refused_refs = refs - runs.keys() - _unknown(refs)
    horizon = timezone.now() + timedelta(seconds=settings.AIRBOARD_MAX_FUTURE_SKEW_SECONDS)
    nodes: dict[int, Node] = {}
    by_team: dict[int, tuple[Group, list[list[Any]]]] = {}
    with transaction.atomic():
        for s in valid:
            run = runs.get((s.run_source, s.run))
            if (s.run_source, s.run) in refused_refs:
                result.refused += 1
                result.problems.append(f"sample of {s.run!r}: not a run of the key's team")
                continue
            if run is None or s.ts > horizon:
                result.dropped_rows += 1
                result.problems.append(
                    f"sample of {s.run!r}: " + ("unknown run" if run is None else "ts in the future")
                )
                continue
            node = _node(nodes, run, attempt, node_index, host)
            values = s.model_dump(include=set(ingest.SAMPLE_VALUE_COLUMNS))
            row = [run.pk, node.pk, s.gpu, s.ts.isoformat(), *map(values.get, ingest.SAMPLE_VALUE_COLUMNS)]
            by_team.setdefault(run.team_id, (run.team, []))[1].append(row)
        for team, rows in by_team.values():
            batch, duplicate = ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows, TelemetrySource.NVML)
            result.batches.append(batch)
            result.rows += len(rows)
            result.duplicates += int(duplicate)
        _store_events(events, runs, nodes, attempt, node_index, host, horizon, result, refused_refs)
        if result.refused:
            _count_refusals(result.refused, f"run(s) outside team {key.team.name}")
    # After the commit: a worker that dies here leaves the batch pending for the sweeper.
    for batch in result.batches:
        ingest.process_batch(batch.pk)

    reported = payload.get("dropped_samples")
    if isinstance(reported, int) and reported > 0:
        logger.warning("agent %s node %s dropped %d sample(s) while the broker was away", host, node_index, reported)
    if result.dropped_rows or result.dropped_events:
        logger.warning("agent batch from %s: %d row(s), %d event(s) dropped; first problems: %s", host,
                       result.dropped_rows, result.dropped_events, "; ".join(result.problems[:5]))  # fmt: skip
    return result


def _envelope(payload: Any, result: AgentIngestResult) -> tuple[int, int | None, str] | None:
    if not isinstance(payload, dict):
        result.problems.append("payload is not an object")
        return None
    if payload.get("version") != PAYLOAD_VERSION:
        result.problems.append(f"unknown payload version {payload.get('version')!r}")
        return None
    node, attempt, host = payload.get("node", 0), payload.get("attempt"), payload.get("host") or ""
    if not _int_in(node, 0, 4096):
        result.problems.append(f"bad node {node!r}")
        return None
    if attempt is not None and not _int_in(attempt, 1, 1000):
        result.problems.append(f"bad attempt {attempt!r}")
        return None
    if not isinstance(host, str) or len(host) > 255:
        result.problems.append("bad host")
        return None
    return node, attempt, host


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _validated_samples(
    samples: list[Any], node: int, attempt: int | None, host: str, result: AgentIngestResult
) -> list[GpuSampleIn]:
    valid = []
    for i, raw in enumerate(samples):
        if not isinstance(raw, dict):
            result.dropped_rows += 1
            result.problems.append(f"samples[{i}] is not an object")
            continue
        try:
            # The envelope's node, attempt and host win over anything in the row.
            # A row naming no run source names a serverless run, as the agent's --run-source default.
            row = {"run_source": RunSource.SERVERLESS, **raw, "node": node, "attempt": attempt, "host": host}
            valid.append(GpuSampleIn.model_validate(row))
        except ValidationError as exc:
            result.dropped_rows += 1
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            result.problems.append(f"samples[{i}].{where}: {first['msg']}")
    return valid


def _event_refs(events: list[Any]) -> set[tuple[str, str]]:
    return {
        (str(e.get("run_source") or RunSource.SERVERLESS), str(e.get("run")))
        for e in events
        if isinstance(e, dict) and e.get("run")
    }


def _runs(team: Group, refs: set[tuple[str, str]]) -> dict[tuple[str, str], Run]:
    """The key's team's runs among `refs`, by (source, external id): unique within a team."""
    external_ids = {ext for _, ext in refs}
    found = Run.objects.filter(team=team, external_id__in=external_ids).select_related("team")
    return {(r.source, r.external_id): r for r in found if (r.source, r.external_id) in refs}


def _unknown(refs: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Refs that name no run of any team (an agent may report before the run source sees the run)."""
    external_ids = {ext for _, ext in refs}
    known = set(Run.objects.filter(external_id__in=external_ids).values_list("source", "external_id"))
    return {ref for ref in refs if ref not in known}


def _count_refusals(count: int, why: str) -> None:
    """Add `count` to the agent's refusals on the collectors page, with the latest reason."""
    if count <= 0:
        return
    state = state_for("agent", CollectorKind.AGENT)
    CollectorState.objects.filter(pk=state.pk).update(
        refused_total=F("refused_total") + count, last_refusal=f"{count} refused: {why}"[:500],
        last_refusal_at=timezone.now(),
    )  # fmt: skip


def _node(nodes: dict[int, Node], run: Run, attempt: int | None, node_index: int, host: str) -> Node:
    if run.pk not in nodes:
        nodes[run.pk] = ingest.node_for(run, attempt, node_index, host)
    return nodes[run.pk]


def _store_events(
    events: list[Any],
    runs: dict[tuple[str, str], Run],
    nodes: dict[int, Node],
    attempt: int | None,
    node_index: int,
    host: str,
    horizon: datetime,
    result: AgentIngestResult,
    refused_refs: set[tuple[str, str]],
) -> None:
    objects = []
    for i, raw in enumerate(events):
        if isinstance(raw, dict) and (str(raw.get("run_source") or RunSource.SERVERLESS), str(raw.get("run"))) in (
            refused_refs
        ):
            result.refused += 1
            result.problems.append(f"events[{i}]: not a run of the key's team")
            continue
        event = _event(raw, runs, horizon)
        if isinstance(event, str):
            result.dropped_events += 1
            result.problems.append(f"events[{i}]: {event}")
            continue
        run, kind, ts, gpu, message, details = event
        node = _node(nodes, run, attempt, node_index, host)
        objects.append(RunEvent(run=run, node=node, gpu_index=gpu, ts=ts, kind=kind, message=message, details=details))
    # A re-sent event conflicts on (run, kind, ts, gpu_index) and is skipped.
    RunEvent.objects.bulk_create(objects, ignore_conflicts=True)
    result.events += len(objects)


def _event(
    raw: Any, runs: dict[tuple[str, str], Run], horizon: datetime
) -> tuple[Run, str, datetime, int | None, str, dict[str, Any]] | str:
    """A checked event, or the reason it is dropped."""
    if not isinstance(raw, dict):
        return "not an object"
    kind = raw.get("kind")
    if kind not in EVENT_KINDS:
        return f"unknown kind {kind!r}"
    run = runs.get((str(raw.get("run_source") or RunSource.SERVERLESS), str(raw.get("run"))))
    if run is None:
        return f"unknown run {raw.get('run')!r}"
    try:
        ts = aware(datetime.fromisoformat(str(raw.get("ts"))))
    except ValueError:
        return f"bad ts {raw.get('ts')!r}"
    if ts > horizon:
        return "ts in the future"
    gpu = raw.get("gpu")
    if gpu is not None and not _int_in(gpu, 0, 255):
        return f"bad gpu {gpu!r}"
    details = raw.get("details") if isinstance(raw.get("details"), dict) else {}
    if raw.get("gpu_uuid"):
        details = {**details, "gpu_uuid": str(raw["gpu_uuid"])[:100]}
    return run, kind, ts, gpu, str(raw.get("message") or "")[:MAX_MESSAGE], details
