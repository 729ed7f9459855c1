"""The MLflow collector: runs, params, tags and metric histories, pulled incrementally.

A pass (`collect_once`, run by the `runs.collect_mlflow` task and `manage.py collect mlflow --once`):

1. Probe the tracking server; a server that does not answer fails the pass with CollectorError.
2. Pick the experiments: AIRBOARD_MLFLOW_EXPERIMENTS (ids or names), else every active one.
3. Choose the runs to read. MLflow keeps no "updated at" on a run, so "changed since the last
   pass" is approximated by three sets, read in batches:
   a. runs started at or after the collector cursor (`start_time_ms`, the latest start seen),
      less a 10-minute overlap for client clock skew;
   b. runs the last pass saw RUNNING or SCHEDULED: only these still log metrics;
   c. unlinked runs that link now (an Airboard run appeared with their id or tag).
   A finished run is therefore read once or twice, then never again.
4. Link each run to an Airboard run (see `_links`) and upsert its MlflowRun (params, tags).
5. For linked runs, read each metric's history after its cursor (MlflowRun.metric_cursors);
   a key whose latest value is unchanged is not asked for at all. GPU system metrics become
   GpuSample rows (unless the run has NVML samples), every other key a MetricPoint. The node
   part of a key (`system/<node id>/gpu_0_...`) names a node of the run: see `mlflow_nodes`.
6. Store points and the run's new cursors in one transaction; save the collector cursor last.
A pass killed part-way repeats at most some reads: every write is idempotent on natural keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, overload

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from runs.choices import CollectorKind, RunOrigin, TelemetrySource
from runs.collectors.mlflow_client import MetricCursor, MetricValue, MlflowSource, MlflowSourceError, RunRecord
from runs.collectors.state import CollectResult, isolated, save_cursor, track
from runs.ingest import node_for
from runs.ingest_process import derive_egress_later
from runs.models import Attempt, CollectorState, GpuSample, MetricPoint, MlflowRun, Node, Run
from runs.telemetry import blocks
from runs.telemetry.store import store_gpu_samples, store_metric_points

NOT_CONFIGURED = "mlflow: not configured (set MLFLOW_TRACKING_URI)"
# MLflow run statuses in which a run may still log: re-read on every pass until they end.
LIVE_STATUSES = ("RUNNING", "SCHEDULED")
# The tag a training script sets to name its Airboard run (Run.external_id), and optionally its try.
RUN_TAG = "airboard.run_id"
ATTEMPT_TAG = "airboard.attempt"
ATTEMPT_DIGITS = re.compile(r"[0-9]{1,6}")
# Far above any retry count (the CLI's max_retries is a small number); a larger tag is ignored.
MAX_ATTEMPT_TAG = 10_000
# MLflow's own system tag: who created the run (an email on Databricks).
USER_TAG = "mlflow.user"
# Ids per IN (...) query: under every database's bound-parameter limit.
QUERY_CHUNK = 500
# Start times are the training client's clock, not the server's: a run created a little late
# (clock skew, a slow client) can start "before" the cursor. Re-searching this window costs
# a search page, not histories (unchanged keys are skipped).
START_OVERLAP_MS = 10 * 60 * 1000

# MLflow's GPU system metrics, `system/gpu_0_...` or `system/<node_id>/gpu_0_...`
# (mlflow/system_metrics/metrics/gpu_monitor.py; `gigabytes` is the AMD/ROCm monitor's).
GPU_KEY = re.compile(
    r"^system/(?:(?P<node>[^/]+)/)?gpu_(?P<gpu>\d+)_(?P<field>utilization_percentage|memory_usage_megabytes"
    r"|memory_usage_gigabytes|memory_usage_percentage|power_usage_watts|power_usage_percentage)$"
)
# MLflow's documented node id form (`node_0`), or a bare rank: the node index itself.
NUMBERED_NODE_ID = re.compile(r"(?:node_)?(\d{1,6})")


class CollectorError(Exception):
    """The pass could not run (MLflow unreachable, a request refused); track() records it."""


@dataclass(frozen=True)
class Link:
    """The Airboard run an MLflow run belongs to, and its attempt number when known."""

    run: Run
    attempt_number: int | None = None


@dataclass(frozen=True)
class GpuKey:
    """A parsed GPU system-metric key; `node_id` is '' when the key has no node part."""

    node_id: str
    gpu_index: int
    field: str


def collect_once(source: MlflowSource | None = None) -> CollectResult:
    """One collector pass; see the module docstring. `source` lets a caller pass its own adapter."""
    uri = settings.AIRBOARD_MLFLOW_TRACKING_URI
    if not uri and source is None:
        result = CollectResult()
        result.say(NOT_CONFIGURED)
        return result
    with track("mlflow", CollectorKind.MLFLOW, settings.AIRBOARD_MLFLOW_INTERVAL_SECONDS) as (state, result):
        try:
            _collect(source or MlflowSource(uri), state, result)
        except MlflowSourceError as exc:
            raise CollectorError(str(exc)) from exc
    return result


def _collect(source: MlflowSource, state: CollectorState, result: CollectResult) -> None:
    source.check_reachable()
    experiments, missing = source.experiments(settings.AIRBOARD_MLFLOW_EXPERIMENTS)
    for name in missing:
        result.say(f"mlflow: experiment {name!r} not found (AIRBOARD_MLFLOW_EXPERIMENTS)")
    names = {e.id: e.name for e in experiments}
    experiment_ids = sorted(names)

    since = state.cursor.get("start_time_ms")
    records = source.runs_started_since(experiment_ids, since - START_OVERLAP_MS if since is not None else None)
    seen = {r.run_id for r in records}
    recheck = (_live_run_ids(experiment_ids) | _newly_linkable_run_ids(experiment_ids)) - seen
    if recheck:
        records += source.runs_by_id(experiment_ids, sorted(recheck))

    links = _links((r.run_id, r.tags) for r in records)
    for record in records:
        odd = record.tags.get(ATTEMPT_TAG)
        if odd is not None and attempt_from_tag(odd) is None:
            why = f"tag {ATTEMPT_TAG}={str(odd)[:20]!r} is no attempt number; ignored"
            result.skip(f"MLflow run {record.run_id}", why)
    linked = points = samples = 0
    for record in records:
        # One run's odd data (a value the database refuses) skips that run, named; the other
        # runs of the pass, every other team's, are still read.
        what, mlflow_run = f"MLflow run {record.run_id}", None
        with isolated(result, what):
            mlflow_run = _upsert(record, links.get(record.run_id), names)
        if mlflow_run is None or mlflow_run.run is None:
            continue  # skipped, or stored for the collectors page (metrics wait until it is linked)
        linked += 1
        link = links.get(record.run_id) or Link(mlflow_run.run)
        # No savepoint around the history reads: they are network calls, and SQLite's IMMEDIATE
        # transaction would hold the write lock through them. The points are stored in their own
        # transaction (`_collect_metrics`), which rolls back alone.
        with isolated(result, what, savepoint=False):
            p, s = _collect_metrics(source, mlflow_run, record, link.attempt_number)
            points, samples = points + p, samples + s

    starts = [r.start_time_ms for r in records if r.start_time_ms is not None]
    if starts and (since is None or max(starts) > since):
        # Saved last: a pass that dies above re-reads these runs, and the inserts skip duplicates.
        save_cursor(state, {**state.cursor, "start_time_ms": max(starts)})
    result.items += points + samples
    result.say(
        f"mlflow: {len(experiments)} experiment(s), {len(records)} run(s) read "
        f"({linked} linked, {len(records) - linked} unlinked), {points} metric point(s), {samples} GPU sample(s)"
    )


# --- which runs to read ---------------------------------------------------------------


def _live_run_ids(experiment_ids: Sequence[str]) -> set[str]:
    return set(
        MlflowRun.objects.filter(experiment_id__in=experiment_ids, status__in=LIVE_STATUSES).values_list(
            "mlflow_run_id", flat=True
        )
    )


def _newly_linkable_run_ids(experiment_ids: Sequence[str]) -> set[str]:
    """Unlinked runs that an Airboard run now claims: read once more, with their full history."""
    unlinked = MlflowRun.objects.filter(run=None, experiment_id__in=experiment_ids).values_list("mlflow_run_id", "tags")
    return set(_links((run_id, tags or {}) for run_id, tags in unlinked))


# --- linking --------------------------------------------------------------------------


def claims(run: Run, tags: dict[str, str], *, by_tag: bool = False) -> bool:
    """Whether `run` may receive this MLflow run's metrics (SECURITY.md, "Ownership").

    A run the collector or a launcher wrote carries MLflow ids its source gave it: a link by
    that id needs nothing more. Anything else is a claim the MLflow run makes about itself (an
    `airboard.run_id` tag anyone can set) or an id an API key pushed, so it holds only when the
    MLflow run's user (`mlflow.user`) is a member of the run's team; a run without one links
    to nothing that way.
    """
    if run.origin != RunOrigin.KEY and not by_tag:
        return True
    user = tags.get(USER_TAG, "")
    return bool(user) and User.objects.filter(Q(email__iexact=user) | Q(username=user), groups=run.team_id).exists()


def _links(runs: Iterable[tuple[str, dict[str, str]]]) -> dict[str, Link]:
    """Link MLflow runs to Airboard runs, in batches. First match wins:

    1. an Attempt whose mlflow_run_id is the run's id (each retry is a new MLflow run);
    2. a Run whose mlflow_run_id is the run's id;
    3. the tag `airboard.run_id` equal to exactly one Run.external_id (with `airboard.attempt`
       naming the attempt when set). Ambiguous external ids (several sources) stay unlinked.
    Every match must pass `claims`: the team check for runs an API key pushed and for every tag link.
    """
    tags_by_id = dict(runs)
    ids = list(tags_by_id)
    links: dict[str, Link] = {}
    for chunk in _chunks(ids):
        for attempt in Attempt.objects.filter(mlflow_run_id__in=chunk).select_related("run"):
            if claims(attempt.run, tags_by_id[attempt.mlflow_run_id]):
                links.setdefault(attempt.mlflow_run_id, Link(attempt.run, attempt.number))
        for run in Run.objects.filter(mlflow_run_id__in=chunk):
            if claims(run, tags_by_id[run.mlflow_run_id]):
                links.setdefault(run.mlflow_run_id, Link(run))
    by_tag = {run_id: tags[RUN_TAG] for run_id, tags in tags_by_id.items() if run_id not in links and tags.get(RUN_TAG)}
    candidates: dict[str, list[Run]] = {}
    for chunk in _chunks(sorted(set(by_tag.values()))):
        for run in Run.objects.filter(external_id__in=chunk):
            candidates.setdefault(run.external_id, []).append(run)
    for run_id, external_id in by_tag.items():
        matches = [run for run in candidates.get(external_id, []) if claims(run, tags_by_id[run_id], by_tag=True)]
        if len(matches) == 1:
            links[run_id] = Link(matches[0], attempt_from_tag(tags_by_id[run_id].get(ATTEMPT_TAG)))
    return links


def attempt_from_tag(value: object) -> int | None:
    """The attempt an `airboard.attempt` tag names: 1 to MAX_ATTEMPT_TAG in ASCII digits, else None.

    Anyone can set the tag: `"²"` passes `str.isdigit` and made `int()` raise, which ended the
    pass for every team; a 40-digit number overflowed the attempt column.
    """
    if not isinstance(value, str) or not ATTEMPT_DIGITS.fullmatch(value):
        return None
    number = int(value)
    return number if 0 < number <= MAX_ATTEMPT_TAG else None


def _upsert(record: RunRecord, link: Link | None, experiment_names: dict[str, str]) -> MlflowRun:
    defaults: dict[str, Any] = {
        "experiment_id": record.experiment_id,
        "experiment_name": experiment_names.get(record.experiment_id, ""),
        "run_name": record.run_name[:500],
        "status": record.status,
        "start_time": _ts(record.start_time_ms),
        "end_time": _ts(record.end_time_ms),
        "params": record.params,
        "tags": record.tags,
    }
    # A link is never removed by a pass: one made by hand (admin) outlives a missing tag.
    if link is not None:
        defaults["run"] = link.run
    mlflow_run, _ = MlflowRun.objects.update_or_create(mlflow_run_id=record.run_id, defaults=defaults)
    return mlflow_run


# --- metrics --------------------------------------------------------------------------


def _collect_metrics(
    source: MlflowSource, mlflow_run: MlflowRun, record: RunRecord, attempt_number: int | None
) -> tuple[int, int]:
    """Read the new points of a linked run's metrics, store them, then advance its cursors."""
    run = mlflow_run.run
    assert run is not None
    cursors = dict(mlflow_run.metric_cursors or {})
    # NVML samples (the node agent) and dcgm-exporter's (the Prometheus source) are finer and
    # richer; MLflow's are the fallback only.
    has_nvml = blocks.has_samples(run=run, source__in=(TelemetrySource.NVML, TelemetrySource.PROMETHEUS))
    points: list[MetricPoint] = []
    gpu_fields: dict[tuple[str, int, int], dict[str, float | None]] = {}
    new_cursors: dict[str, dict] = {}
    for key, latest in sorted(record.latest.items()):
        cursor = MetricCursor.from_json(key, cursors.get(key))
        if cursor is not None and cursor.latest is not None and cursor.latest.same_as(latest):
            continue
        values, new_cursor = source.metric_history_since(record.run_id, key, cursor, latest)
        if new_cursor is not None:
            new_cursors[key] = new_cursor.to_json()
        gpu = parse_gpu_key(key)
        if gpu is None:
            points += [_metric_point(run, key, v) for v in values]
        elif not has_nvml:
            for v in values:
                gpu_fields.setdefault((gpu.node_id, gpu.gpu_index, v.timestamp_ms), {})[gpu.field] = _finite(v.value)
    samples = gpu_samples(run, attempt_number, gpu_fields)
    with transaction.atomic():
        stored_points = store_metric_points(points)
        if stored_points.inserted:
            derive_egress_later(points)
        stored_samples = store_gpu_samples(samples)
        if new_cursors:
            MlflowRun.objects.filter(pk=mlflow_run.pk).update(metric_cursors={**cursors, **new_cursors})
    return stored_points.inserted, stored_samples.inserted


def parse_gpu_key(key: str) -> GpuKey | None:
    """`system/[<node id>/]gpu_I_FIELD` -> (node id or '', I, FIELD); None for any other key."""
    match = GPU_KEY.match(key)
    if match is None:
        return None
    return GpuKey(node_id=match["node"] or "", gpu_index=int(match["gpu"]), field=match["field"])


def mlflow_nodes(run: Run, attempt_number: int | None, node_ids: Iterable[str]) -> dict[str, Node]:
    """The node of the run each MLflow node id stands for: distinct ids, distinct nodes, every pass.

    1. No node part -> node 0; `node_<n>` (MLflow's documented form) or a bare `<n>` -> node n.
    2. Any other id (`worker-a`, a hostname) is kept as the node's `host`, so the next pass finds
       the same node: the attempt's node whose host is the id (an agent on that host, or an
       earlier pass); else its first node without a host and without MLflow samples; else a new
       node after the highest index in use. Ids are taken in sorted order, so a pass that sees
       several new ids at once numbers them the same way whatever order MLflow lists them.
    """
    ids = sorted(set(node_ids))
    nodes: dict[str, Node] = {}
    named = []
    for node_id in ids:
        numbered = NUMBERED_NODE_ID.fullmatch(node_id) if node_id else None
        if not node_id or numbered:
            nodes[node_id] = node_for(run, attempt_number, int(numbered[1]) if numbered else 0)
        else:
            named.append(node_id)
    if not named:
        return nodes
    attempts = run.attempts.all()
    attempt = (
        attempts.filter(number=attempt_number).first()
        if attempt_number is not None
        else attempts.order_by("-number").first()
    )
    existing = list(attempt.nodes.order_by("index")) if attempt is not None else []
    by_host = {node.host: node for node in existing if node.host}
    with_mlflow = blocks.node_ids_with(node__in=existing, source=TelemetrySource.MLFLOW)
    taken = {node.pk for node in nodes.values()} | with_mlflow
    free = [node for node in existing if not node.host and node.pk not in taken]
    next_index = max([node.index for node in existing] + [node.index for node in nodes.values()], default=-1) + 1
    for node_id in named:
        host = node_id[: Node._meta.get_field("host").max_length]
        if host in by_host:
            nodes[node_id] = by_host[host]
        elif free:
            node = free.pop(0)
            Node.objects.filter(pk=node.pk).update(host=host)
            nodes[node_id] = node
        else:
            nodes[node_id] = node_for(run, attempt_number, next_index, host)
            next_index += 1
    return nodes


def gpu_samples(
    run: Run, attempt_number: int | None, grouped: dict[tuple[str, int, int], dict[str, float | None]]
) -> list[GpuSample]:
    """One GpuSample per (node, GPU, timestamp): MLflow logs one publish's metrics at one timestamp.

    Units: MLflow's megabytes are decimal (memory.used / 1e6), so bytes = MB * 1e6. Totals and
    power limits are not logged; they are derived from a value and its percentage when both exist
    (the percentage is rounded to 0.1, so the derived figure is within about 0.1% of the real one).
    """
    nodes = mlflow_nodes(run, attempt_number, (node_id for node_id, _gpu, _ts in grouped))
    samples: list[GpuSample] = []
    for (node_id, gpu_index, ts_ms), fields in sorted(grouped.items()):
        used = _memory_used_bytes(fields)
        memory_pct = fields.get("memory_usage_percentage")
        watts = fields.get("power_usage_watts")
        power_pct = fields.get("power_usage_percentage")
        samples.append(
            GpuSample(
                run=run,
                node=nodes[node_id],
                gpu_index=gpu_index,
                ts=_ts(ts_ms),
                utilization_gpu=fields.get("utilization_percentage"),
                memory_used_bytes=used,
                memory_total_bytes=round(used / memory_pct * 100) if used is not None and memory_pct else None,
                power_watts=watts,
                power_limit_watts=watts / power_pct * 100 if watts is not None and power_pct else None,
                source=TelemetrySource.MLFLOW,
            )
        )
    return samples


def _memory_used_bytes(fields: dict[str, float | None]) -> int | None:
    megabytes = fields.get("memory_usage_megabytes")
    if megabytes is not None:
        return round(megabytes * 1e6)
    gigabytes = fields.get("memory_usage_gigabytes")
    return round(gigabytes * 1e9) if gigabytes is not None else None


def _metric_point(run: Run, key: str, value: MetricValue) -> MetricPoint:
    return MetricPoint(run=run, key=key, step=value.step, ts=_ts(value.timestamp_ms), value=_finite(value.value))


def _finite(value: float) -> float | None:
    # MetricPoint.value and GpuSample fields are NULL where MLflow logged NaN or infinity.
    return value if math.isfinite(value) else None


@overload
def _ts(ms: int) -> datetime: ...
@overload
def _ts(ms: int | None) -> datetime | None: ...
def _ts(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms is not None else None


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), QUERY_CHUNK):
        yield items[start : start + QUERY_CHUNK]
