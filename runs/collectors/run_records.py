"""Databricks run and cluster records read into Airboard fields: no database writes.

What `runsource` stores, shaped here: a record's status, its tries as attempts, the AI Runtime
workload fields, a cluster's fields and region, and the `upsert_run` payload of a run.

Status mapping (the legacy `state` object is preferred where present: only it tells a
timeout apart; the newer `status` object is the fallback):

    life_cycle_state QUEUED, PENDING, BLOCKED, WAITING_FOR_RETRY     -> queued
    life_cycle_state RUNNING, TERMINATING (no result yet)             -> running
    result_state SUCCESS, SUCCESS_WITH_FAILURES                       -> succeeded
    result_state FAILED, UPSTREAM_FAILED                              -> failed
    result_state TIMEDOUT                                             -> timed_out
    result_state CANCELED, UPSTREAM_CANCELED                          -> cancelled
    result_state MAXIMUM_CONCURRENT_RUNS_REACHED, EXCLUDED, DISABLED  -> cancelled (never ran)
    life_cycle_state SKIPPED (no result)                              -> cancelled (never ran)
    life_cycle_state INTERNAL_ERROR, or TERMINATED with no result     -> failed
    status.state QUEUED, PENDING, BLOCKED, WAITING                    -> queued
    status.state RUNNING, TERMINATING                                 -> running
    status TERMINATED + termination code SUCCESS(_WITH_FAILURES)      -> succeeded
    status TERMINATED + USER_CANCELED, CANCELED, SKIPPED              -> cancelled
    status TERMINATED + MAX_CONCURRENT_RUNS_EXCEEDED, DISABLED,
      WORKSPACE_RUN_LIMIT_EXCEEDED, MAX_JOB_QUEUE_SIZE_EXCEEDED,
      BUDGET_POLICY_LIMIT_EXCEEDED                                    -> cancelled (never ran)
    status TERMINATED + any other code (DRIVER_ERROR, CLUSTER_ERROR)  -> failed
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from runs.choices import RunSource, RunStatus
from runs.collectors.jobs_records import (
    accelerator_shape,
    ai_runtime_compute,
    cluster_ids_of,
    experiment_of,
    is_sweep,
    max_retries_of,
    mlflow_ids,
    mlflow_run_name_of,
    mlflow_url,
    new_cluster_specs,
    spec_gpus,
    task_attempts,
)
from runs.collectors.state import CollectResult
from runs.models import Cluster
from runs.models.instance_types import cluster_gpus, instance_gpus
from runs.models.uptime import default_workers

_LIFECYCLE_ACTIVE = {
    "QUEUED": RunStatus.QUEUED,
    "PENDING": RunStatus.QUEUED,
    "BLOCKED": RunStatus.QUEUED,
    "WAITING_FOR_RETRY": RunStatus.QUEUED,
    "WAITING": RunStatus.QUEUED,  # status.state (newer API)
    "RUNNING": RunStatus.RUNNING,
    "TERMINATING": RunStatus.RUNNING,
}
_RESULT = {
    "SUCCESS": RunStatus.SUCCEEDED,
    "SUCCESS_WITH_FAILURES": RunStatus.SUCCEEDED,
    "FAILED": RunStatus.FAILED,
    "UPSTREAM_FAILED": RunStatus.FAILED,
    "TIMEDOUT": RunStatus.TIMED_OUT,
    "CANCELED": RunStatus.CANCELLED,
    "UPSTREAM_CANCELED": RunStatus.CANCELLED,
    "MAXIMUM_CONCURRENT_RUNS_REACHED": RunStatus.CANCELLED,
    "EXCLUDED": RunStatus.CANCELLED,
    "DISABLED": RunStatus.CANCELLED,
}
_TERMINATION_CODE = {
    "SUCCESS": RunStatus.SUCCEEDED,
    "SUCCESS_WITH_FAILURES": RunStatus.SUCCEEDED,
    "USER_CANCELED": RunStatus.CANCELLED,
    # By the platform, "for example, if the maximum run duration was exceeded" (the SDK's
    # TerminationCodeCode): not always a timeout, so not called one.
    "CANCELED": RunStatus.CANCELLED,
    "SKIPPED": RunStatus.CANCELLED,
    # Never ran, as MAXIMUM_CONCURRENT_RUNS_REACHED and DISABLED are on the `state` path: the job's
    # or the workspace's concurrency limit, the job's queue, a disabled run, a budget policy.
    "MAX_CONCURRENT_RUNS_EXCEEDED": RunStatus.CANCELLED,
    "WORKSPACE_RUN_LIMIT_EXCEEDED": RunStatus.CANCELLED,
    "MAX_JOB_QUEUE_SIZE_EXCEEDED": RunStatus.CANCELLED,
    "DISABLED": RunStatus.CANCELLED,
    "BUDGET_POLICY_LIMIT_EXCEEDED": RunStatus.CANCELLED,
}


def ms_to_dt(value: Any) -> datetime | None:
    """Epoch milliseconds to an aware datetime; 0 or missing (Databricks' 'not yet') is None."""
    if not value:
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


def map_status(record: dict[str, Any]) -> tuple[str, str]:
    """(Airboard status, message) for one Databricks run record; see the module docstring."""
    state = record.get("state") or {}
    lifecycle = state.get("life_cycle_state")
    if lifecycle:
        message = state.get("state_message") or ""
        result = state.get("result_state")
        if result in _RESULT:
            return _RESULT[result], message or result
        if lifecycle in _LIFECYCLE_ACTIVE:
            return _LIFECYCLE_ACTIVE[lifecycle], message
        if lifecycle == "SKIPPED":
            return RunStatus.CANCELLED, message or "skipped"
        return RunStatus.FAILED, message or lifecycle
    status = record.get("status") or {}
    details = status.get("termination_details") or {}
    message = details.get("message") or ""
    if status.get("state") in _LIFECYCLE_ACTIVE:
        return _LIFECYCLE_ACTIVE[status["state"]], message
    if status.get("state") == "TERMINATED":
        code = details.get("code") or ""
        return _TERMINATION_CODE.get(code, RunStatus.FAILED), message or code
    return RunStatus.QUEUED, message


def is_classic(record: dict[str, Any]) -> bool:
    """A run on a classic cluster (existing or job cluster); AI Runtime runs name none."""
    if ai_runtime_compute(record) is not None:
        return False
    return bool(cluster_ids_of(record) or new_cluster_specs(record))


# --- Clusters -----------------------------------------------------------------------------------


# AWS zones are the region and a letter (us-west-2a, us-gov-west-1b); GCP zones the region, a dash
# and a letter (us-central1-a, europe-west4-b). Databricks' own values ("auto" on AWS, "HA" and
# "AUTO" on GCP) and AWS Local Zones (us-west-2-lax-1a) name no region of their own.
_AWS_ZONE = re.compile(r"(?P<region>[a-z]{2}(?:-gov)?-[a-z]+-\d+)[a-z]")
_GCP_ZONE = re.compile(r"(?P<region>[a-z]+-[a-z]+\d+)-[a-z]")


def region_from_zone(zone_id: str) -> str:
    """'us-west-2a' (AWS) or 'us-central1-a' (GCP) -> the region; 'auto', 'HA' or another shape -> ''."""
    match = _AWS_ZONE.fullmatch(zone_id) or _GCP_ZONE.fullmatch(zone_id)
    return match["region"] if match else ""


def cluster_region(record: dict[str, Any]) -> str:
    """The region of a `clusters list` / `clusters get` record, from its AWS or GCP zone.

    Azure records name no location (the workspace's region is not in them): ''.
    """
    for attributes in ("aws_attributes", "gcp_attributes"):
        section = record.get(attributes)
        zone = section.get("zone_id") if isinstance(section, dict) else None
        if isinstance(zone, str) and (region := region_from_zone(zone)):
            return region
    return ""


def cluster_fields(record: dict[str, Any]) -> dict[str, Any]:
    """Cluster model fields from one `clusters list` record (the record itself goes to `raw`)."""
    autoscale = record.get("autoscale") or {}
    spark_conf = record.get("spark_conf") or {}
    tags = record.get("custom_tags") or {}
    single_node = bool(
        record.get("is_single_node")
        or spark_conf.get("spark.databricks.cluster.profile") == "singleNode"
        or tags.get("ResourceClass") == "SingleNode"
    )
    return {
        "name": record.get("cluster_name") or "",
        "creator": record.get("creator_user_name") or "",
        "spark_version": record.get("spark_version") or "",
        "node_type_id": record.get("node_type_id") or "",
        "driver_node_type_id": record.get("driver_node_type_id") or record.get("node_type_id") or "",
        "num_workers": int(record.get("num_workers") or 0),
        "autoscale_min_workers": autoscale.get("min_workers"),
        "autoscale_max_workers": autoscale.get("max_workers"),
        "single_node": single_node,
        "data_security_mode": record.get("data_security_mode") or "",
        "single_user_name": record.get("single_user_name") or "",
        "runtime_engine": record.get("runtime_engine") or "",
        "docker_image": (record.get("docker_image") or {}).get("url") or "",
        "region": cluster_region(record),
        "state": record.get("state") or "",
        "start_time": ms_to_dt(record.get("start_time")),
        "last_restarted_time": ms_to_dt(record.get("last_restarted_time")),
        "terminated_time": ms_to_dt(record.get("terminated_time")),
        "raw": record,
    }


# --- Runs ---------------------------------------------------------------------------------------


def external_id_of(record: dict[str, Any]) -> str:
    """All tries of one run share the original try's run id; a GPU task of a job of several
    (`jobs_records.split_gpu_tasks`) is '<job run id>.<task key>'."""
    if job := record.get("_job_task"):
        return f"{job['run_id']}.{job['task_key']}"
    return str(record.get("original_attempt_run_id") or record["run_id"])


def record_attempts(tries: list[dict[str, Any]], nodes: int = 1) -> list[dict[str, Any]]:
    """The attempts of one run from all its records, oldest first (see the module docstring).

    Each record is a run-level try (`attempt_number` on the run); inside it each entry of the
    first task is a task-level try (`attempt_number` on the task, as `max_retries` spends
    them). A run-level retry's task repeats the run's `attempt_number`, so the attempt number
    is the larger of the two + 1, and a record read alone (a `get-run` of the latest try)
    numbers its attempts as the full list does. The window and state are the
    task's own; a task entry without a state (the CLI's list fixtures) takes the run's for its
    newest try and counts as failed for the earlier ones (it was retried).
    """
    attempts: dict[int, dict[str, Any]] = {}
    for record in sorted(tries, key=lambda r: int(r.get("attempt_number") or 0)):
        base = int(record.get("attempt_number") or 0)
        entries = task_attempts(record) or [record]
        for position, entry in enumerate(entries):
            if entry.get("state") or entry.get("status"):
                status, message = map_status(entry)
            elif position == len(entries) - 1:
                status, message = map_status(record)
            else:
                status, message = RunStatus.FAILED, "retried"
            start = ms_to_dt(entry.get("start_time") or record.get("start_time"))
            end = ms_to_dt(entry.get("end_time") or record.get("end_time")) if status in RunStatus.finished() else None
            started = start if status != RunStatus.QUEUED else None
            number = max(base, int(entry.get("attempt_number") or 0) if entry is not record else 0) + 1
            attempts[number] = {
                "number": number,
                "status": status,
                "state_message": message,
                "started_at": started,
                "ended_at": end,
                # Read by `fetch_mlflow_outputs`; `upsert_run` ignores it.
                "task_run_id": entry.get("run_id") if entry is not record else None,
                # Every node of the shape (the log source and the run page expect at least one).
                "nodes": [
                    {"index": index, "status": status, "started_at": started, "ended_at": end} for index in range(nodes)
                ],
            }
    return [attempts[number] for number in sorted(attempts)]


def workload_fields(latest: dict[str, Any], result: CollectResult | None = None) -> tuple[dict[str, Any], int]:
    """Run fields an AI Runtime record carries, and its node count (1 for any other run)."""
    compute = ai_runtime_compute(latest)
    if compute is None:
        return {}, 1
    accelerator_type, count = compute
    fields: dict[str, Any] = {"experiment_name": experiment_of(latest)}
    # An unknown type keeps its GPU count and retries: only the shape (and so nodes) is unknown.
    per_node = accelerator_shape(accelerator_type)
    if per_node is None:
        if count > 0:
            fields["num_accelerators"] = count
        if result is not None:
            result.say(f"runs: {latest.get('run_id')}: accelerator type {accelerator_type!r} is not one Airboard knows")
    else:
        fields |= {"accelerator_type": accelerator_type, "num_accelerators": count, "gpus_per_node": per_node}
    if (retries := max_retries_of(latest)) is not None:
        fields["max_retries"] = retries
    parameters: dict[str, Any] = {"mlflow_run_name": mlflow_run_name_of(latest), "sweep": is_sweep(latest)}
    # An iteration of a sweep names its sweep (the runs list filters by `sweep_run_id`).
    sweep = latest.get("_sweep") or {}
    parameters |= {
        "sweep_run_id": sweep.get("run_id"),
        "sweep_name": sweep.get("name"),
        "sweep_iteration": sweep.get("iteration"),
        "sweep_iterations": sweep.get("total"),
    }
    # A GPU task of a job of several names its job and task (the run page lists the others).
    job = latest.get("_job_task") or {}
    parameters |= {"job_run_id": job.get("run_id"), "job_task_key": job.get("task_key")}
    if job and not fields["experiment_name"]:
        fields["experiment_name"] = f"{latest.get('run_name') or job['run_id']} / {job['task_key']}"
    fields["parameters"] = {key: value for key, value in parameters.items() if value}
    return fields, max(count // per_node, 1) if per_node else 1


def run_data(
    external_id: str,
    records: list[dict[str, Any]],
    source: str,
    clusters: dict[str, Cluster],
    outputs: dict[str, dict[str, Any]] | None = None,
    result: CollectResult | None = None,
) -> tuple[dict[str, Any], Cluster | None]:
    """The `upsert_run` payload for one run from all its tries, and the stored cluster it ran on.

    `outputs` holds `jobs get-run-output` answers by task run id: each attempt's MLflow run
    (every retry is a new MLflow run), the newest one also the run's.
    """
    tries = sorted(records, key=lambda r: int(r.get("attempt_number") or 0))
    latest = tries[-1]
    status, message = map_status(latest)
    workload, nodes = workload_fields(latest, result)
    attempts = record_attempts(tries, nodes)
    mlflow: tuple[str, str] = ("", "")
    for attempt in attempts:
        experiment_id, mlflow_run_id = mlflow_ids((outputs or {}).get(str(attempt["task_run_id"])))
        if mlflow_run_id:
            attempt["mlflow_run_id"] = mlflow_run_id
            mlflow = (experiment_id, mlflow_run_id)
    # An AI Runtime run is serverless: a cluster another task of its job ran on is not its own.
    own = cluster_ids_of(latest) if source == RunSource.CLASSIC else []
    cluster = next((clusters[cid] for cid in own if cid in clusters), None)
    data: dict[str, Any] = {
        "source": source,
        "external_id": external_id,
        # The name the job gives the run; an AI Runtime run's experiment replaces it.
        "experiment_name": latest.get("run_name") or "",
        "creator": latest.get("creator_user_name") or "",
        "run_page_url": latest.get("run_page_url") or "",
        "status": status,
        "state_message": message,
        "submitted_at": ms_to_dt(tries[0].get("start_time")),
        "started_at": next((a["started_at"] for a in attempts if a["started_at"]), None),
        "ended_at": attempts[-1]["ended_at"] if attempts else None,
        "attempts": attempts,
        **{key: value for key, value in workload.items() if value not in (None, "", {})},
    }
    if mlflow[1]:
        data["mlflow_run_id"] = mlflow[1]
        data["mlflow_url"] = mlflow_url(data["run_page_url"], *mlflow)
    if cluster is not None:
        data["instance_type"] = cluster.node_type_id
        data["region"] = cluster.region
    elif source == RunSource.CLASSIC:
        data["instance_type"] = next((spec.get("node_type_id") or "" for _, spec in new_cluster_specs(latest)), "")
        zones = (cluster_region(spec) for _, spec in new_cluster_specs(latest))
        data["region"] = next((region for region in zones if region), "")
    if source == RunSource.CLASSIC:
        data |= classic_gpus(latest, cluster)
    # The workspace's region (AIRBOARD_DATABRICKS_REGION) for a run its record places nowhere; a
    # run on a cluster in a zone of its own keeps that region.
    workspace_region = settings.AIRBOARD_DATABRICKS_REGION
    if workspace_region:
        data["home_region"] = workspace_region
        data["region"] = data.get("region") or workspace_region
    return {key: value for key, value in data.items() if value not in (None, "")}, cluster


def classic_gpus(record: dict[str, Any], cluster: Cluster | None) -> dict[str, int]:
    """`num_accelerators` and `gpus_per_node` of a classic run: every GPU of its cluster.

    The driver's GPUs (none on a CPU driver) plus each worker's, per instance from the
    instance-type table, with the workers the cluster starts with (`num_workers`, else the
    autoscale minimum), as the clusters page counts them: driver + 4 workers of a 1-GPU T4
    type hold 5. The stored cluster when the run has one, else the run's own cluster spec;
    {} when neither names a type Airboard can count.
    """
    if cluster is not None:
        total = cluster_gpus(cluster, default_workers(cluster)[0])
        worker = instance_gpus(cluster.node_type_id) or instance_gpus(cluster.driver_node_type_id)
    else:
        specs = [spec for _, spec in new_cluster_specs(record) if spec_gpus(spec)]
        if not specs:
            return {}
        spec = specs[0]
        total = spec_gpus(spec)
        worker = instance_gpus(str(spec.get("node_type_id") or "")) or instance_gpus(
            str(spec.get("driver_node_type_id") or "")
        )
    if not total:
        return {}
    return {"num_accelerators": total, "gpus_per_node": worker.count if worker else 1}
