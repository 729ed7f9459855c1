"""Reading Databricks Jobs run records: what a run ran, on what, and how often it tried.

Pure functions over the JSON that `jobs list-runs --expand-tasks`, `jobs get-run`,
`jobs get-run-output` and `databricks air list|get -o json` print; no database, no client.
The shapes are the real ones (../shared/reference/databricks-ai-runtime.md, from the
Databricks CLI's `experimental/air/cmd/joblist.go` and its acceptance fixtures).

What a run is (the one documented choice for runs without a GPU):

1. **AI Runtime (serverless GPU)**: a task (the first that does: `workload_entry`), unwrapped
   from a `for_each_task` sweep, carries `ai_runtime_task` (GPUs in `deployments[0].compute`), or the older tool's
   `gen_ai_compute_task` with a `training_script_path` or GPUs in `compute`. The CLI's own
   list filter asks for the script path, yet `air get`'s fixture run has none and still names
   its GPUs: a task that holds GPUs is GPU time either way.
2. **Classic GPU**: a run on a cluster (`existing_cluster_id`, `cluster_instance`, the run's
   or a task's `new_cluster`, or a `job_clusters[]` entry named by a task's
   `job_cluster_key`) whose driver or worker instance type carries GPUs, or whose spec asks
   for a GPU runtime (`-gpu-` in `spark_version`) on an instance type we cannot count GPUs of.
3. **Anything else is skipped**, never stored: notebook and pipeline jobs on CPU clusters or
   serverless CPU are not GPU workloads, and a stored run would count GPU time
   (`num_accelerators` defaults to 1). A classic run on a cluster we cannot see (not listed,
   no spec in the record) is kept: it may well be a GPU cluster, and its cost says what is
   missing.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from dashboard.kit.commands import envelope_error
from runs.choices import GPUS_PER_NODE, AcceleratorType
from runs.models.instance_types import instance_gpus


class RunKind:
    """What a Jobs run record is to us (plain strings: they never reach the database)."""

    AI_RUNTIME = "ai_runtime"
    CLASSIC = "classic"
    NOT_GPU = "not_gpu"


def _for_each(task: dict[str, Any]) -> dict[str, Any]:
    """A task's `for_each_task` (the sweep: its iterated `task`, its `stats`), or {} when it has none."""
    sweep = task.get("for_each_task")
    return sweep if isinstance(sweep, dict) else {}


def hardware_accelerator_of(task: dict[str, Any]) -> str:
    """A serverless GPU task's `compute.hardware_accelerator` (e.g. 'GPU_1xA10'), or ''.

    The Jobs `RunTask.compute` / `Task.compute` (databricks-sdk `jobs.Compute`: "Hardware
    accelerator configuration for Serverless GPU workloads"): a notebook, Python or job task on
    one node of that shape, with no `ai_runtime_task`.
    """
    compute = task.get("compute")
    value = compute.get("hardware_accelerator") if isinstance(compute, dict) else None
    return value if isinstance(value, str) else ""


def _holds_gpus(task: Any) -> bool:
    return isinstance(task, dict) and bool(
        task.get("ai_runtime_task") or task.get("gen_ai_compute_task") or hardware_accelerator_of(task)
    )


def _carries_workload(task: dict[str, Any]) -> bool:
    return any(_holds_gpus(t) for t in (task, _for_each(task).get("task")))


def workload_entry(record: dict[str, Any]) -> dict[str, Any] | None:
    """The run's entry in `tasks` that carries the workload, or its first task when none does.

    The CLI's own runs hold one task, but an `ai_runtime_task` composes with other tasks in a
    job (a notebook that prepares data, then the training task), and `runs/get` does not
    promise task order: the first entry carrying `ai_runtime_task` or `gen_ai_compute_task`
    (directly or in a `for_each_task` sweep) is the workload's.
    """
    tasks = [t for t in record.get("tasks") or [] if isinstance(t, dict)]
    return next((t for t in tasks if _carries_workload(t)), tasks[0] if tasks else None)


def _settings(entry: dict[str, Any]) -> dict[str, Any]:
    """The settings that hold a task entry's GPUs: the entry, or its sweep's iterated task."""
    if _holds_gpus(entry):
        return entry
    inner = _for_each(entry).get("task")
    return inner if isinstance(inner, dict) else entry


def workload_task(record: dict[str, Any]) -> dict[str, Any] | None:
    """The task settings that carry the workload: `workload_entry`, or a sweep's iterated task.

    As the CLI's `firstTask`: a `for_each_task` sweep holds the workload in
    `for_each_task.task`; the outer task keeps the run id, window and attempts.
    """
    first = workload_entry(record)
    return None if first is None else _settings(first)


def gpu_task_keys(record: dict[str, Any]) -> list[str]:
    """`task_key`s of the run's tasks that hold serverless GPUs (directly or in a sweep), in listed order."""
    keys: list[str] = []
    for task in record.get("tasks") or []:
        if not isinstance(task, dict) or not isinstance(task.get("task_key"), str):
            continue
        if task["task_key"] not in keys and task_compute(_settings(task)) is not None:
            keys.append(task["task_key"])
    return keys


def split_gpu_tasks(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A job run with several serverless GPU tasks as one record per task; any other record as itself.

    Each GPU task of a job holds its own accelerators for its own window (tasks may run one
    after another, `depends_on`), with its own tries, experiment and MLflow run: a run of one
    accelerator type and count over the job's window could count neither. So each becomes a
    run of its own, as a sweep's iterations do, and the job's GPUs are their sum. Each record
    carries the job's fields, the task's entries (its tries) as `tasks`, the task's window and
    newest state, and `_job_task` (ours, never from Databricks): the job's run id (the original
    try's), the task key and every GPU task key of the job. `external_id_of` names it
    '<job run id>.<task key>': stable across run-level retries, which give tasks new run ids.
    """
    keys = gpu_task_keys(record)
    if len(keys) < 2:
        return [record]
    job_run_id = str(record.get("original_attempt_run_id") or record.get("run_id") or "")
    tasks = [t for t in record.get("tasks") or [] if isinstance(t, dict)]
    out = []
    for key in keys:
        entries = sorted(
            (t for t in tasks if t.get("task_key") == key), key=lambda t: int(t.get("attempt_number") or 0)
        )
        newest = entries[-1]
        sub = {k: v for k, v in record.items() if k not in ("tasks", "start_time", "end_time")}
        sub |= {
            "tasks": entries,
            "start_time": entries[0].get("start_time") or record.get("start_time") or 0,
            "end_time": newest.get("end_time") or 0,
            "_job_task": {"run_id": job_run_id, "task_key": key, "task_keys": keys},
        }
        if newest.get("state") or newest.get("status"):
            sub.pop("state", None)
            sub.pop("status", None)
            sub |= {k: newest[k] for k in ("state", "status") if newest.get(k)}
        out.append(sub)
    return out


def is_sweep(record: dict[str, Any]) -> bool:
    entry = workload_entry(record)
    return entry is not None and bool(entry.get("for_each_task"))


def for_each_task_run_id(record: dict[str, Any]) -> int | None:
    """The run id of a sweep's for-each task: `jobs get-run` of it answers the iterations.

    As the CLI's `buildSweepInfo` (experimental/air/cmd/sweep.go) asks for them: the parent run
    lists only the for-each task; `runs/get?run_id=<that task's run id>` answers a Run whose
    `iterations[]` (RunTask entries, paged with `next_page_token`, which the CLI and SDK
    follow) are the iterations.
    """
    if not is_sweep(record):
        return None
    # The workload's own for-each task: a job may sweep a preparation notebook too.
    key = (workload_entry(record) or {}).get("task_key")
    tries = [
        t
        for t in record.get("tasks") or []
        if isinstance(t, dict) and t.get("for_each_task") and (key is None or t.get("task_key") == key)
    ]
    newest = max(tries, key=lambda t: int(t.get("attempt_number") or 0))
    value = newest.get("run_id")
    if isinstance(value, int):
        return int(value)
    text = str(value or "")
    return int(text) if text.isdigit() else None


def sweep_total(record: dict[str, Any]) -> int | None:
    """Iterations the sweep will run (`for_each_task.stats.task_run_stats.total_iterations`), if said."""
    entry = workload_entry(record) or {}
    stats = (_for_each(entry).get("stats") or {}).get("task_run_stats") or {}
    value = stats.get("total_iterations")
    return int(value) if isinstance(value, int) else None


# Keys of the iterated task's settings an iteration inherits when its own entry omits them.
_WORKLOAD_KEYS = ("ai_runtime_task", "gen_ai_compute_task", "compute", "max_retries", "environment_key")


def iteration_records(parent: dict[str, Any], iterated: dict[str, Any]) -> list[dict[str, Any]]:
    """One Jobs-run-shaped record per iteration of a sweep, for the run source to store as a run.

    `parent` is the sweep's run (as listed), `iterated` the `jobs get-run` answer for its
    for-each task. The `iterations[]` entries carry no iteration index, so tries of one
    iteration are told apart by `task_key` only where that is safe: entries sharing a
    `task_key` with distinct `attempt_number`s are the tries of one iteration (the record's
    `tasks`, oldest first); where a key repeats an attempt number (every iteration under the
    nested task's key) each entry is an iteration of its own. Each record carries:

    - `run_id`: the iteration's first try's task run id (its Airboard external id), its window
      and state from its tries, the parent's creator, run page and usage policy;
    - in `tasks`, the entries themselves, each completed with the iterated task's settings
      (`for_each_task.task`: accelerators, experiment, retries) where it omits them;
    - `_sweep` (ours, never from Databricks): the parent run id and name, the for-each task's
      run id, the iteration's task key and the sweep's total, which the run source stores as
      the run's `sweep_*` parameters.
    """
    entries = [e for e in iterated.get("iterations") or [] if isinstance(e, dict) and e.get("run_id") is not None]
    inner = _for_each(workload_entry(parent) or {}).get("task") or {}
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for entry in entries:
        by_key.setdefault(entry.get("task_key"), []).append(entry)
    groups: list[list[dict[str, Any]]] = []
    for key, same in by_key.items():
        numbers = [int(e.get("attempt_number") or 0) for e in same]
        if key is not None and len(set(numbers)) == len(numbers):
            groups.append(sorted(same, key=lambda e: int(e.get("attempt_number") or 0)))
        else:
            groups += [[entry] for entry in same]
    records = []
    for tries in sorted(groups, key=lambda g: (int(g[0].get("start_time") or 0), int(g[0]["run_id"]))):
        first, latest = tries[0], tries[-1]
        tasks = [{**{k: inner[k] for k in _WORKLOAD_KEYS if k in inner and k not in e}, **e} for e in tries]
        record = {
            "run_id": first["run_id"],
            "run_name": parent.get("run_name") or "",
            "creator_user_name": parent.get("creator_user_name") or "",
            "run_page_url": first.get("run_page_url") or parent.get("run_page_url") or "",
            "start_time": first.get("start_time") or 0,
            "end_time": latest.get("end_time") or 0,
            "tasks": tasks,
            "_sweep": {
                "run_id": str(parent.get("original_attempt_run_id") or parent.get("run_id") or ""),
                "name": parent.get("run_name") or "",
                "task_run_id": str(iterated.get("run_id") or for_each_task_run_id(parent) or ""),
                "iteration": str(first.get("task_key") or ""),
                "total": sweep_total(parent),
            },
        }
        for key in ("state", "status"):
            if latest.get(key):
                record[key] = latest[key]
        if parent.get("effective_usage_policy_id"):
            record["effective_usage_policy_id"] = parent["effective_usage_policy_id"]
        records.append(record)
    return records


def usage_policy_id_of(record: dict[str, Any]) -> str:
    """The usage policy a run is attributed to: the Jobs Run's `effective_usage_policy_id`, or ''.

    The Run (`jobs.Run` / `BaseRun` in the SDK) carries only the effective id ("The id of the
    usage policy used by this run for cost attribution purposes"); `usage_policy_id` and
    `budget_policy_id` are fields of the submit request and the job settings, not of a run.
    """
    return str(record.get("effective_usage_policy_id") or "")


def ai_runtime_compute(record: dict[str, Any]) -> tuple[str, int] | None:
    """(accelerator type, total accelerator count) of a serverless GPU run, or None when it is not one."""
    task = workload_task(record)
    return None if task is None else task_compute(task)


def task_compute(task: dict[str, Any]) -> tuple[str, int] | None:
    """(accelerator type, total accelerator count) a task's settings hold, or None (no serverless GPU).

    `ai_runtime_task.deployments[0].compute`, the legacy `gen_ai_compute_task.compute`, or a
    serverless GPU task's `compute.hardware_accelerator` (one node of that shape).
    """
    current = task.get("ai_runtime_task")
    if isinstance(current, dict):
        deployments = current.get("deployments") or [{}]
        compute = (deployments[0] or {}).get("compute") or {}
        return str(compute.get("accelerator_type") or ""), int(compute.get("accelerator_count") or 0)
    legacy = task.get("gen_ai_compute_task")
    if isinstance(legacy, dict):
        compute = legacy.get("compute") or {}
        if legacy.get("training_script_path") or compute.get("gpu_type"):
            count = int(compute.get("num_gpus") or 0)
            return legacy_accelerator_type(str(compute.get("gpu_type") or ""), count), count
    if accelerator := hardware_accelerator_of(task):
        return accelerator, hardware_accelerator_gpus(accelerator)
    return None


# A node's GPUs as the shape names them (one or two digits: no node carries a hundred GPUs).
_SHAPE_NAME = re.compile(r"GPU_(?P<per_node>\d{1,2})x\w{1,32}")


def hardware_accelerator_gpus(accelerator_type: str) -> int:
    """GPUs of a serverless GPU task: one node of its shape (`GPU_8xH100`: 8); 0 when the name says none.

    A task's `compute` names only the shape, no count: the task runs on one node of it. A
    shape Airboard does not know still says its per-node count in its name (`GPU_<n>x<model>`).
    """
    known = accelerator_shape(accelerator_type)
    if known is not None:
        return known
    match = _SHAPE_NAME.fullmatch(accelerator_type)
    return int(match["per_node"]) if match else 0


def legacy_accelerator_type(gpu_type: str, num_gpus: int) -> str:
    """The accelerator type of a legacy `gen_ai_compute_task.compute.gpu_type`, else the name unchanged.

    Older runs carry the backend's GPU names, which the CLI shows as A10 and H100
    (databricks/cli 7bbe285213 `experimental/air/cmd/format.go`, `gpuDisplayNames`: "h100_80gb",
    "a10"); newer ones the accelerator type itself. `num_gpus` is the total across nodes, so
    H100s come on 8-GPU nodes when they fill whole nodes, on the 1-GPU shape when there is one;
    any other H100 count fits no shape and stays unknown.
    """
    if gpu_type == "a10":
        return AcceleratorType.A10_1.value
    if gpu_type == "h100_80gb":
        if num_gpus == 1:
            return AcceleratorType.H100_1.value
        if num_gpus and num_gpus % GPUS_PER_NODE[AcceleratorType.H100_8] == 0:
            return AcceleratorType.H100_8.value
    return gpu_type


def strip_user_prefix(name: str) -> str:
    """'/Users/<user>/exp' -> 'exp', as the CLI shows an experiment; other names unchanged."""
    if not name.startswith("/Users/"):
        return name
    parts = name.split("/", 3)
    return parts[3] if len(parts) == 4 else name


def experiment_of(record: dict[str, Any]) -> str:
    task = workload_task(record) or {}
    name = (task.get("ai_runtime_task") or {}).get("experiment") or (task.get("gen_ai_compute_task") or {}).get(
        "mlflow_experiment_name"
    )
    return strip_user_prefix(str(name or ""))


def mlflow_run_name_of(record: dict[str, Any]) -> str:
    """The MLflow run display name the workload asked for (`mlflow_run`), or ''."""
    task = workload_task(record) or {}
    return str((task.get("ai_runtime_task") or {}).get("mlflow_run") or "")


def accelerator_shape(accelerator_type: str) -> int | None:
    """GPUs a node of a known shape carries; None for a type Airboard does not know."""
    try:
        return GPUS_PER_NODE[AcceleratorType(accelerator_type)]
    except ValueError:
        return None


# --- Task attempts ------------------------------------------------------------------------


def task_attempts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The workload task's attempts in this record (`workload_entry`'s `task_key`), oldest first.

    Jobs lists each try of a task as its own entry of `tasks` (same `task_key`, its own
    `run_id`, `attempt_number` from 0, its own window and state); a record with no tasks is
    one attempt of itself.
    """
    tasks = [t for t in record.get("tasks") or [] if isinstance(t, dict)]
    entry = workload_entry(record)
    if entry is None:
        return []
    key = entry.get("task_key")
    same = [t for t in tasks if t.get("task_key") == key] if key is not None else [entry]
    return sorted(same, key=lambda t: int(t.get("attempt_number") or 0))


def max_retries_of(record: dict[str, Any]) -> int | None:
    value = (workload_entry(record) or {}).get("max_retries")
    return int(value) if isinstance(value, int) and value >= 0 else None


def mlflow_ids(output: dict[str, Any] | None) -> tuple[str, str]:
    """(experiment id, run id) from a `runs/get-output` answer's `ai_runtime_task_output`."""
    found = (output or {}).get("ai_runtime_task_output") or {}
    return str(found.get("mlflow_experiment_id") or ""), str(found.get("mlflow_run_id") or "")


def mlflow_url(run_page_url: str, experiment_id: str, run_id: str) -> str:
    """The workspace's MLflow page of a run, as the CLI links it ('' when any part is missing)."""
    parts = urlsplit(run_page_url or "")
    if not (parts.scheme and parts.netloc and experiment_id and run_id):
        return ""
    return f"{parts.scheme}://{parts.netloc}/ml/experiments/{experiment_id}/runs/{run_id}"


# --- Classic clusters: existing, job clusters, per-task new clusters -----------------------


def cluster_ids_of(record: dict[str, Any]) -> list[str]:
    """Classic clusters a run (or its tasks) ran on: cluster_instance or existing_cluster_id."""
    ids: list[str] = []
    for item in [record, *(record.get("tasks") or [])]:
        for candidate in ((item.get("cluster_instance") or {}).get("cluster_id"), item.get("existing_cluster_id")):
            if candidate and candidate not in ids:
                ids.append(candidate)
    return ids


def new_cluster_specs(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(cluster id or '', `new_cluster` spec) of every job cluster the run's tasks ran on.

    A task names its cluster by `new_cluster` (its own) or `job_cluster_key` (an entry of the
    run's `job_clusters[]`); the run itself may carry `cluster_spec.new_cluster` or a
    top-level `new_cluster` (runs/submit). The cluster id is the task's `cluster_instance`
    once the cluster exists.
    """
    shared = {
        c.get("job_cluster_key"): c.get("new_cluster")
        for c in record.get("job_clusters") or []
        if isinstance(c, dict) and isinstance(c.get("new_cluster"), dict)
    }
    found: list[tuple[str, dict[str, Any]]] = []
    for task in record.get("tasks") or []:
        own = task.get("new_cluster")
        spec = own if isinstance(own, dict) else shared.get(task.get("job_cluster_key"))
        if spec:
            found.append(((task.get("cluster_instance") or {}).get("cluster_id") or "", spec))
    for spec in ((record.get("cluster_spec") or {}).get("new_cluster"), record.get("new_cluster")):
        if isinstance(spec, dict):
            found.append(((record.get("cluster_instance") or {}).get("cluster_id") or "", spec))
    return found


def spec_workers(spec: dict[str, Any]) -> int:
    """Workers a spec asks for: `num_workers`, else the autoscale minimum (the least it holds)."""
    autoscale = spec.get("autoscale") or {}
    return int(spec.get("num_workers") or autoscale.get("min_workers") or 0)


def spec_gpus(spec: dict[str, Any]) -> int:
    """GPUs a cluster spec holds: the driver's plus each worker's (0 for a CPU-only cluster)."""
    worker = instance_gpus(str(spec.get("node_type_id") or ""))
    driver = instance_gpus(str(spec.get("driver_node_type_id") or spec.get("node_type_id") or ""))
    return (driver.count if driver else 0) + spec_workers(spec) * (worker.count if worker else 0)


def unknown_gpu_specs(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Cluster specs of the run on a GPU runtime whose instance types Airboard cannot count GPUs of.

    Databricks starts a GPU runtime (`spark_version` such as '13.3.x-gpu-ml-scala2.12') only on
    GPU instance types, so such a spec is a GPU cluster even when the type is not in our table.
    """
    return [
        spec
        for _, spec in new_cluster_specs(record)
        if "-gpu-" in str(spec.get("spark_version") or "").lower() and not spec_gpus(spec)
    ]


def classify(record: dict[str, Any], known_cluster_gpus: dict[str, int]) -> str:
    """AI_RUNTIME, CLASSIC or NOT_GPU (see the module docstring); `known_cluster_gpus` by cluster id."""
    if ai_runtime_compute(record) is not None:
        return RunKind.AI_RUNTIME
    specs = new_cluster_specs(record)
    spec_ids = {cid for cid, _ in specs if cid}
    if any(spec_gpus(spec) for _, spec in specs) or unknown_gpu_specs(record):
        return RunKind.CLASSIC  # a GPU runtime on an unknown type is kept as a cluster we cannot see
    others = [cid for cid in cluster_ids_of(record) if cid not in spec_ids]
    if any(known_cluster_gpus.get(cid, 1) for cid in others):
        return RunKind.CLASSIC  # a GPU cluster, or one we cannot see (kept: see the docstring)
    return RunKind.NOT_GPU


# --- `databricks air` envelopes -------------------------------------------------------------


class EnvelopeError(Exception):
    """`databricks air ... -o json` answered an `error` object."""


def is_air_envelope(payload: Any) -> bool:
    return isinstance(payload, dict) and "v" in payload and ("data" in payload or "error" in payload)


def air_run_ids(payload: dict[str, Any]) -> list[str]:
    """Run ids in an `air list` (`data.runs[]`) or `air get` (`data`) envelope; an error raises.

    The envelope's rows carry no accelerators, experiment or MLflow link (only the text table
    does), so the caller fetches each run's Jobs record for the rest.
    """
    if payload.get("error") is not None:
        raise EnvelopeError(envelope_error(payload))
    data = payload.get("data")
    if not isinstance(data, dict):
        raise EnvelopeError("the envelope has no data object")
    rows = data.get("runs") if "runs" in data else [data]
    if not isinstance(rows, list):
        raise EnvelopeError("data.runs is not a list")
    ids = [str(row.get("run_id")) for row in rows if isinstance(row, dict) and str(row.get("run_id") or "").isdigit()]
    return list(dict.fromkeys(ids))


# `air list` statuses of runs that ended: the row's status is the result state, else the life
# cycle state (experimental/air/cmd/format.go, statusWord).
AIR_ENDED = {
    "SUCCESS", "SUCCESS_WITH_FAILURES", "FAILED", "UPSTREAM_FAILED", "TIMEDOUT", "CANCELED", "UPSTREAM_CANCELED",
    "MAXIMUM_CONCURRENT_RUNS_REACHED", "EXCLUDED", "DISABLED", "SKIPPED", "INTERNAL_ERROR", "TERMINATED",
}  # fmt: skip


def air_ended_ids(payload: dict[str, Any]) -> list[str]:
    """Run ids of an `air list` envelope whose row status says the run has ended."""
    rows = (payload.get("data") or {}).get("runs") or []
    return [str(r.get("run_id")) for r in rows if isinstance(r, dict) and r.get("status") in AIR_ENDED]
