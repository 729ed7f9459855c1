"""The run source collector: Databricks job runs and classic clusters into Run, Attempt, Cluster.

The raw records come from `databricks_cli` (the operator's CLI command, or the SDK); this
module only maps them, reading them with `jobs_records` (which runs are GPU work, the AI
Runtime task's accelerators and experiment, task tries, job cluster specs). Runs without a
GPU are not stored. A run-level retry is a new run whose `original_attempt_run_id` names the
first try, so all tries share one Airboard run (external id = the original run id); each try
of the run's first task (`tasks[]` entries of its `task_key`) is an attempt, numbered from 1
(Databricks counts from 0), with the task's own window and the MLflow run `jobs
get-run-output` names for it. The records are read into fields by `run_records` (the
status mapping is in its docstring); this module makes the passes and writes them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db.models import Q
from django.utils import timezone

from billing.engine import policy_for_databricks_id
from dashboard.kit.commands import CollectorError
from runs.choices import CollectorKind, RunOrigin, RunSource, RunStatus
from runs.collectors.cluster_events import collect_events
from runs.collectors.databricks_cli import RunSourceClient, client_from_settings
from runs.collectors.jobs_records import (
    RunKind,
    ai_runtime_compute,
    classify,
    cluster_ids_of,
    for_each_task_run_id,
    is_sweep,
    iteration_records,
    new_cluster_specs,
    spec_gpus,
    spec_workers,
    split_gpu_tasks,
    unknown_gpu_specs,
    usage_policy_id_of,
)
from runs.collectors.run_records import (
    cluster_fields,
    external_id_of,
    is_classic,
    map_status,
    ms_to_dt,
    record_attempts,
    run_data,
)
from runs.collectors.state import CollectResult, save_cursor, track
from runs.ingest import IngestConflict, upsert_run
from runs.models import Attempt, Cluster, ClusterEvent, Run
from runs.models.instance_types import cluster_gpus

__all__ = ["CollectorError", "collect_once"]

NOT_CONFIGURED = "runs: not configured (set AIRBOARD_RUN_SOURCE_COMMAND or DATABRICKS_HOST and DATABRICKS_TOKEN)"
# Active runs remembered between passes are capped: a source that never reports their end
# must not grow the cursor without bound.
MAX_TRACKED_ACTIVE = 1_000
# `jobs get-run-output` calls a pass makes at most (one per new AI Runtime task try).
MAX_OUTPUTS_PER_PASS = 200


class TeamResolver:
    """The team a record belongs to: its creator's first group, else AIRBOARD_RUN_SOURCE_TEAM."""

    def __init__(self) -> None:
        name = settings.AIRBOARD_RUN_SOURCE_TEAM
        self.default = Group.objects.filter(name=name).first() if name else None
        self.default_name = name
        self._cache: dict[str, Group | None] = {}

    def __call__(self, creator: str) -> Group | None:
        if creator not in self._cache:
            user = (
                User.objects.filter(Q(email__iexact=creator) | Q(username=creator)).order_by("pk").first()
                if creator
                else None
            )
            team = user.groups.order_by("name").first() if user else None
            self._cache[creator] = team or self.default
        return self._cache[creator]

    def why_none(self, creator: str) -> str:
        if self.default_name:
            return f"creator {creator or '(none)'} has no team and group {self.default_name!r} does not exist"
        return f"creator {creator or '(none)'} has no team and AIRBOARD_RUN_SOURCE_TEAM is not set"


# --- Clusters ---------------------------------------------------------------------------------


def upsert_clusters(
    records: list[dict[str, Any]], teams: TeamResolver, result: CollectResult, label: str = "clusters"
) -> dict[str, Cluster]:
    """Upsert clusters by cluster_id and derive their lifecycle events; returns them by id.

    1. Resolve the team (an existing cluster keeps its own); skip with a line when none.
    2. Create or update the row, counting created / updated / unchanged.
    3. RESTARTING at last_state_loss_time, TERMINATING at terminated_time, written
       conflict-ignoring so a re-read adds nothing. Nothing at start_time: the API documents it
       as when the creation request was received, not when the cluster came up (runs.models.uptime).
    """
    counts = {"created": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    by_id: dict[str, Cluster] = {}
    existing = {c.cluster_id: c for c in Cluster.objects.filter(cluster_id__in=[r.get("cluster_id") for r in records])}
    for record in records:
        cluster_id = record.get("cluster_id")
        if not cluster_id:
            continue
        fields = cluster_fields(record)
        cluster = existing.get(cluster_id)
        if cluster is None:
            team = teams(fields["creator"])
            if team is None:
                counts["skipped"] += 1
                result.say(f"{label}: skipped {cluster_id}: {teams.why_none(fields['creator'])}")
                continue
            cluster = Cluster.objects.create(cluster_id=cluster_id, team=team, **fields)
            counts["created"] += 1
        elif any(getattr(cluster, name) != value for name, value in fields.items()):
            for name, value in fields.items():
                setattr(cluster, name, value)
            cluster.save()
            counts["updated"] += 1
        else:
            counts["unchanged"] += 1
        by_id[cluster_id] = cluster
        events = [
            ClusterEvent(cluster=cluster, ts=ts, kind=kind, details={"derived_from": source})
            for kind, source in (
                ("RESTARTING", "last_state_loss_time"),
                ("TERMINATING", "terminated_time"),
            )
            if (ts := ms_to_dt(record.get(source)))
        ]
        ClusterEvent.objects.bulk_create(events, ignore_conflicts=True)
    result.items += counts["created"] + counts["updated"]
    result.say(f"{label}: " + ", ".join(f"{n} {what}" for what, n in counts.items()))
    return by_id


# --- Runs -------------------------------------------------------------------------------------


def _fingerprint(run: Run | None) -> tuple | None:
    """What a pass can change on a run: compared before and after to count 'unchanged'."""
    if run is None:
        return None
    run.refresh_from_db()
    attempts = tuple(
        run.attempts.values_list("number", "status", "started_at", "ended_at", "state_message", "mlflow_run_id")
    )
    shape = (
        run.accelerator_type, run.num_accelerators, run.experiment_name, run.mlflow_run_id, run.instance_type,
        run.usage_policy_name,
    )  # fmt: skip
    return (run.status, run.state_message, run.started_at, run.ended_at, run.cluster_id, shape, attempts)


def _reopen_for_retry(run: Run, data: dict[str, Any]) -> None:
    """A new try of a finished run makes it active again.

    `upsert_run` never moves a run back from finished (a late message must not undo an end),
    but a try with a higher attempt number than any stored is news, not a late message.
    """
    stored_max = max(run.attempts.values_list("number", flat=True), default=0)
    incoming_max = max((a["number"] for a in data["attempts"]), default=0)
    if run.status in RunStatus.finished() and data["status"] in RunStatus.active() and incoming_max > stored_max:
        Run.objects.filter(pk=run.pk).update(status=data["status"], ended_at=None)


def upsert_runs(
    records: list[dict[str, Any]],
    clusters: dict[str, Cluster],
    teams: TeamResolver,
    result: CollectResult,
    outputs: dict[str, dict[str, Any]] | None = None,
) -> dict[str, int]:
    """Group records into runs and upsert each; returns {external_id: latest Databricks run_id} of active runs.

    1. Group the tries by external id (the original attempt's run id).
    2. Reuse a stored run's source and team: a queued run gains its cluster only later and
       must not turn into a second (classic) run, nor move team when its creator joins one.
    3. Upsert through `ingest.upsert_run` (the API's own path), link the cluster, and count
       created / updated / unchanged by comparing a fingerprint before and after.
    """
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record.get("run_id") is not None:
            groups[external_id_of(record)].append(record)
    # Only the collector's own runs: one a key or a launcher wrote (even with the same id, even
    # in the creator's team) is never adopted; `upsert_run` refuses it with a line.
    stored = {
        run.external_id: run
        for run in Run.objects.filter(external_id__in=list(groups), origin=RunOrigin.COLLECTOR).exclude(
            source=RunSource.LOCAL
        )
    }
    counts = {"created": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    active: dict[str, int] = {}
    for external_id, tries in groups.items():
        run = stored.get(external_id)
        source = run.source if run else (RunSource.CLASSIC if any(map(is_classic, tries)) else RunSource.SERVERLESS)
        data, cluster = run_data(external_id, tries, source, clusters, outputs, result)
        team = run.team if run else teams(data.get("creator", ""))
        if team is None:
            counts["skipped"] += 1
            result.say(f"runs: skipped {external_id}: {teams.why_none(data.get('creator', ''))}")
            continue
        latest = max(tries, key=lambda r: int(r.get("attempt_number") or 0))
        if policy_id := usage_policy_id_of(latest):
            name, problem = policy_for_databricks_id(team, policy_id)
            if name:
                data["usage_policy_name"] = name
            elif problem:
                result.say(f"runs: {external_id}: usage policy {policy_id} not linked: {problem}")
        before = _fingerprint(run)
        if run is not None:
            _reopen_for_retry(run, data)
        try:
            upserted = upsert_run(team, data, origin=RunOrigin.COLLECTOR).run
        except IngestConflict as exc:
            counts["skipped"] += 1
            result.say(f"runs: skipped {external_id}: {exc}")
            continue
        if cluster is not None and upserted.cluster_id != cluster.pk:
            Run.objects.filter(pk=upserted.pk).update(cluster=cluster)
        after = _fingerprint(upserted)
        counts["created" if before is None else "updated" if before != after else "unchanged"] += 1
        # A sweep's iteration is never fetched by its own id: its sweep is tracked (`collect_once`).
        if upserted.status in RunStatus.active() and not latest.get("_sweep"):
            # A job's GPU task is tracked by its job, which `get-run` answers (and splits again).
            active[(latest.get("_job_task") or {}).get("run_id") or external_id] = int(latest["run_id"])
    result.items += counts["created"] + counts["updated"]
    result.say("runs: " + ", ".join(f"{n} {label}" for label, n in counts.items()))
    return active


def gpu_records(
    records: list[dict[str, Any]], clusters: dict[str, Cluster], result: CollectResult
) -> list[dict[str, Any]]:
    """The records of GPU workloads; the rest (notebook, pipeline, CPU cluster jobs) skipped with a count.

    A cluster's GPUs are known when it is stored (listed now or earlier); see
    `jobs_records.classify` for the rule.
    """
    wanted = {cid for r in records for cid in cluster_ids_of(r)} - set(clusters)
    known = clusters | {c.cluster_id: c for c in Cluster.objects.filter(cluster_id__in=wanted)}
    # GPUs with one worker up: zero only when neither the driver nor a worker has a GPU.
    gpus = {cid: cluster_gpus(c, 1) for cid, c in known.items()}
    kept = [r for r in records if classify(r, gpus) != RunKind.NOT_GPU]
    for record in kept:
        for spec in unknown_gpu_specs(record):
            result.say(
                f"runs: {record.get('run_id')}: GPU runtime {spec.get('spark_version')!r} with no GPU Airboard can"
                f" count (driver {spec.get('driver_node_type_id') or spec.get('node_type_id')!r}, workers"
                f" {spec.get('node_type_id')!r} x{spec_workers(spec)}): kept, GPU count unknown"
            )
    if skipped := len(records) - len(kept):
        result.say(f"runs: {skipped} record(s) without a GPU (notebook, pipeline or CPU cluster jobs) not stored")
    return kept


def job_cluster_records(records: list[dict[str, Any]], listed: set[str]) -> list[dict[str, Any]]:
    """`clusters list`-shaped records for GPU job clusters the cluster command did not list.

    A job cluster exists only for its run, so its spec in the run (`job_clusters[]`, a task's
    `new_cluster`) is all there is to know: instance types, workers or autoscale range, zone.
    It has no start time, so costs bill it for the run's attempts (driver + workers).
    """
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        for cluster_id, spec in new_cluster_specs(record):
            if cluster_id and cluster_id not in listed and spec_gpus(spec):
                name = f"job {record.get('job_id', '')} run {record.get('run_id')}"
                found[cluster_id] = {
                    **spec,
                    "cluster_id": cluster_id,
                    "cluster_name": spec.get("cluster_name") or name,
                    "creator_user_name": record.get("creator_user_name") or "",
                    "cluster_source": "JOB",
                }
    return list(found.values())


def fetch_mlflow_outputs(
    client: RunSourceClient, records: list[dict[str, Any]], result: CollectResult
) -> dict[str, dict[str, Any]]:
    """`jobs get-run-output` of each started AI Runtime task try whose MLflow run is not stored yet.

    Asked: tries not stored yet, and tries stored while still active without an MLflow run
    (the output names it once the workload starts). A try stored as finished is never asked
    again, with or without an answer, so a long list of old runs costs nothing per pass; at
    most MAX_OUTPUTS_PER_PASS calls a pass.
    """
    wanted: dict[str, tuple[str, int]] = {}
    for record in records:
        if ai_runtime_compute(record) is None:
            continue
        for attempt in record_attempts([record]):
            if attempt["task_run_id"] and attempt["status"] != RunStatus.QUEUED:
                wanted[str(attempt["task_run_id"])] = (external_id_of(record), attempt["number"])
    stored = set(
        Attempt.objects.filter(
            run__source=RunSource.SERVERLESS,
            run__external_id__in={ext for ext, _ in wanted.values()},
            run__origin=RunOrigin.COLLECTOR,  # a key's twin with the same id is not the source's run
        )
        .filter(~Q(mlflow_run_id="") | Q(status__in=RunStatus.finished()))
        .values_list("run__external_id", "number")
    )
    ask = [task for task, key in wanted.items() if key not in stored][:MAX_OUTPUTS_PER_PASS]
    if not ask:
        return {}
    outputs, problems = client.get_outputs(ask)
    result.lines += [f"runs: {problem}" for problem in problems]
    return outputs


def settled_sweeps(sweep_ids: list[str]) -> set[str]:
    """Sweeps (by parent run id) whose iterations are all stored finished, as many as the sweep said."""
    rows = Run.objects.filter(
        origin=RunOrigin.COLLECTOR, source=RunSource.SERVERLESS, parameters__sweep_run_id__in=list(sweep_ids)
    )
    found: dict[str, list[tuple[str, int | None]]] = defaultdict(list)
    for status, parameters in rows.values_list("status", "parameters"):
        found[str(parameters["sweep_run_id"])].append((status, parameters.get("sweep_iterations")))
    return {
        sweep_id
        for sweep_id, iterations in found.items()
        if all(status in RunStatus.finished() for status, _ in iterations)
        and len(iterations) >= max(int(total or 0) for _, total in iterations)
    }


def expand_sweeps(
    client: RunSourceClient, records: list[dict[str, Any]], result: CollectResult
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Each AI Runtime sweep's record replaced by its iterations' records; and the sweeps to track.

    A `for_each_task` sweep is not a run of its own: its iterations are the runs (each with its
    GPUs, window, tries and cost), named by `jobs get-run` of the for-each task
    (`jobs_records.iteration_records`), at most MAX_OUTPUTS_PER_PASS sweeps a pass. A sweep that
    ended and whose iterations are all stored finished is not asked again. A sweep whose
    iterations cannot be read now, or have not started, stores nothing this pass. Returned with
    the records: {sweep run id: run id} of sweeps still active (or unread), which the cursor
    tracks, so a sweep an `--active-only` list drops is fetched until its end is stored.
    """
    sweeps = [r for r in records if r.get("run_id") is not None and is_sweep(r) and ai_runtime_compute(r)]
    if not sweeps:
        return records, {}
    sweep_records = {id(r) for r in sweeps}
    kept = [r for r in records if id(r) not in sweep_records]
    ended = [external_id_of(r) for r in sweeps if map_status(r)[0] in RunStatus.finished()]
    settled = settled_sweeps(ended) if ended else set()
    tracked: dict[str, int] = {}
    asked = 0
    for sweep in sweeps:
        sweep_id = external_id_of(sweep)
        if sweep_id in settled:
            continue
        if map_status(sweep)[0] in RunStatus.active():
            tracked[sweep_id] = int(sweep["run_id"])
        task_run_id = for_each_task_run_id(sweep)
        if task_run_id is None or asked >= MAX_OUTPUTS_PER_PASS:
            tracked[sweep_id] = int(sweep["run_id"])
            continue
        asked += 1
        fetched, problems = client.get_runs([task_run_id])
        if problems or not fetched:
            result.lines += [f"runs: sweep {sweep_id}: iterations not read: {problem}" for problem in problems]
            tracked[sweep_id] = int(sweep["run_id"])
            continue
        iterations = iteration_records(sweep, fetched[0])
        if not iterations:
            result.say(f"runs: sweep {sweep_id}: no iterations yet")
        kept += iterations
    return kept, tracked


def stored_finished(run_ids: list[str]) -> set[str]:
    """Which of these Databricks run ids are stored as finished runs (nothing left to read)."""
    # Only the collector's own runs: a key's finished twin with the same id must not stop the
    # collector from reading the source's run.
    rows = Run.objects.filter(
        external_id__in=run_ids, status__in=RunStatus.finished(), origin=RunOrigin.COLLECTOR
    ).exclude(source=RunSource.LOCAL)
    # A sweep is stored as its iterations, a job of several GPU tasks as its tasks: settled once they all are.
    return set(rows.values_list("external_id", flat=True)) | settled_sweeps(run_ids) | settled_jobs(run_ids)


def settled_jobs(job_run_ids: list[str]) -> set[str]:
    """Jobs (by run id) stored as their GPU tasks (`split_gpu_tasks`), every one of them finished."""
    found: dict[str, list[str]] = defaultdict(list)
    rows = Run.objects.filter(origin=RunOrigin.COLLECTOR, parameters__job_run_id__in=list(job_run_ids))
    for status, parameters in rows.values_list("status", "parameters"):
        found[str(parameters["job_run_id"])].append(status)
    return {job for job, statuses in found.items() if all(s in RunStatus.finished() for s in statuses)}


def fill_workspace_region(result: CollectResult) -> None:
    """Runs of the source stored before AIRBOARD_DATABRICKS_REGION was set take it now.

    A finished run is never read again, so setting the region must reach the runs already
    stored; `updated_at` moves so the cost rollups price them again. Run once per value of the
    setting (the cursor keeps the value it ran for): runs stored later take it when stored.
    """
    region = settings.AIRBOARD_DATABRICKS_REGION
    if not region:
        return
    found = Run.objects.filter(origin=RunOrigin.COLLECTOR, region="").exclude(source=RunSource.LOCAL)
    if filled := found.update(region=region, updated_at=timezone.now()):
        Run.objects.filter(origin=RunOrigin.COLLECTOR, home_region="").exclude(source=RunSource.LOCAL).update(
            home_region=region
        )
        result.say(f"runs: {filled} stored run(s) without a region placed in {region} (AIRBOARD_DATABRICKS_REGION)")


def _take_notes(client: RunSourceClient) -> list[str]:
    """What the client noticed about what its commands printed (CliClient: one page of a paged
    answer); clients without notes have none."""
    take = getattr(client, "take_notes", None)
    return take() if take is not None else []


def collect_once(client: RunSourceClient | None = None) -> CollectResult:
    """One pass of the run source.

    1. Not configured: say so and touch no CollectorState.
    2. Upsert the classic clusters first, so runs can link to them.
    3. Read the runs the command prints. Runs that were active last pass but are no longer
       listed (an `--active-only` command drops them once they end) are fetched one by one
       with `get-run`, so their end is recorded instead of staying 'running' for ever.
    4. Upsert everything idempotently, then save the cursor: the newest start_time seen (the
       SDK path lists from there) and the runs still active.
    """
    client = client or client_from_settings(settled=stored_finished)
    if client is None:
        return CollectResult(lines=[NOT_CONFIGURED])
    with track("runs", CollectorKind.RUNS, settings.AIRBOARD_RUN_SOURCE_INTERVAL_SECONDS) as (state, result):
        cursor = state.cursor or {}
        teams = TeamResolver()
        cluster_records = client.list_clusters()
        result.lines += [f"clusters: {note}" for note in _take_notes(client)]
        clusters = upsert_clusters(cluster_records, teams, result) if cluster_records is not None else {}
        if settings.AIRBOARD_CLUSTER_EVENTS_COMMAND.strip():
            # Their lifecycle events decide their uptime and worker count (runs.models.uptime).
            timeout = settings.AIRBOARD_COLLECTOR_TIMEOUT_SECONDS
            result.lines += collect_events(
                clusters.values(), settings.AIRBOARD_CLUSTER_EVENTS_COMMAND, timeout, skip=result.skip
            )
        region = settings.AIRBOARD_DATABRICKS_REGION
        if region and cursor.get("workspace_region") != region:
            fill_workspace_region(result)  # once per value of the setting: new runs take it when stored
        records = client.list_runs(cursor.get("newest_start_time"))
        result.lines += [f"runs: {note}" for note in _take_notes(client)]
        listed = {external_id_of(r) for r in records if r.get("run_id") is not None}
        vanished = [run_id for ext, run_id in (cursor.get("active") or {}).items() if ext not in listed]
        if vanished:
            fetched, problems = client.get_runs(vanished)
            records += fetched
            result.lines += [f"runs: {problem}" for problem in problems]
            result.say(f"runs: fetched {len(fetched)} of {len(vanished)} run(s) no longer listed")
        records = gpu_records(records, clusters, result)
        if job_clusters := job_cluster_records(records, set(clusters)):
            clusters |= upsert_clusters(job_clusters, teams, result, label="job clusters")
        # Clusters a run names but the cluster command did not list are still linked when stored.
        wanted = {cid for r in records for cid in cluster_ids_of(r)} - set(clusters)
        clusters |= {c.cluster_id: c for c in Cluster.objects.filter(cluster_id__in=wanted)}
        fetched_ids = {external_id_of(r) for r in records}
        records, sweeps = expand_sweeps(client, records, result)
        records = [task for record in records for task in split_gpu_tasks(record)]
        outputs = fetch_mlflow_outputs(client, records, result)
        active = upsert_runs(records, clusters, teams, result, outputs) | sweeps
        # A run whose final state could not be fetched stays tracked: the next pass tries again.
        for ext, run_id in (cursor.get("active") or {}).items():
            if ext not in fetched_ids:
                active.setdefault(ext, run_id)
        starts = [int(r.get("start_time") or 0) for r in records] + [int(cursor.get("newest_start_time") or 0)]
        save_cursor(
            state,
            {
                "newest_start_time": max(starts),
                "active": dict(sorted(active.items())[-MAX_TRACKED_ACTIVE:]),
                "workspace_region": settings.AIRBOARD_DATABRICKS_REGION,
            },
        )
    return result
