"""The run source: Databricks job runs and clusters, read through the stand-in CLI in tests/bin."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management.base import CommandError

from dashboard.kit.commands import CollectorError
from dashboard.kit.redaction import redact
from runs.choices import RunSource, RunStatus
from runs.collectors import run_records, runsource
from runs.collectors.databricks_cli import get_run_argv, unwrap_list
from runs.models import Attempt, Cluster, ClusterEvent, CollectorState, Run
from tests.conftest import (
    BIN,
    DATABRICKS,
    T0,
    StandInWorkspace,
    World,
    collect_runs,
    start_worker,
    stop_worker,
    wait_for,
)

BROKEN = shlex.quote(str(BIN / "databricks-broken"))


def test_first_pass_creates_runs_with_attempts_statuses_and_teams(world: World, workspace: StandInWorkspace) -> None:
    output = collect_runs()

    # 11 GPU runs (the sweep 7001 is its two iterations); the CLI fixture's notebook run and a CPU
    # job cluster's run are not GPU work.
    assert "runs: 2 record(s) without a GPU (notebook, pipeline or CPU cluster jobs) not stored" in output
    assert "runs: 11 created, 0 updated, 0 unchanged, 0 skipped" in output
    assert not Run.objects.filter(external_id__in=["999000999000", "8101"]).exists()
    running = Run.objects.get(external_id="1001")
    assert (running.source, running.status, running.team, running.user) == (
        RunSource.SERVERLESS, RunStatus.RUNNING, world.vision, world.alice,
    )  # fmt: skip
    assert running.creator == "alice@example.com"
    assert running.experiment_name == "llama-ft-8xh100"
    assert running.run_page_url.endswith("#job/11/run/1001")
    assert running.started_at == T0 and running.ended_at is None
    assert list(running.attempts.values_list("number", "status")) == [(1, RunStatus.RUNNING)]
    assert running.attempts.get().nodes.filter(index=0).exists()

    # The retry 2002 is attempt 2 of run 2001, not a run of its own.
    assert not Run.objects.filter(external_id="2002").exists()
    retried = Run.objects.get(external_id="2001")
    assert retried.status == RunStatus.RUNNING
    assert list(retried.attempts.values_list("number", "status")) == [(1, RunStatus.FAILED), (2, RunStatus.RUNNING)]
    assert "illegal memory access" in retried.attempts.get(number=1).state_message

    classic = Run.objects.get(external_id="3001")
    assert (classic.source, classic.status, classic.team) == (RunSource.CLASSIC, RunStatus.TIMED_OUT, world.nlp)
    assert classic.cluster is not None and classic.cluster.cluster_id == "0923-164208-gpuml4x1"
    assert (classic.instance_type, classic.region) == ("g5.12xlarge", "us-west-2")

    # Newer API (status object only), creator without an account: the default team.
    cancelled = Run.objects.get(external_id="4001")
    assert (cancelled.status, cancelled.team, cancelled.user) == (RunStatus.CANCELLED, world.vision, None)
    assert cancelled.state_message == "Run was cancelled by ghost@contractor.example"

    queued = Run.objects.get(external_id="5001")
    assert queued.status == RunStatus.QUEUED and queued.started_at is None
    state = CollectorState.objects.get(name="runs")
    assert state.items_last_run == 11 + 3 + 1 and state.last_error == ""
    assert state.cursor["active"] == {
        "1001": 1001, "2001": 2002, "5001": 5001, "6001": 6001, "7001": 7001, "8001": 8001,
    }  # fmt: skip


def test_a_second_pass_after_runs_end_updates_them_without_duplicates(
    world: World, workspace: StandInWorkspace
) -> None:
    collect_runs()
    workspace.finish()

    output = collect_runs()

    assert "runs: 0 created, 6 updated, 5 unchanged, 0 skipped" in output
    assert Run.objects.count() == 11 and Attempt.objects.count() == 14
    finished = Run.objects.get(external_id="1001")
    assert finished.status == RunStatus.SUCCEEDED
    assert finished.ended_at is not None and finished.attempts.get().status == RunStatus.SUCCEEDED
    retried = Run.objects.get(external_id="2001")
    assert retried.status == RunStatus.SUCCEEDED
    assert list(retried.attempts.values_list("status", flat=True)) == [RunStatus.FAILED, RunStatus.SUCCEEDED]
    assert CollectorState.objects.get(name="runs").cursor["active"] == {"5001": 5001}

    # The ended sweep's iterations are all stored finished: not read again, so not counted.
    assert "runs: 0 created, 0 updated, 9 unchanged, 0 skipped" in collect_runs()


def test_an_active_only_command_fetches_runs_that_stop_being_listed(
    settings, world: World, workspace: StandInWorkspace
) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{DATABRICKS} -p prod jobs list-runs --active-only --limit 25 -o json"
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""
    collect_runs()
    assert Run.objects.get(external_id="1001").status == RunStatus.RUNNING
    workspace.finish()

    output = collect_runs()

    assert "runs: fetched 5 of 5 run(s) no longer listed" in output
    assert f"{BIN / 'databricks'} -p prod jobs get-run 1001 -o json".split(" ", 1)[1] in workspace.calls()
    assert Run.objects.get(external_id="1001").status == RunStatus.SUCCEEDED
    assert Run.objects.get(external_id="2001").status == RunStatus.SUCCEEDED
    assert CollectorState.objects.get(name="runs").cursor["active"] == {"5001": 5001}


def test_classic_clusters_are_upserted_with_their_fields_and_events_once(
    world: World, workspace: StandInWorkspace
) -> None:
    assert "clusters: 3 created, 0 updated, 0 unchanged, 0 skipped" in collect_runs()

    shared = Cluster.objects.get(cluster_id="0923-164208-gpuml4x1")
    assert (shared.team, shared.name, shared.spark_version) == (world.nlp, "nlp-gpu-shared", "15.4.x-gpu-ml-scala2.12")
    assert (shared.node_type_id, shared.driver_node_type_id, shared.num_workers) == ("g5.12xlarge", "g5.4xlarge", 2)
    assert (shared.data_security_mode, shared.single_user_name) == ("SINGLE_USER", "charlie@example.com")
    assert (shared.state, shared.region, shared.single_node, shared.runtime_engine) == (
        "RUNNING", "us-west-2", False, "STANDARD",
    )  # fmt: skip
    assert shared.raw["cluster_source"] == "UI"
    single = Cluster.objects.get(cluster_id="1102-093011-single8x")
    assert (single.team, single.single_node, single.runtime_engine, single.region) == (
        world.vision, True, "PHOTON", "us-east-1",
    )  # fmt: skip
    assert single.docker_image.endswith("vision/train:2026.10") and single.terminated_time is not None
    autoscale = Cluster.objects.get(cluster_id="1015-120000-autoscl1")
    assert (autoscale.autoscale_min_workers, autoscale.autoscale_max_workers, autoscale.region) == (1, 8, "")
    # Nothing is derived from start_time: the API documents it as when the creation request came in.
    assert list(single.events.values_list("kind", flat=True)) == ["TERMINATING"]
    assert sorted(shared.events.values_list("kind", flat=True)) == ["RESTARTING"]
    assert shared.last_restarted_time == datetime(2026, 11, 2, 5, 50, tzinfo=UTC)

    assert "clusters: 0 created, 0 updated, 3 unchanged, 0 skipped" in collect_runs()
    assert ClusterEvent.objects.count() == 2


def test_records_with_no_team_are_skipped_and_reported(settings, world: World, workspace: StandInWorkspace) -> None:
    settings.AIRBOARD_RUN_SOURCE_TEAM = "no-such-team"

    output = collect_runs()

    assert "runs: skipped 4001: creator ghost@contractor.example has no team and group 'no-such-team'" in output
    assert "clusters: skipped 1015-120000-autoscl1" in output
    assert not Run.objects.filter(external_id="4001").exists()
    # The CLI fixtures' creators (tester@databricks.com, user@example.com) have no team either.
    assert Run.objects.count() == 8


class FakeClient:
    """An adapter double for cases the recorded payloads do not cover."""

    def __init__(self, runs: list[dict[str, Any]]) -> None:
        self.runs = runs

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        return self.runs

    def get_runs(self, run_ids: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        return [], [f"run {run_id}: gone" for run_id in run_ids]

    def list_clusters(self) -> None:
        return None

    def get_outputs(self, task_run_ids: list[str]) -> tuple[dict[str, Any], list[str]]:
        return {}, []


AIR_1XA10 = {"accelerator_type": "GPU_1xA10", "accelerator_count": 1}


def _run(run_id: int, attempt: int, life_cycle: str, result: str | None = None) -> dict[str, Any]:
    state = {"life_cycle_state": life_cycle} | ({"result_state": result} if result else {})
    start = int(T0.timestamp() * 1000) + attempt * 600_000
    end = start + 300_000 if result else 0
    # A run-level retry (original_attempt_run_id) whose task repeats the try's attempt_number.
    task = {
        "task_key": "train",
        "run_id": run_id + 1000,
        "attempt_number": attempt,
        "state": state,
        "start_time": start,
        "end_time": end,
        "ai_runtime_task": {"experiment": "retry", "deployments": [{"compute": AIR_1XA10}]},
    }
    return {
        "run_id": run_id, "original_attempt_run_id": 700, "attempt_number": attempt, "state": state,
        "start_time": start, "end_time": end, "creator_user_name": "bob@example.com", "tasks": [task],
    }  # fmt: skip


def test_a_retry_seen_after_its_failed_first_try_reopens_the_run(world: World) -> None:
    runsource.collect_once(FakeClient([_run(700, 0, "TERMINATED", "FAILED")]))
    assert Run.objects.get(external_id="700").status == RunStatus.FAILED

    result = runsource.collect_once(FakeClient([_run(700, 0, "TERMINATED", "FAILED"), _run(701, 1, "RUNNING")]))

    run = Run.objects.get(external_id="700")
    assert (run.status, run.ended_at) == (RunStatus.RUNNING, None)
    assert run.attempts.count() == 2 and "runs: 0 created, 1 updated, 0 unchanged, 0 skipped" in result.lines
    # A late, stale 'running' for the same try never undoes the end.
    runsource.collect_once(FakeClient([_run(700, 0, "TERMINATED", "FAILED"), _run(701, 1, "TERMINATED", "SUCCESS")]))
    runsource.collect_once(FakeClient([_run(700, 0, "TERMINATED", "FAILED"), _run(701, 1, "RUNNING")]))
    assert Run.objects.get(external_id="700").status == RunStatus.SUCCEEDED


def test_a_run_that_cannot_be_fetched_stays_tracked(world: World) -> None:
    runsource.collect_once(FakeClient([_run(700, 0, "RUNNING")]))
    result = runsource.collect_once(FakeClient([]))
    assert "runs: run 700: gone" in result.lines
    assert CollectorState.objects.get(name="runs").cursor["active"] == {"700": 700}


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"state": {"life_cycle_state": "QUEUED"}}, RunStatus.QUEUED),
        ({"state": {"life_cycle_state": "PENDING"}}, RunStatus.QUEUED),
        ({"state": {"life_cycle_state": "BLOCKED"}}, RunStatus.QUEUED),
        ({"state": {"life_cycle_state": "WAITING_FOR_RETRY"}}, RunStatus.QUEUED),
        ({"state": {"life_cycle_state": "RUNNING"}}, RunStatus.RUNNING),
        ({"state": {"life_cycle_state": "TERMINATING"}}, RunStatus.RUNNING),
        ({"state": {"life_cycle_state": "TERMINATING", "result_state": "FAILED"}}, RunStatus.FAILED),
        ({"state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS"}}, RunStatus.SUCCEEDED),
        ({"state": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS_WITH_FAILURES"}}, RunStatus.SUCCEEDED),
        ({"state": {"life_cycle_state": "TERMINATED", "result_state": "FAILED"}}, RunStatus.FAILED),
        ({"state": {"life_cycle_state": "TERMINATED", "result_state": "UPSTREAM_FAILED"}}, RunStatus.FAILED),
        ({"state": {"life_cycle_state": "TERMINATED", "result_state": "TIMEDOUT"}}, RunStatus.TIMED_OUT),
        ({"state": {"life_cycle_state": "TERMINATED", "result_state": "CANCELED"}}, RunStatus.CANCELLED),
        ({"state": {"life_cycle_state": "SKIPPED", "result_state": "EXCLUDED"}}, RunStatus.CANCELLED),
        ({"state": {"life_cycle_state": "SKIPPED"}}, RunStatus.CANCELLED),
        ({"state": {"life_cycle_state": "INTERNAL_ERROR"}}, RunStatus.FAILED),
        ({"state": {"life_cycle_state": "TERMINATED"}}, RunStatus.FAILED),
        ({"status": {"state": "WAITING"}}, RunStatus.QUEUED),
        ({"status": {"state": "RUNNING"}}, RunStatus.RUNNING),
        ({"status": {"state": "TERMINATED", "termination_details": {"code": "SUCCESS"}}}, RunStatus.SUCCEEDED),
        ({"status": {"state": "TERMINATED", "termination_details": {"code": "USER_CANCELED"}}}, RunStatus.CANCELLED),
        ({"status": {"state": "TERMINATED", "termination_details": {"code": "DRIVER_ERROR"}}}, RunStatus.FAILED),
        # The newer API's records carry only `status` (databricks/cli's
        # TestJobRunWaitReportsFailedTaskWithoutDeprecatedState): a run that never started is
        # cancelled there too, as MAXIMUM_CONCURRENT_RUNS_REACHED is on the `state` path.
        *(
            ({"status": {"state": "TERMINATED", "termination_details": {"code": code}}}, RunStatus.CANCELLED)
            for code in (
                "MAX_CONCURRENT_RUNS_EXCEEDED",
                "WORKSPACE_RUN_LIMIT_EXCEEDED",
                "MAX_JOB_QUEUE_SIZE_EXCEEDED",
                "DISABLED",
                "BUDGET_POLICY_LIMIT_EXCEEDED",
            )
        ),
        ({"status": {"state": "TERMINATED", "termination_details": {"code": "CLOUD_FAILURE"}}}, RunStatus.FAILED),
        ({}, RunStatus.QUEUED),
    ],
)
def test_databricks_states_map_to_airboard_statuses(record: dict[str, Any], expected: str) -> None:
    assert run_records.map_status(record)[0] == expected


@pytest.mark.parametrize(
    ("argument", "timeout", "expected"),
    [("exit", 120, "exited with 1"), ("badjson", 120, "printed invalid JSON"), ("sleep", 1, "timed out after 1s")],
)
def test_a_failing_command_is_recorded_and_exits_non_zero(
    settings, world: World, argument: str, timeout: int, expected: str
) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{BROKEN} {argument}"
    settings.AIRBOARD_COLLECTOR_TIMEOUT_SECONDS = timeout

    with pytest.raises(CommandError) as excinfo:
        collect_runs()

    assert excinfo.value.returncode == 1 and expected in str(excinfo.value)
    state = CollectorState.objects.get(name="runs")
    assert state.last_error.startswith("CollectorError:") and expected in state.last_error
    assert state.last_error_at is not None and state.last_success_at is None
    assert "dapi0123" not in state.last_error and "dapi0123" not in str(excinfo.value)
    if argument == "exit":
        assert "cannot configure default credentials (--token ***" in state.last_error


def test_not_configured_says_so_and_records_nothing(settings, db: None) -> None:
    settings.AIRBOARD_RUN_SOURCE_COMMAND = ""
    settings.DATABRICKS_HOST = ""
    settings.DATABRICKS_TOKEN = ""

    output = collect_runs()

    assert runsource.NOT_CONFIGURED in output and "runs: ingested 0 item(s)" in output
    assert not CollectorState.objects.exists()


def test_the_adapter_reads_both_list_shapes_and_derives_get_run() -> None:
    assert unwrap_list([{"run_id": 1}], "runs", "run_id") == [{"run_id": 1}]
    assert unwrap_list({"runs": [{"run_id": 1}], "has_more": False}, "runs", "run_id") == [{"run_id": 1}]
    assert unwrap_list({"has_more": False}, "runs", "run_id") == []
    assert unwrap_list({"run_id": 7, "state": {}}, "runs", "run_id") == [{"run_id": 7, "state": {}}]
    with pytest.raises(CollectorError):
        unwrap_list("runs", "runs", "run_id")
    argv = ["databricks", "jobs", "list-runs", "--active-only", "--profile", "prod", "-o", "json"]
    assert get_run_argv(argv, 5) == ["databricks", "jobs", "get-run", "5", "--profile", "prod", "-o", "json"]
    assert get_run_argv(["./my-export.sh"], 5) is None
    assert (
        redact("x --token abc Authorization: Bearer xyz dapiabcdef0123")
        == "x --token *** Authorization: Bearer *** ***"
    )


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_collects_runs_from_the_configured_command(world: World, tmp_path: Path) -> None:
    state_file = tmp_path / "databricks-state"
    state_file.write_text("running")
    # A queue of its own: a session-wide worker (without this source configured) must not take the task.
    queue = f"collect-runs-e2e-{tmp_path.name}"
    worker = start_worker(
        tmp_path,
        queues=queue,
        extra_env={
            "AIRBOARD_RUN_SOURCE_COMMAND": f"{DATABRICKS} jobs list-runs -o json",
            "AIRBOARD_RUN_SOURCE_TEAM": "vision",
            "FAKE_DATABRICKS_STATE": str(state_file),
        },
    )
    try:
        from runs.tasks import collect_runs

        collect_runs.apply_async(queue=queue)
        assert wait_for(lambda: Run.objects.count() == 11, timeout=60), worker.log()
        assert Run.objects.get(external_id="1001").status == RunStatus.RUNNING
        assert Run.objects.get(external_id="2001").attempts.count() == 2

        state_file.write_text("finished")
        collect_runs.apply_async(queue=queue)
        done = wait_for(lambda: Run.objects.get(external_id="1001").status == RunStatus.SUCCEEDED, timeout=60)
        assert done, worker.log()
        assert Run.objects.count() == 11
    finally:
        stop_worker(worker)
