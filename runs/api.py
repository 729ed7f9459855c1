"""Runs API: upsert runs, append logs, push GPU samples and MLflow metrics, read runs.

Scoping: a key sees and writes its own team's runs only; a user sees their teams' runs.
Anything outside that answers 404, exactly as a run that does not exist.
"""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import Field
from pydantic import ValidationError as PydanticValidationError

from billing.engine import RunCostAnswer, naming_problem, run_cost, run_costs
from dashboard.api import fair_ingest
from dashboard.api.core import Access, InvalidRows, batch_runs, bearer, check_count, find_run, read_auth
from dashboard.kit.schemas import ERRORS, Timestamp
from runs import ingest
from runs.choices import BatchKind, RunOrigin, RunSource, RunStatus, TelemetrySource
from runs.collectors import agent as agent_door
from runs.models import MAX_RUNTIME, Attempt, FailureAnalysis, IngestBatch, MetricPoint, Node, Run
from runs.schemas import (
    BatchOut,
    GpuSampleBatchIn,
    GpuSamplesDroppedOut,
    LogChunkIn,
    LogChunkOut,
    MetricBatchIn,
    RunDetailOut,
    RunIn,
    RunOut,
    TelemetryFileIn,
    TelemetryFileOut,
    UpsertOut,
)
from runs.telemetry.importers.checks import keep_window, run_window
from runs.telemetry.importers.common import DCGM_FORMATS
from runs.telemetry.importers.parse import parse_telemetry
from runs.telemetry.sample_structs import SampleBatch, decode_batch, from_model, process_dicts
from runs.workload.schema import WorkloadError

router = Router(tags=["runs"])


def _visible_runs(request: HttpRequest) -> QuerySet[Run]:
    return Run.objects.filter(team__in=Access(request).teams())


def _run_out(run: Run, detail: bool = False, cost: RunCostAnswer | None = None) -> dict[str, Any]:
    out = {
        "id": run.pk, "source": run.source, "external_id": run.external_id, "team": run.team.name,
        "creator": run.creator, "experiment_name": run.experiment_name, "status": run.status,
        "accelerator_type": run.accelerator_type, "instance_type": run.instance_type,
        "num_accelerators": run.num_accelerators, "gpus_per_node": run.gpus_per_node, "region": run.region,
        "home_region": run.home_region, "submitted_at": run.submitted_at, "started_at": run.started_at,
        "ended_at": run.ended_at, "timeout_minutes": run.timeout_minutes, "max_retries": run.max_retries,
        "usage_policy_name": run.usage_policy_name, "mlflow_run_id": run.mlflow_run_id,
        "mlflow_url": run.mlflow_link(), "url": reverse("run_detail", args=[run.pk]),
        "cost": cost.as_json() if cost is not None else None,
    }  # fmt: skip
    if detail:
        out["parameters"] = run.parameters
        out["state_message"] = run.state_message
        out["attempts"] = [
            {
                "number": a.number,
                "status": a.status,
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                "exit_code": a.exit_code,
                "state_message": a.state_message,
                "mlflow_run_id": a.mlflow_run_id,
                "nodes": [
                    {
                        "index": n.index,
                        "host": n.host,
                        "status": n.status,
                        "started_at": n.started_at,
                        "ended_at": n.ended_at,
                        "exit_code": n.exit_code,
                    }
                    for n in a.nodes.all()
                ],
            }
            for a in run.attempts.all()
        ]
    return out


def _with_attempts(qs: QuerySet[Run]) -> QuerySet[Run]:
    return qs.select_related("team").prefetch_related(
        Prefetch("attempts", queryset=Attempt.objects.order_by("number").prefetch_related(
            Prefetch("nodes", queryset=Node.objects.order_by("index"))
        ))
    )  # fmt: skip


def _get_run(request: HttpRequest, external_id: str, source: str | None) -> Run:
    return find_run(request, external_id, source, _with_attempts(Run.objects.all()))


@router.post(
    "/runs", response={200: UpsertOut, 201: UpsertOut, **ERRORS}, auth=bearer, summary="Create or update a run"
)
def upsert_run(request: HttpRequest, payload: RunIn) -> Status:
    """Upsert a run with its attempts and nodes by (source, external_id). Fields left out keep their value.

    A key writes runs of its own source only (`local` unless the key was created with
    `--source`); `source` left out is the key's. Runs are looked up within the key's team:
    another team's run with the same id is neither seen nor changed, and the answer is the
    one an unused id gets. A run the run source collector wrote cannot be changed by a key.
    """
    access = Access(request)
    team = access.require_write()
    assert access.key is not None  # require_write refused a call without one
    source = payload.source or access.key.source
    if source != access.key.source:
        raise HttpError(
            403,
            f"This key writes runs of source {access.key.source!r} only; a key for {source!r} runs is "
            f"created with `create_api_key --source {source}`.",
        )
    data = payload.model_dump(exclude_unset=True) | {"source": source}
    try:
        data = ingest.with_workload(data)
    except WorkloadError as exc:
        raise InvalidRows([{"field": "workload_yaml", "message": str(problem)} for problem in exc.problems]) from None
    problems = pushed_run_problems(team, data)
    if problems:
        raise InvalidRows(problems)
    try:
        result = ingest.upsert_run(team, data, origin=RunOrigin.KEY)
    except ingest.IngestInvalid as exc:
        raise InvalidRows([{"field": exc.field, "message": exc.message}]) from None
    except ingest.IngestConflict as exc:
        raise HttpError(409, str(exc)) from None
    run = _with_attempts(Run.objects.filter(pk=result.run.pk)).get()
    body = {"created": result.created, "ignored": result.ignored, "run": _run_out(run, detail=True)}
    return Status(201 if result.created else 200, body)


def pushed_run_problems(team: Group, data: dict[str, Any]) -> list[dict[str, str]]:
    """Plausibility of a run a key pushes, whose cost counts against a policy's budget.

    1. `usage_policy_name` must be a policy covering the key's team (or no policy at all).
    2. At most AIRBOARD_MAX_PUSHED_ACCELERATORS accelerators (the shape's own rule is checked
       by `upsert_run`).
    3. The run and each attempt held GPUs for at most the CLI's runtime cap (14 days), from
       start to end, or to now while running: a start in 1970 is not years of spend.
    """
    errors: list[dict[str, str]] = []
    problem = naming_problem(team, data.get("usage_policy_name") or "")
    if problem:
        errors.append({"field": "usage_policy_name", "message": problem})
    cap = settings.AIRBOARD_MAX_PUSHED_ACCELERATORS
    if (data.get("num_accelerators") or 0) > cap:
        errors.append({"field": "num_accelerators", "message": f"is more than {cap}, the most a pushed run may claim"})
    now = timezone.now()
    spans = [("", data)] + [(f"attempts[{i}].", a) for i, a in enumerate(data.get("attempts") or [])]
    for prefix, item in spans:
        start = item.get("started_at")
        if start is not None and (item.get("ended_at") or now) - start > MAX_RUNTIME:
            errors.append(
                {"field": f"{prefix}started_at", "message": f"the run would have held its GPUs longer than the "
                 f"{MAX_RUNTIME.days}-day runtime cap"}
            )  # fmt: skip
    return errors


class RunFilter(Schema):
    status: RunStatus | None = None
    source: RunSource | None = None
    experiment: str | None = Field(default=None, max_length=500)
    # A Timestamp, not a str: a month 13 or a time past date.max once in UTC is a 422 naming it.
    submitted_after: Timestamp | None = Field(default=None, description="ISO 8601 time")
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=1_000_000_000)


class RunListOut(Schema):
    count: int
    results: list[RunOut]


@router.get("/runs", response={200: RunListOut, **ERRORS}, auth=read_auth, summary="List runs")
def list_runs(request: HttpRequest, filters: Query[RunFilter]) -> dict[str, Any]:
    runs = _visible_runs(request).select_related("team").order_by("-submitted_at", "-pk")
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.source:
        runs = runs.filter(source=filters.source)
    if filters.experiment:
        runs = runs.filter(experiment_name__icontains=filters.experiment)
    if filters.submitted_after:
        runs = runs.filter(submitted_at__gte=filters.submitted_after)
    page = list(runs[filters.offset : filters.offset + filters.limit])
    # The run page's figure, for the whole page in a constant number of queries.
    costs = run_costs(page)
    return {"count": runs.count(), "results": [_run_out(r, cost=costs[r.pk]) for r in page]}


@router.get("/runs/{external_id}", response={200: RunDetailOut, **ERRORS}, auth=read_auth, summary="Get a run")
def get_run(request: HttpRequest, external_id: str, source: RunSource | None = None) -> dict[str, Any]:
    run = _get_run(request, external_id, source)
    return _run_out(run, detail=True, cost=run_cost(run))


@router.post(
    "/runs/{external_id}/logs",
    response={200: LogChunkOut, 201: LogChunkOut, **ERRORS},
    auth=bearer,
    summary="Append a log chunk",
)
def append_log(request: HttpRequest, external_id: str, payload: LogChunkIn, source: RunSource | None = None) -> Status:
    """Append one ordered chunk of a node's log. Resending a chunk (same seq, same text) is a no-op."""
    Access(request).require_write()
    limit = settings.AIRBOARD_MAX_LOG_CHUNK_BYTES
    if len(payload.text.encode("utf-8", "surrogatepass")) > limit:
        raise HttpError(413, f"text is larger than {limit} bytes; send it as several chunks")
    run = _get_run(request, external_id, source)
    try:
        status, chunk = ingest.append_log_chunk(
            run, payload.attempt, payload.node, payload.seq, payload.text, payload.host
        )
    except ingest.IngestConflict as exc:
        raise HttpError(409, str(exc)) from None
    body = {"status": status, "attempt": payload.attempt, "node": payload.node, "seq": payload.seq,
            "lines": chunk.line_count}  # fmt: skip
    return Status(201 if status == "stored" else 200, body)


# A sample's value columns in row order, read in one C call rather than a lookup each: those of
# the first row layout, then the ones appended since (NVLink), left off when all are missing
# (as `ingest.trim_sample_rows` would trim them, without a pop per row).
_V1_VALUES = ingest.SAMPLE_V1_WIDTH - (len(ingest.SAMPLE_COLUMNS) - len(ingest.SAMPLE_VALUE_COLUMNS))
_sample_values = attrgetter(*ingest.SAMPLE_VALUE_COLUMNS[:_V1_VALUES])
_later_values = attrgetter(*ingest.SAMPLE_VALUE_COLUMNS[_V1_VALUES:], "gpu")  # "gpu": a tuple however many
_NO_LATER_VALUES = (None,) * len(ingest.SAMPLE_VALUE_COLUMNS[_V1_VALUES:])
# Where a row holds its processes: the structs become the dicts GpuProcessIn dumps.
_PROCESSES_AT = ingest.SAMPLE_COLUMNS.index("processes")
_sample_key = attrgetter("run_source", "run", "ts")
_node_key = attrgetter("run_source", "run", "attempt", "node")


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema with its `$defs` references replaced by the definitions (none is recursive).

    The OpenAPI document has no `$defs` of its own, so a request body described by hand must
    carry its nested models in place.
    """
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def _accept_batch(request: HttpRequest, kind: str, rows: list[list[Any]], source: str = "") -> Status:
    team = Access(request).require_write()
    with transaction.atomic():
        batch, duplicate = ingest.record_batch(team, kind, rows, source)
        if not duplicate:
            ingest.enqueue_batch(batch)
    return Status(200 if duplicate else 202, batch.answer(duplicate))


def _validated_samples(body: bytes) -> SampleBatch:
    """The batch, checked exactly as GpuSampleBatchIn checks it, or a 422 naming every bad field.

    1. The fast path: msgspec's decoder over the bytes (runs/telemetry/sample_structs.py), which accepts
       only what GpuSampleBatchIn accepts, with the same values.
    2. A body the fast path cannot vouch for (one with a NUL among them) goes through
       GpuSampleBatchIn itself: its errors (and its NUL check on `run` and `host`) are the
       API's, word for word, and a body it accepts becomes the same structs.
    """
    batch = decode_batch(body)
    if batch is not None:
        return batch
    try:
        return from_model(GpuSampleBatchIn.model_validate_json(body))
    except PydanticValidationError as error:
        # pydantic's ErrorDetails are the dicts ninja's ValidationError carries.
        errors = cast(list[dict[str, Any]], error.errors(include_url=False, include_context=False))
        raise NinjaValidationError(errors) from None


@router.post(
    "/gpu-samples",
    response={200: BatchOut | GpuSamplesDroppedOut, 202: BatchOut | GpuSamplesDroppedOut, **ERRORS},
    auth=bearer,
    summary="Push a batch of GPU samples",
    openapi_extra={
        "requestBody": {
            "content": {"application/json": {"schema": _inlined(GpuSampleBatchIn.model_json_schema())}},
            "required": True,
        }
    },
)
def push_gpu_samples(request: HttpRequest, bad_rows: Literal["refuse", "drop"] = "refuse") -> Status:
    """Accept up to AIRBOARD_MAX_SAMPLES_PER_BATCH samples; a worker writes them (202).

    The same batch sent again answers 200 with `duplicate: true` and is stored once. Every
    bad row is named in a 422, and then nothing of the batch is stored.

    `?bad_rows=drop` (the node agent's door, runs/collectors/agent.py): bad rows are dropped,
    counted and named instead, the rest stored; the body may carry `events` (gpu_lost, xid).

    The body (GpuSampleBatchIn) is parsed and checked in one pass by msgspec into structs
    (runs/telemetry/sample_structs.py), rather than by ninja's json.loads and then 10,000 model
    instances: the accept path's cost per sample, measured by bench/accept.py.
    """
    if bad_rows == "drop":
        return agent_door.push_dropping(request)
    Access(request).require_write()
    body = request.body
    with ingest.gc_paused():
        payload = _validated_samples(body)
        samples = payload.samples  # every field present: absent ones hold GpuSampleIn's defaults
        runs, errors = batch_runs(request, samples, "samples", key=_sample_key)
        if errors:
            raise InvalidRows(errors[:500])
        # (run source, run, attempt, node) -> the first host its rows name.
        hosts: dict[tuple[str, str, int | None, int], str] = {}
        for s in samples:
            key = _node_key(s)
            if not hosts.get(key):
                hosts[key] = s.host
        fair_ingest.check_nodes(len(hosts))
        fair_ingest.charge_rows(request, len(samples), "samples")
        # The GPUs of a node share their instants: each is formatted once.
        stamps: dict[Any, str] = {}
        rows = []
        no_later = list(_NO_LATER_VALUES)
        with transaction.atomic():
            # (run source, run, attempt, node) -> (run id, node id), every node in a few queries.
            wanted = [(runs[key[:2]], key[2], key[3], host) for key, host in hosts.items()]
            node_ids = ingest.nodes_for(wanted)
            ids = {
                key: (run.pk, node_ids[(run.pk, key[2], key[3])]) for key, (run, *_) in zip(hosts, wanted, strict=True)
            }
            for s in samples:
                key = _node_key(s)
                ts = s.ts
                stamp = stamps.get(ts)
                if stamp is None:
                    # decode_batch and from_model leave the instant where the text was.
                    stamp = stamps[ts] = cast(datetime, ts).isoformat()
                *later, gpu = _later_values(s)
                row = [*ids[key], gpu, stamp, *_sample_values(s)]
                if s.processes is not None:
                    row[_PROCESSES_AT] = process_dicts(s.processes)
                if later != no_later:
                    row += later
                rows.append(row)
            return _accept_batch(request, BatchKind.GPU_SAMPLES, rows, payload.source)


@router.post(
    "/runs/{external_id}/telemetry-file",
    response={200: TelemetryFileOut, 202: TelemetryFileOut, **ERRORS},
    auth=bearer,
    summary="Import an nvidia-smi / dmon / DCGM telemetry file",
)
def import_telemetry_file(
    request: HttpRequest, external_id: str, payload: TelemetryFileIn, source: RunSource | None = None
) -> Status:
    """The API twin of `manage.py import_telemetry`: parse the file, then store its samples like any batch.

    Lines that cannot be used are listed in `skipped` with their line numbers (line 0: the file
    as a whole, e.g. samples outside the run's window). A file with nothing usable, or whose
    values are all zero (a broken exporter), is a 422 naming why. Parsing is linear in the
    file's size and lines over runs.telemetry.importers.common.MAX_LINE_CHARS are never parsed.
    """
    Access(request).require_write()
    run = _get_run(request, external_id, source)
    try:
        tz = ZoneInfo(payload.tz) if payload.tz else None
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRows([{"field": "tz", "message": f"unknown time zone {(payload.tz or '')[:60]!r}"}]) from None
    result = parse_telemetry(payload.text, fmt=payload.format, start=payload.start, fields=payload.fields, tz=tz)
    if result.suspect:
        raise InvalidRows([{"field": "text", "message": result.suspect}])
    keep_window(result, *run_window(run), f"run {run.external_id}'s window")
    skipped: list[dict[str, Any]] = [{"line": p.line, "message": p.message} for p in result.problems]
    if not result.samples:
        raise InvalidRows([{"field": f"text:line {p['line']}", "message": p["message"]} for p in skipped[:100]])
    check_count(result.samples, "samples in the file")  # the cap every batch has: 172,800 rows went through
    fair_ingest.charge_rows(request, len(result.samples), "samples")
    telemetry_source = TelemetrySource.DCGM if result.format in DCGM_FORMATS else TelemetrySource.NVIDIA_SMI
    with transaction.atomic():
        node = ingest.node_for(run, payload.attempt, payload.node)
        rows = []
        for sample in result.samples:
            values = sample.values()
            rows.append(
                [
                    run.pk,
                    node.pk,
                    sample.gpu_index,
                    sample.ts.isoformat(),
                    *map(values.get, ingest.SAMPLE_VALUE_COLUMNS),
                ]
            )
        status = _accept_batch(request, BatchKind.GPU_SAMPLES, rows, telemetry_source)
    body = status.value | {"format": result.format, "skipped": skipped[:1000]}
    return Status(status.status_code, body)


@router.post(
    "/metrics",
    response={200: BatchOut, 202: BatchOut, **ERRORS},
    auth=bearer,
    summary="Push a batch of MLflow metric points",
)
def push_metrics(request: HttpRequest, payload: MetricBatchIn) -> Status:
    """MLflow metric points (key, step, timestamp, value); NaN/Infinity are stored as missing."""
    Access(request).require_write()
    points = payload.points
    # MLflow's own timestamps are not skew-checked: a late import of old points is normal.
    runs, errors = batch_runs(request, points, "points", skew_checked=False)
    if errors:
        raise InvalidRows(errors[:500])
    fair_ingest.charge_rows(request, len(points), "points")
    rows = [[runs[(p.run_source, p.run)].pk, p.key, p.step, p.ts.isoformat(), p.value] for p in points]
    return _accept_batch(request, BatchKind.METRICS, rows)


@router.get("/batches/{batch_id}", response={200: BatchOut, **ERRORS}, auth=read_auth, summary="A batch's status")
def get_batch(request: HttpRequest, batch_id: int) -> dict[str, Any]:
    batch = get_object_or_404(IngestBatch, pk=batch_id, team__in=Access(request).teams())
    return batch.answer(duplicate=False)


# --- Reads of what a run page shows besides the run: its MLflow metrics, its failure analysis ---
# Scoped as the pages are (_get_run). A metric with more points than asked for comes back as each
# bucket's first, lowest, highest and last point, so a loss spike survives the thinning.

# The most points of one metric an answer carries, and the default.
MAX_POINTS = 10_000
DEFAULT_POINTS = 1_000
# The most metric keys one answer carries (a run logging thousands of keys asks by key).
MAX_KEYS = 200


class MetricsQuery(Schema):
    key: list[str] = Field(default_factory=list, description="Metric keys to read (repeat); all when empty.")
    max_points: int = Field(DEFAULT_POINTS, ge=4, le=MAX_POINTS, description="Most points per metric.")
    source: RunSource | None = None


class MetricPointOut(Schema):
    step: int
    ts: datetime
    value: float | None


class MetricSeriesOut(Schema):
    key: str
    points_stored: int
    points: list[MetricPointOut]


class MetricsOut(Schema):
    run: str
    metrics: list[MetricSeriesOut]


def thin(points: list[tuple[int, datetime, float | None]], most: int) -> list[tuple[int, datetime, float | None]]:
    """At most `most` points in step order: per bucket its first, lowest, highest and last point.

    Linear in the points; a spike (the bucket's min or max) is always kept, NaN-logged values
    (None) only where they are a bucket's first or last.
    """
    if len(points) <= most:
        return points
    buckets = max(1, most // 4)
    size = -(-len(points) // buckets)
    kept: list[tuple[int, datetime, float | None]] = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        valued = [i for i, p in enumerate(chunk) if p[2] is not None]
        picks = {0, len(chunk) - 1}
        if valued:
            picks.add(min(valued, key=lambda i: chunk[i][2]))  # type: ignore[arg-type,return-value]
            picks.add(max(valued, key=lambda i: chunk[i][2]))  # type: ignore[arg-type,return-value]
        kept.extend(chunk[i] for i in sorted(picks))
    return kept[:most]


@router.get(
    "/runs/{external_id}/metrics",
    response={200: MetricsOut, **ERRORS},
    auth=read_auth,
    summary="A run's MLflow metrics, thinned to max_points per metric",
)
def run_metrics(request: HttpRequest, external_id: str, query: Query[MetricsQuery]) -> dict[str, Any]:
    run = _get_run(request, external_id, query.source)
    keys = query.key or list(
        MetricPoint.objects.filter(run=run).order_by("key").values_list("key", flat=True).distinct()[: MAX_KEYS + 1]
    )
    if len(keys) > MAX_KEYS:
        raise HttpError(422, f"The run logs more than {MAX_KEYS} metric keys; name the ones to read with ?key=.")
    series = []
    for key in keys:
        points = list(
            MetricPoint.objects.filter(run=run, key=key).order_by("step", "ts").values_list("step", "ts", "value")
        )
        if not points:
            continue
        shown = thin(points, query.max_points)
        series.append(
            {"key": key, "points_stored": len(points),
             "points": [{"step": s, "ts": ts, "value": v} for s, ts, v in shown]}
        )  # fmt: skip
    return {"run": run.external_id, "metrics": series}


class FailureOut(Schema):
    run: str
    class_id: str
    title: str
    attempt_number: int | None
    node_index: int | None
    line: int | None
    evidence: str
    signature: str
    remedy: str
    note: str
    failed_at: datetime | None
    confidence: float | None
    earlier_attempts: list[dict[str, Any]]
    telemetry: dict[str, Any]
    classified_at: datetime
    url: str


@router.get(
    "/runs/{external_id}/failure",
    response={200: FailureOut, **ERRORS},
    auth=read_auth,
    summary="A failed run's failure analysis: class, root-cause line, remedy",
)
def run_failure(request: HttpRequest, external_id: str, source: RunSource | None = None) -> dict[str, Any]:
    run = _get_run(request, external_id, source)
    analysis = FailureAnalysis.objects.filter(run=run).first()
    if analysis is None:
        raise HttpError(
            404, f"Run {external_id!r} has no failure analysis (it has not failed, or is not classified yet)."
        )
    fields = ("class_id", "title", "attempt_number", "node_index", "line", "evidence", "signature", "remedy",
              "note", "failed_at", "confidence", "earlier_attempts", "telemetry", "classified_at")  # fmt: skip
    out = {name: getattr(analysis, name) for name in fields}
    return {"run": run.external_id, "url": reverse("failure_detail", args=[run.pk]), **out}
