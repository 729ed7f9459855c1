"""AI Runtime (serverless GPU) runs as Databricks reports them, read through the stand-in CLI.

The stand-in answers the Databricks CLI's own fixture runs (acceptance/experimental/air/list and
get at databricks/cli 7bbe285213) beside ours of the same shapes; see tests/data/databricks/SOURCES.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.management.base import CommandError

from billing.costs.serverless import estimate_costs_for_runs
from billing.models import UsagePolicy
from runs.choices import RunSource, RunStatus
from runs.collectors import runsource
from runs.collectors.databricks_cli import jobs_argv
from runs.collectors.jobs_records import (
    EnvelopeError,
    RunKind,
    ai_runtime_compute,
    air_run_ids,
    classify,
    for_each_task_run_id,
    iteration_records,
    max_retries_of,
    spec_gpus,
    spec_workers,
    strip_user_prefix,
)
from runs.models import Cluster, CollectorState, Run
from tests.conftest import DATABRICKS, StandInWorkspace, World, collect_runs, make_run


def test_ai_runtime_runs_carry_their_gpus_experiment_and_mlflow_run(world: World, workspace: StandInWorkspace) -> None:
    collect_runs()

    llama = Run.objects.get(source=RunSource.SERVERLESS, external_id="1001")
    assert (llama.accelerator_type, llama.num_accelerators, llama.gpus_per_node) == ("GPU_8xH100", 16, 8)
    # /Users/alice@example.com/llama-ft-8xh100 shown as the CLI shows it.
    assert llama.experiment_name == "llama-ft-8xh100"
    assert llama.parameters == {"mlflow_run_name": "llama-ft-lr3e-5"} and llama.max_retries == 3
    assert list(llama.attempts.get().nodes.values_list("index", flat=True)) == [0, 1]
    assert llama.mlflow_run_id == "8c1f6ad1e2d94b0c9c7f43f1a9e2b7d4"
    assert llama.mlflow_url == (
        "https://dbc-a1b2c3d4-e5f6.cloud.databricks.com/ml/experiments/3150812769128371/runs/8c1f6ad1e2d94b0c9c7f43f1a9e2b7d4"
    )

    # The CLI's own `air list` fixture run: 8 x H100 on one node, MLflow ids from get-output.
    qwen = Run.objects.get(external_id="334747067049496")
    assert (qwen.accelerator_type, qwen.num_accelerators, qwen.experiment_name) == ("GPU_8xH100", 8, "qwen-train")
    assert qwen.status == RunStatus.SUCCEEDED and qwen.attempts.get().mlflow_run_id == "run1"
    assert qwen.started_at == datetime(2024, 6, 5, 17, 32, 39, tzinfo=UTC)
    # No run_page_url in that fixture: no workspace host to build the MLflow link from.
    assert qwen.mlflow_url == ""

    # The CLI's `air get` fixture run from the older tool: gen_ai_compute_task.compute.
    legacy = Run.objects.get(external_id="123")
    assert (legacy.accelerator_type, legacy.num_accelerators, legacy.experiment_name) == ("GPU_1xA10", 1, "my-exp")
    assert legacy.max_retries == 3 and legacy.mlflow_run_id == ""  # get-output answered {}

    # A sweep is its iterations (see the sweep tests below); the parent is not a run of its own.
    assert not Run.objects.filter(external_id__in=["7001", "7002"]).exists()


def test_a_sweeps_iterations_are_runs_of_one_sweep(world: World, workspace: StandInWorkspace) -> None:
    output = collect_runs()

    # `jobs get-run` of the for-each task (7002) names the iterations, as the CLI's `air get` asks.
    assert any(call.split()[:3] == ["jobs", "get-run", "7002"] for call in workspace.calls())
    iterations = list(Run.objects.filter(parameters__sweep_run_id="7001").order_by("external_id"))
    assert [r.external_id for r in iterations] == ["7003", "7004"]
    first, second = iterations
    # The iterated task's GPUs (for_each_task.task), each iteration its own window and try.
    assert (first.accelerator_type, first.num_accelerators, first.experiment_name) == ("GPU_1xH100", 1, "lr-sweep")
    assert first.parameters == {
        "sweep_run_id": "7001", "sweep_name": "lr-sweep", "sweep_iteration": "iter_0", "sweep_iterations": 2,
    }  # fmt: skip
    assert (first.status, first.started_at) == (RunStatus.RUNNING, datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC))
    assert first.mlflow_run_id == "a3c5e7f9b1d34f6a8c0e2b4d6f8a0c21" and first.max_retries == 1
    assert first.run_page_url.endswith("#job/77/run/7003")
    # Still running: the cursor tracks the sweep (fetched by its own id), not its iterations.
    assert CollectorState.objects.get(name="runs").cursor["active"]["7001"] == 7001
    assert "7003" not in CollectorState.objects.get(name="runs").cursor["active"]
    assert "runs: 11 created" in output  # 10 runs as before, the sweep now two

    workspace.finish()
    collect_runs()

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == RunStatus.SUCCEEDED and first.ended_at == datetime(2026, 11, 2, 9, 50, tzinfo=UTC)
    # iter_1 failed once and was retried (7005): two attempts of one run, each with its window.
    assert second.status == RunStatus.SUCCEEDED
    assert [(a.number, a.status, a.started_at, a.ended_at) for a in second.attempts.order_by("number")] == [
        (1, RunStatus.FAILED, datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC), datetime(2026, 11, 2, 9, 20, tzinfo=UTC)),
        (2, RunStatus.SUCCEEDED, datetime(2026, 11, 2, 9, 21, tzinfo=UTC), datetime(2026, 11, 2, 10, 0, tzinfo=UTC)),
    ]  # fmt: skip
    assert second.attempts.get(number=2).mlflow_run_id == "b4d6f8a0c2e44a7b9d1f3c5e7a9b1d32"
    assert not Run.objects.filter(external_id="7005").exists()
    assert "7001" not in CollectorState.objects.get(name="runs").cursor["active"]
    # Each iteration costs its own GPU-hours: one H100 for 49.5 minutes, one for 19.5 + 39.
    costs = estimate_costs_for_runs(Run.objects.filter(parameters__sweep_run_id="7001"))
    hours = {Run.objects.get(pk=pk).external_id: float(cost.gpu_hours) for pk, cost in costs.items()}
    assert hours == {"7003": pytest.approx(49.5 / 60, abs=0.01), "7004": pytest.approx(58.5 / 60, abs=0.01)}

    # Ended and all stored finished: the for-each task is not asked again.
    before = len(workspace.calls())
    collect_runs()
    assert not any(call.split()[:3] == ["jobs", "get-run", "7002"] for call in workspace.calls()[before:])


def test_an_ended_sweep_listed_by_air_list_is_not_read_again_once_its_iterations_are_stored(
    settings, world: World, workspace: StandInWorkspace
) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{DATABRICKS} experimental air list --all-status -o json"
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""
    workspace.finish()
    collect_runs()
    assert Run.objects.filter(parameters__sweep_run_id="7001", status=RunStatus.SUCCEEDED).count() == 2

    before = len(workspace.calls())
    collect_runs()

    again = workspace.calls()[before:]
    assert not any(call.split()[:3] in (["jobs", "get-run", "7001"], ["jobs", "get-run", "7002"]) for call in again)


def test_an_iterations_page_names_its_sweep_and_links_the_other_iterations(
    world: World, workspace: StandInWorkspace
) -> None:
    collect_runs()
    first, second = Run.objects.filter(parameters__sweep_run_id="7001").order_by("external_id")
    # Another team's run naming the same sweep id must not show as a sibling.
    stranger = make_run(world.nlp, "9999", source=RunSource.SERVERLESS, parameters={"sweep_run_id": "7001"})

    page = world.client_for(world.alice).get(f"/runs/{first.pk}/").content.decode()

    assert "Sweep lr-sweep" in page and "iter_0" in page and "of 2" in page
    assert f'href="/runs/{second.pk}/"' in page and f"/runs/{stranger.pk}/" not in page
    assert "?sweep=7001" in page

    listing = world.client_for(world.alice).get("/runs/", {"sweep": "7001"}).content.decode()
    assert f"/runs/{first.pk}/" in listing and f"/runs/{second.pk}/" in listing
    assert "/runs/" + str(Run.objects.get(external_id="1001").pk) + "/" not in listing
    assert f"/runs/{stranger.pk}/" not in listing
    bad = world.client_for(world.alice).get("/runs/", {"sweep": "7001' or 1=1"})
    assert bad.status_code == 200 and "digits" in bad.content.decode()


def test_a_runs_usage_policy_is_read_from_effective_usage_policy_id(world: World, workspace: StandInWorkspace) -> None:
    vision = UsagePolicy.objects.create(name="vision-gpu", databricks_policy_id="6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
    vision.teams.add(world.vision)
    # 3001 (team nlp) is attributed to a policy that covers vision only: not linked.
    other = UsagePolicy.objects.create(name="vision-only", databricks_policy_id="0a9b8c7d-6e5f-4d3c-9b2a-1f0e9d8c7b6a")
    other.teams.add(world.vision)

    output = collect_runs()

    assert Run.objects.get(external_id="1001").usage_policy_name == "vision-gpu"
    # A sweep's iterations carry the sweep run's policy.
    assert set(Run.objects.filter(parameters__sweep_run_id="7001").values_list("usage_policy_name", flat=True)) == {
        "vision-gpu"
    }
    assert Run.objects.get(external_id="3001").usage_policy_name == ""
    assert "runs: 3001: usage policy 0a9b8c7d-6e5f-4d3c-9b2a-1f0e9d8c7b6a not linked: Policy vision-only" in output
    # No policy with the id (the workspace's own, not mirrored): nothing linked, nothing said.
    assert Run.objects.get(external_id="6001").usage_policy_name == ""


def test_task_retries_are_attempts_with_their_own_window_and_mlflow_run(
    world: World, workspace: StandInWorkspace
) -> None:
    collect_runs()

    run = Run.objects.get(external_id="6001")
    attempts = list(run.attempts.order_by("number"))
    assert [(a.number, a.status) for a in attempts] == [(1, RunStatus.FAILED), (2, RunStatus.RUNNING)]
    # The task's window, not the wrapper's (which includes a minute of queueing).
    assert run.submitted_at == datetime(2026, 11, 2, 8, 29, tzinfo=UTC)
    assert (attempts[0].started_at, attempts[0].ended_at) == (
        datetime(2026, 11, 2, 8, 30, tzinfo=UTC), datetime(2026, 11, 2, 8, 40, tzinfo=UTC),
    )  # fmt: skip
    assert run.started_at == attempts[0].started_at
    assert [a.mlflow_run_id for a in attempts] == [
        "0d4b1e3f6a8c4f0e9b2d7c5a1e3f6b80", "5e7a9c1b3d5f4a6c8e0b2d4f6a8c0e12",
    ]  # fmt: skip
    assert run.mlflow_run_id == attempts[1].mlflow_run_id
    assert [a.nodes.count() for a in attempts] == [2, 2]

    workspace.finish()
    collect_runs()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.ended_at == datetime(2026, 11, 2, 9, 30, tzinfo=UTC) == run.attempts.get(number=2).ended_at


def test_get_run_output_is_asked_once_per_task_try(world: World, workspace: StandInWorkspace) -> None:
    collect_runs()
    asked = [call for call in workspace.calls() if "get-run-output" in call]
    # Started AI Runtime task tries only: not 5001's queued one, not the classic run's task.
    assert sorted(call.split()[2] for call in asked) == sorted(
        ["1002", "2002", "2003", "4002", "6002", "6003", "7003", "7004", "334747067049497", "456"]
    )  # the sweep's iterations (7003, 7004), not its for-each task (7002)
    collect_runs()
    again = [call for call in workspace.calls() if "get-run-output" in call][len(asked) :]
    # Asked again: only tries still running without an MLflow run (the answer may come later).
    # Finished tries are never asked twice, whatever they answered (4002, 456, 2002).
    assert sorted(call.split()[2] for call in again) == ["2003", "7004"]


def test_cpu_jobs_are_not_stored_and_cost_no_gpu_time(world: World, workspace: StandInWorkspace) -> None:
    output = collect_runs()

    assert "runs: 2 record(s) without a GPU (notebook, pipeline or CPU cluster jobs) not stored" in output
    assert not Run.objects.filter(external_id__in=["999000999000", "8101"]).exists()
    assert not Cluster.objects.filter(cluster_id="1201-080000-cpuetl01").exists()
    costs = estimate_costs_for_runs(Run.objects.filter(source=RunSource.SERVERLESS))
    assert all(Run.objects.get(pk=pk).accelerator_type for pk in costs)


def test_a_gpu_job_cluster_is_read_from_the_run_for_instance_types_and_size(
    world: World, workspace: StandInWorkspace
) -> None:
    output = collect_runs()

    assert "job clusters: 1 created, 0 updated, 0 unchanged, 0 skipped" in output
    run = Run.objects.get(external_id="8001")
    assert (run.source, run.instance_type, run.region) == (RunSource.CLASSIC, "g5.12xlarge", "us-west-2")
    cluster = run.cluster
    assert cluster is not None and cluster.cluster_id == "1201-080000-jobgpu01"
    assert (cluster.node_type_id, cluster.driver_node_type_id) == ("g5.12xlarge", "g5.4xlarge")
    assert (cluster.num_workers, cluster.autoscale_min_workers, cluster.autoscale_max_workers) == (0, 1, 4)
    assert (cluster.team, cluster.start_time, cluster.raw["cluster_source"]) == (world.nlp, None, "JOB")
    assert "job clusters: 0 created, 0 updated, 1 unchanged, 0 skipped" in collect_runs()


def test_air_list_is_hydrated_with_jobs_get_run(settings, world: World, workspace: StandInWorkspace) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{DATABRICKS} -p prod experimental air list --all-status -o json"
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""

    output = collect_runs()

    # `air list` shows only AI Runtime runs (the CLI drops the legacy run without a script path);
    # the sweep 7001 is its two iterations.
    assert "runs: 8 created, 0 updated, 0 unchanged, 0 skipped" in output
    assert "-p prod jobs get-run 7002 -o json" in workspace.calls()
    assert "-p prod jobs get-run 1001 -o json" in workspace.calls()
    assert "-p prod jobs get-run-output 1002 -o json" in workspace.calls()
    llama = Run.objects.get(external_id="1001")
    assert (llama.accelerator_type, llama.num_accelerators, llama.mlflow_run_id) == (
        "GPU_8xH100", 16, "8c1f6ad1e2d94b0c9c7f43f1a9e2b7d4",
    )  # fmt: skip
    assert Run.objects.get(external_id="2001").attempts.count() == 2

    # Rows that ended and are stored finished are not fetched again; the others are.
    before = len(workspace.calls())
    collect_runs()
    again = workspace.calls()[before:]
    assert "-p prod jobs get-run 334747067049496 -o json" not in again
    assert "-p prod jobs get-run 1001 -o json" in again


def test_an_air_error_envelope_is_the_collectors_error(settings, world: World, workspace: StandInWorkspace) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{DATABRICKS} experimental air get notanumber -o json"
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""

    with pytest.raises(CommandError) as excinfo:
        collect_runs()

    assert 'INVALID_ARGS: invalid JOB_RUN_ID "notanumber": must be a positive integer' in str(excinfo.value)
    assert "INVALID_ARGS" in CollectorState.objects.get(name="runs").last_error


def test_an_air_get_envelope_is_fetched_as_the_jobs_run(settings, world: World, workspace: StandInWorkspace) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{DATABRICKS} air get 123 -o json"
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""

    collect_runs()

    assert list(Run.objects.values_list("external_id", "accelerator_type")) == [("123", "GPU_1xA10")]


def test_an_unknown_accelerator_type_is_named_and_not_stored_as_one(world: World) -> None:
    record = {
        "run_id": 9001, "creator_user_name": "bob@example.com", "state": {"life_cycle_state": "RUNNING"},
        "tasks": [{"task_key": "t", "run_id": 9002, "max_retries": 2, "ai_runtime_task": {
            "experiment": "x", "deployments": [{"compute": {"accelerator_type": "GPU_4xA100", "accelerator_count": 4}}],
        }}],
    }  # fmt: skip

    result = runsource.collect_once(_Client([record]))

    assert "runs: 9001: accelerator type 'GPU_4xA100' is not one Airboard knows" in result.lines
    run = Run.objects.get(external_id="9001")
    # The shape is unknown, the GPUs asked for and the retry budget are not.
    assert (run.accelerator_type, run.num_accelerators, run.max_retries) == ("", 4, 2)


def _legacy_run(run_id: int, gpu_type: str, num_gpus: int) -> dict[str, Any]:
    """The `runs/get` answer of databricks/cli 7bbe285213 acceptance/experimental/air/get/test.toml
    (a legacy `gen_ai_compute_task`), with the backend's GPU name in `compute.gpu_type` as the CLI's
    `gpuDisplayNames` (experimental/air/cmd/format.go) knows them: "h100_80gb", "a10"."""
    return {
        "run_id": run_id, "run_page_url": f"https://my-workspace.cloud.databricks.test/jobs/runs/{run_id}",
        "creator_user_name": "bob@example.com", "start_time": 1700000000000, "end_time": 1700000012000,
        "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"},
        "tasks": [{"task_key": "train", "run_id": run_id + 1, "attempt_number": 0, "max_retries": 3,
            "gen_ai_compute_task": {
                "mlflow_experiment_name": "/Users/user@example.com/my-exp",
                "compute": {"gpu_type": gpu_type, "num_gpus": num_gpus}, "dl_runtime_image": "ml-runtime-gpu:1.0",
            }}],
    }  # fmt: skip


def test_legacy_backend_gpu_names_are_read_as_accelerator_types(world: World) -> None:
    records = [_legacy_run(9300, "h100_80gb", 16), _legacy_run(9310, "h100_80gb", 1), _legacy_run(9320, "a10", 2)]

    result = runsource.collect_once(_Client(records))

    assert not [line for line in result.lines if "not one Airboard knows" in line]
    got = {
        run.external_id: (run.accelerator_type, run.num_accelerators, run.gpus_per_node, run.max_retries)
        for run in Run.objects.filter(external_id__in=["9300", "9310", "9320"])
    }
    assert got == {
        "9300": ("GPU_8xH100", 16, 8, 3),
        "9310": ("GPU_1xH100", 1, 1, 3),
        "9320": ("GPU_1xA10", 2, 1, 3),
    }
    # 16 H100s on 8-GPU nodes: two nodes an attempt.
    assert Run.objects.get(external_id="9300").attempts.get().nodes.count() == 2


def test_an_ai_runtime_task_after_another_task_is_the_runs_workload(world: World) -> None:
    # A job composing a data-prep notebook with the training task, as docs.databricks.com
    # machine-learning/ai-runtime/productionizing-training-workloads ("compose it with other
    # tasks") shows it: task settings as that page's bundle, ai_runtime_task as the CLI submits
    # it (tests/data/databricks/SOURCES.md); the train task was retried once.
    train = {
        "task_key": "train", "depends_on": [{"task_key": "prepare"}], "max_retries": 1,
        "ai_runtime_task": {"experiment": "llama-ft", "deployments": [{
            "command_path": "/Workspace/Users/bob@example.com/.air/cli_launch/llama-ft/command.sh",
            "compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 16},
        }]},
    }  # fmt: skip
    record = {
        "run_id": 9500, "creator_user_name": "bob@example.com", "start_time": 1793000000000,
        "state": {"life_cycle_state": "RUNNING"},
        "tasks": [
            {"task_key": "prepare", "run_id": 9501, "attempt_number": 0, "environment_key": "default",
             "notebook_task": {"notebook_path": "/Workspace/prep"}, "start_time": 1793000000000,
             "end_time": 1793000600000, "state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"}},
            {**train, "run_id": 9502, "attempt_number": 0, "start_time": 1793000600000, "end_time": 1793001200000,
             "state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"}},
            {**train, "run_id": 9503, "attempt_number": 1, "start_time": 1793001300000,
             "state": {"life_cycle_state": "RUNNING"}},
        ],
    }  # fmt: skip

    runsource.collect_once(_Client([record]))

    run = Run.objects.get(external_id="9500")
    assert (run.source, run.accelerator_type, run.num_accelerators, run.max_retries) == (
        RunSource.SERVERLESS, "GPU_8xH100", 16, 1,
    )  # fmt: skip
    assert run.experiment_name == "llama-ft"
    # The train task's tries, not the notebook's: two attempts of two nodes each.
    attempts = list(run.attempts.order_by("number"))
    assert [(a.number, a.status) for a in attempts] == [(1, RunStatus.FAILED), (2, RunStatus.RUNNING)]
    assert attempts[0].started_at == datetime.fromtimestamp(1793000600, tz=UTC)
    assert [a.nodes.count() for a in attempts] == [2, 2]
    # Task order in runs/get is not promised: the same run listed train-first reads the same.
    assert classify({**record, "tasks": record["tasks"][::-1]}, {}) == RunKind.AI_RUNTIME


def test_a_gpu_runtime_on_an_instance_type_airboard_does_not_know_is_kept_and_named(world: World) -> None:
    # g7e (RTX PRO 6000 Blackwell; AWS blog "How Synthesia optimizes generative AI video inference on
    # Amazon EC2 G7e instances", g7e.2xlarge) is a real EC2 GPU family our table lacks; the spec shape
    # is NVIDIA/spark-rapids-examples' Databricks start_cluster.sh with that worker type.
    spec = {"spark_version": "13.3.x-gpu-ml-scala2.12", "node_type_id": "g7e.2xlarge", "num_workers": 2}
    record = {
        "run_id": 9101, "creator_user_name": "bob@example.com", "state": {"life_cycle_state": "RUNNING"},
        "job_clusters": [{"job_cluster_key": "gpu", "new_cluster": spec}],
        "tasks": [
            {"task_key": "t", "run_id": 9102, "job_cluster_key": "gpu", "notebook_task": {"notebook_path": "/n"}},
        ],
    }  # fmt: skip
    cpu = {**record, "run_id": 9201, "job_clusters": [{"job_cluster_key": "gpu", "new_cluster": {
        "spark_version": "13.3.x-cpu-ml-scala2.12", "node_type_id": "m5.xlarge", "num_workers": 2,
    }}]}  # fmt: skip

    result = runsource.collect_once(_Client([record, cpu]))

    assert (
        "runs: 9101: GPU runtime '13.3.x-gpu-ml-scala2.12' with no GPU Airboard can count (driver 'g7e.2xlarge', "
        "workers 'g7e.2xlarge' x2): kept, GPU count unknown"
    ) in result.lines
    run = Run.objects.get(external_id="9101")
    assert (run.source, run.instance_type) == (RunSource.CLASSIC, "g7e.2xlarge")
    assert not Run.objects.filter(external_id="9201").exists()


def test_a_malformed_task_beside_the_workload_costs_only_its_own_record(world: World) -> None:
    good = {
        "run_id": 9600, "creator_user_name": "bob@example.com", "state": {"life_cycle_state": "RUNNING"},
        "tasks": [{"task_key": "train", "run_id": 9601, "ai_runtime_task": {"experiment": "x", "deployments": [
            {"compute": {"accelerator_type": "GPU_1xH100", "accelerator_count": 1}}]}}],
    }  # fmt: skip
    odd = {"run_id": 9700, "tasks": [{"task_key": "a", "notebook_task": {}}, {"task_key": "b", "for_each_task": "x"}]}

    runsource.collect_once(_Client([good, odd]))

    assert Run.objects.filter(external_id="9600").exists()
    assert classify(odd, {}) == RunKind.NOT_GPU


def test_the_sweep_read_is_the_workloads_not_another_for_each_task() -> None:
    """A job sweeping a preparation notebook and the training task: the training sweep's run id."""
    record = {
        "run_id": 700,
        "tasks": [
            {"task_key": "prep", "run_id": 701, "attempt_number": 0,
             "for_each_task": {"task": {"notebook_task": {"notebook_path": "/prep"}}}},
            {"task_key": "train", "run_id": 702, "attempt_number": 0,
             "for_each_task": {"task": {"ai_runtime_task": {"experiment": "x", "deployments": [
                 {"compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 8}}]}}}},
        ],
    }  # fmt: skip
    assert for_each_task_run_id(record) == 702
    assert for_each_task_run_id({**record, "tasks": record["tasks"][::-1]}) == 702


def test_a_known_type_without_a_count_is_kept_with_none(world: World) -> None:
    record = {
        "run_id": 9800, "creator_user_name": "bob@example.com", "state": {"life_cycle_state": "RUNNING"},
        "tasks": [{"task_key": "t", "run_id": 9801, "ai_runtime_task": {"experiment": "x", "deployments": [
            {"compute": {"accelerator_type": "GPU_8xH100"}}]}}],
    }  # fmt: skip

    runsource.collect_once(_Client([record]))

    run = Run.objects.get(external_id="9800")
    assert (run.accelerator_type, run.num_accelerators) == ("GPU_8xH100", 0)


def test_a_serverless_run_is_not_linked_to_another_tasks_cluster(world: World) -> None:
    cpu = {
        "cluster_id": "0101-cpu", "cluster_name": "etl", "creator_user_name": "bob@example.com",
        "spark_version": "15.4.x-scala2.12", "node_type_id": "m5.xlarge", "num_workers": 1,
        "aws_attributes": {"zone_id": "us-east-1a"}, "state": "RUNNING",
    }  # fmt: skip
    record = {
        "run_id": 9900, "creator_user_name": "bob@example.com", "state": {"life_cycle_state": "RUNNING"},
        "tasks": [
            {"task_key": "prep", "run_id": 9901, "existing_cluster_id": "0101-cpu", "notebook_task": {}},
            {"task_key": "train", "run_id": 9902, "ai_runtime_task": {"experiment": "x", "deployments": [
                {"compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 8}}]}},
        ],
    }  # fmt: skip

    class WithClusters(_Client):
        def list_clusters(self) -> list[dict[str, Any]]:  # type: ignore[override]
            return [cpu]

    runsource.collect_once(WithClusters([record]))

    run = Run.objects.get(external_id="9900")
    assert (run.source, run.accelerator_type) == (RunSource.SERVERLESS, "GPU_8xH100")
    assert (run.cluster_id, run.instance_type, run.region) == (None, "", "")


class _Client:
    def __init__(self, runs: list[dict[str, Any]]) -> None:
        self.runs = runs

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        return self.runs

    def get_runs(self, run_ids: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        return [], []

    def list_clusters(self) -> None:
        return None

    def get_outputs(self, task_run_ids: list[str]) -> tuple[dict[str, Any], list[str]]:
        return {}, []


def test_record_helpers() -> None:
    assert strip_user_prefix("/Users/tester@databricks.com/qwen-train") == "qwen-train"
    assert strip_user_prefix("/Shared/exp") == "/Shared/exp"
    assert air_run_ids({"v": 1, "data": {"runs": [{"run_id": "5"}, {"run_id": "5"}, {"run_id": "x"}]}}) == ["5"]
    with pytest.raises(EnvelopeError, match="NOT_FOUND: gone"):
        air_run_ids({"v": 1, "error": {"code": "NOT_FOUND", "message": "gone"}})
    argv = ["databricks", "experimental", "air", "list", "--all-status", "--profile", "prod", "-o", "json"]
    assert jobs_argv(argv, ["get-run"], 7) == ["databricks", "jobs", "get-run", "7", "--profile", "prod", "-o", "json"]
    assert jobs_argv(["databricks", "air", "get", "7"], ["get-run-output"], 8) == [
        "databricks", "jobs", "get-run-output", "8", "-o", "json",
    ]  # fmt: skip
    assert jobs_argv(["./export.sh"], ["get-run"], 1) is None


def test_which_records_are_gpu_work() -> None:
    notebook = {"run_id": 1, "tasks": [{"notebook_task": {"notebook_path": "/x"}, "existing_cluster_id": "c-cpu"}]}
    on_gpu = {"run_id": 2, "tasks": [{"notebook_task": {"notebook_path": "/x"}, "existing_cluster_id": "c-gpu"}]}
    unseen = {"run_id": 3, "tasks": [{"notebook_task": {"notebook_path": "/x"}, "existing_cluster_id": "c-new"}]}
    serverless_cpu = {"run_id": 4, "tasks": [{"notebook_task": {"notebook_path": "/x"}, "environment_key": "e"}]}
    known = {"c-cpu": 0, "c-gpu": 4}
    assert [classify(r, known) for r in (notebook, on_gpu, unseen, serverless_cpu)] == [
        RunKind.NOT_GPU, RunKind.CLASSIC, RunKind.CLASSIC, RunKind.NOT_GPU,
    ]  # fmt: skip
    autoscaled = {"node_type_id": "p4d.24xlarge", "driver_node_type_id": "m5.xlarge", "autoscale": {"min_workers": 2}}
    assert (spec_workers(autoscaled), spec_gpus(autoscaled)) == (2, 16)
    assert spec_gpus({"node_type_id": "i3.xlarge", "num_workers": 8}) == 0
    legacy_without_gpus = {"run_id": 5, "tasks": [{"gen_ai_compute_task": {"mlflow_experiment_name": "x"}}]}
    assert classify(legacy_without_gpus, {}) == RunKind.NOT_GPU


def test_the_policy_form_takes_the_databricks_policy_id(world: World) -> None:
    client = world.client_for(world.sam)  # a policy admin
    form = {"name": "vision-gpu", "period": "month", "period_start_day": "1", "action": "notify"}

    refused = client.post("/costs/policies/new/", form | {"databricks_policy_id": "vision-gpu"})
    assert refused.status_code == 200 and "a UUID" in refused.content.decode()

    saved = client.post(
        "/costs/policies/new/", form | {"databricks_policy_id": "6F1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D "}
    )
    assert saved.status_code == 302
    policy = UsagePolicy.objects.get(name="vision-gpu")
    assert policy.databricks_policy_id == "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    assert "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d" in client.get(f"/costs/policies/{policy.pk}/").content.decode()
    again = client.post(
        "/costs/policies/new/", form | {"name": "other", "databricks_policy_id": "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}
    )
    assert again.status_code == 200 and "A policy has this Databricks id." in again.content.decode()


def test_iterations_under_one_task_key_are_each_a_run_and_inherit_the_iterated_task() -> None:
    """Iterations carry no index: entries sharing a key and an attempt number are separate iterations."""
    parent = {
        "run_id": 70, "run_name": "s", "creator_user_name": "bob@example.com",
        "tasks": [{"task_key": "s", "run_id": 71, "for_each_task": {
            "inputs": "[1, 2]", "task": {"task_key": "s_iteration", "max_retries": 2, "ai_runtime_task": {
                "experiment": "/Users/bob@example.com/s",
                "deployments": [{"compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 16}}],
            }},
            "stats": {"task_run_stats": {"total_iterations": 2}},
        }}],
    }  # fmt: skip
    iterated = {"run_id": 71, "iterations": [
        {"task_key": "s_iteration", "run_id": 73, "attempt_number": 0, "start_time": 2000},
        {"task_key": "s_iteration", "run_id": 72, "attempt_number": 0, "start_time": 1000},
    ]}  # fmt: skip

    records = iteration_records(parent, iterated)

    assert [r["run_id"] for r in records] == [72, 73]
    assert [len(r["tasks"]) for r in records] == [1, 1]
    assert ai_runtime_compute(records[0]) == ("GPU_8xH100", 16) and max_retries_of(records[0]) == 2
    assert records[0]["_sweep"] == {
        "run_id": "70",
        "name": "s",
        "task_run_id": "71",
        "iteration": "s_iteration",
        "total": 2,
    }
    assert for_each_task_run_id(parent) == 71 and for_each_task_run_id(records[0]) is None
    assert iteration_records(parent, {"run_id": 71}) == []
