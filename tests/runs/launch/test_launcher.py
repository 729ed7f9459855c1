"""`manage.py launch`: real commands run as real runs, with live logs, retries, timeout and cancel.

Every test runs real processes. The ones that must watch a launch from outside (cancel, Ctrl-C,
live logs) start `manage.py launch` as a subprocess on the test database, hence
`transaction=True`: the subprocess only sees committed rows.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from runs.choices import RunEventKind, RunSource, RunStatus
from runs.launch.launcher import child_env, launch_problems, render_command
from runs.logs import chunk_texts
from runs.models import LogChunk, Run, RunEvent
from runs.workload.schema import parse_workload
from tests.conftest import ROOT, TESTS, database_url_for_test_db, wait_for

DATA = TESTS / "data" / "launch"


def launch(*args: str) -> tuple[int, str, str]:
    """Run the command in this process; returns (exit status, stdout, stderr)."""
    out, err = StringIO(), StringIO()
    try:
        call_command("launch", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def copy_workload(tmp_path: Path, name: str) -> Path:
    """A copy in tmp_path: the command runs in the file's directory and may write pid files there."""
    return Path(shutil.copy(DATA / name, tmp_path / name))


def write_workload(tmp_path: Path, command: str, extra: str = "") -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(
        "experiment_name: inline\n"
        "compute:\n  accelerator_type: GPU_1xA10\n  num_accelerators: 1\n"
        f"command: {command}\n{extra}"
    )
    return path


def log_of(run: Run, attempt: int = 1) -> str:
    node = run.attempts.get(number=attempt).nodes.get(index=0)
    return "".join(chunk_texts(node))


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting for a parent that may never reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def start_launcher(*args: str) -> subprocess.Popen[str]:
    """`manage.py launch` as its own process on the test database, without MLflow."""
    env = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    env["DATABASE_URL"] = database_url_for_test_db()
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [sys.executable, "manage.py", "launch", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"the launcher did not exit:\n{out}")
    return process.returncode, out


@pytest.fixture(autouse=True)
def _no_mlflow(settings) -> None:
    settings.AIRBOARD_MLFLOW_TRACKING_URI = ""


# --- Pure pieces ------------------------------------------------------------------------------


def test_placeholders_are_shell_quoted() -> None:
    command = render_command("echo {{parameters.name}} {{ parameters.n }}", {"name": "x; rm -rf /", "n": 3})
    assert command == "echo 'x; rm -rf /' 3"


def test_child_env_stringifies_and_sets_run_variables() -> None:
    workload = parse_workload((DATA / "succeed.yaml").read_text())
    env = child_env({"PATH": "/bin", "MLFLOW_RUN_ID": "stale"}, workload, "local-abc", 2)
    assert env["EPOCHS"] == "3"
    assert env["AIRBOARD_RUN_ID"] == "local-abc"
    assert env["AIRBOARD_ATTEMPT"] == "2"
    # No MLflow configured: no run id, not even one inherited from the launcher's own shell.
    assert "MLFLOW_RUN_ID" not in env
    assert "MLFLOW_TRACKING_URI" not in env


# --- Launches in this process -----------------------------------------------------------------


def test_success_stores_the_run_and_its_log(world) -> None:
    code, out, _ = launch("-f", str(DATA / "succeed.yaml"), "--team", "vision", "--user", "alice")

    assert code == 0, out
    run = Run.objects.get()
    assert run.source == RunSource.LOCAL
    assert run.external_id.startswith("local-") and len(run.external_id) == len("local-") + 12
    assert run.status == RunStatus.SUCCEEDED
    assert run.ended_at is not None and run.started_at is not None
    assert run.team == world.vision
    assert run.user == world.alice
    # One identity: the creator is alice's address, as her workspace runs name her, not "alice".
    assert run.creator == world.alice.email
    assert run.experiment_name == "launch-ok"
    assert run.parameters == {"greeting": "hello world", "lr": 0.001}
    assert run.workload_yaml == (DATA / "succeed.yaml").read_text()
    attempt = run.attempts.get()
    assert (attempt.number, attempt.status, attempt.exit_code) == (1, RunStatus.SUCCEEDED, 0)
    node = attempt.nodes.get()
    assert node.exit_code == 0 and node.host
    log = log_of(run)
    assert log.splitlines() == ["first line", f"run {run.external_id} lr=0.001", "to stderr", "last line"]
    # max_retries unset: the CLI's default of 3, so up to 4 tries (one was enough).
    assert "attempt 1 of 4: succeeded" in out
    assert f"run {run.external_id}: succeeded" in out


def test_failure_is_retried_then_fails(world) -> None:
    code, out, _ = launch("-f", str(DATA / "fail.yaml"), "--team", "vision", "--external-id", "job-7")

    assert code == 1
    run = Run.objects.get(external_id="job-7")
    assert run.status == RunStatus.FAILED
    assert [(a.number, a.status, a.exit_code) for a in run.attempts.all()] == [
        (1, RunStatus.FAILED, 3),
        (2, RunStatus.FAILED, 3),
    ]
    assert log_of(run, 1) == log_of(run, 2) == "boom\n"
    assert "attempt 2 of 2: failed (exit 3)" in out


def test_timeout_kills_the_whole_process_group_and_is_not_retried(world, tmp_path: Path) -> None:
    workload = copy_workload(tmp_path, "sleep.yaml")  # max_retries: 2

    started = time.monotonic()
    code, _, _ = launch("-f", str(workload), "--team", "vision", "--timeout-seconds", "1")

    assert code == 1
    assert time.monotonic() - started < 10
    run = Run.objects.get()
    assert run.status == RunStatus.TIMED_OUT
    attempt = run.attempts.get()
    assert attempt.status == RunStatus.TIMED_OUT
    assert attempt.exit_code == -signal.SIGTERM
    assert RunEvent.objects.filter(run=run, kind=RunEventKind.TIMEOUT).count() == 1
    # The backgrounded sleep is in the same process group: it must be gone too.
    for pid_file in ("bash.pid", "sleep.pid"):
        pid = int((tmp_path / pid_file).read_text())
        assert wait_for(lambda pid=pid: not alive(pid), timeout=5), pid_file
    assert "sleeping" in log_of(run)


def test_death_by_signal_is_a_negative_exit_and_an_event(world, tmp_path: Path) -> None:
    workload = write_workload(tmp_path, "kill -9 $$", "max_retries: 0\n")  # unset would retry 3 times
    code, _, _ = launch("-f", str(workload), "--team", "vision")

    assert code == 1
    run = Run.objects.get()
    assert run.status == RunStatus.FAILED
    assert run.attempts.get().exit_code == -9
    event = RunEvent.objects.get(run=run, kind=RunEventKind.SIGNAL)
    assert event.details == {"signal": "SIGKILL"}
    assert event.node == run.attempts.get().nodes.get()


def test_invalid_workload_is_refused_with_file_and_line(world) -> None:
    path = DATA / "invalid.yaml"
    code, _, err = launch("-f", str(path), "--team", "vision")

    assert code == 1
    assert err.splitlines() == [
        f"{path}:4: compute.num_accelerators: GPU_1xH100 takes exactly 1 accelerator, got 2",
        f"{path}:6: timeout_minutes: must be at least 1, got 0",
    ]
    assert not Run.objects.exists()


def test_unknown_team_user_and_parameter_are_refused(world) -> None:
    path = DATA / "unknown_parameter.yaml"
    code, _, err = launch("-f", str(path), "--team", "robotics", "--user", "zed")

    assert code == 1
    assert err.splitlines() == [
        f"{path}: command: {{{{parameters.epochs}}}} has no value under `parameters`",
        "no team named 'robotics'",
        "no user named 'zed'",
    ]
    assert not Run.objects.exists()


def test_an_existing_external_id_is_refused(world) -> None:
    assert launch("-f", str(DATA / "succeed.yaml"), "--team", "vision", "--external-id", "x1")[0] == 0
    code, _, err = launch("-f", str(DATA / "succeed.yaml"), "--team", "vision", "--external-id", "x1")
    assert code == 1
    assert "a local run with external id 'x1' already exists" in err
    assert Run.objects.get().attempts.count() == 1


# --- Launches watched from outside: a separate launcher process -------------------------------


def _running_attempt(external_id: str) -> bool:
    run = Run.objects.filter(external_id=external_id).first()
    return run is not None and run.attempts.filter(status=RunStatus.RUNNING).exists()


@pytest.mark.django_db(transaction=True)
def test_output_is_stored_while_the_command_runs(world) -> None:
    process = start_launcher("-f", str(DATA / "stream.yaml"), "--team", "vision", "--external-id", "live-1")
    try:

        def first_line_stored() -> bool:
            return LogChunk.objects.filter(node__attempt__run__external_id="live-1", text__contains="before").exists()

        assert wait_for(first_line_stored, timeout=20)
        # Stored during the 2 s pause: the run is still going and the second line not yet there.
        run = Run.objects.get(external_id="live-1")
        assert run.status == RunStatus.RUNNING
        assert "after the pause" not in log_of(run)
    finally:
        code, out = finish(process)
    assert code == 0, out
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert log_of(run) == "before the pause\nafter the pause\n"


@pytest.mark.django_db(transaction=True)
def test_cancel_from_the_dashboard_stops_the_command(world, tmp_path: Path) -> None:
    workload = copy_workload(tmp_path, "sleep.yaml")  # max_retries: 2
    process = start_launcher("-f", str(workload), "--team", "vision", "--external-id", "cancel-1")
    try:
        assert wait_for(lambda: _running_attempt("cancel-1") and (tmp_path / "sleep.pid").exists(), timeout=20)
        Run.objects.filter(external_id="cancel-1").update(cancel_requested_at=timezone.now())
        asked = time.monotonic()
        assert wait_for(lambda: Run.objects.get(external_id="cancel-1").status == RunStatus.CANCELLED, timeout=10)
        assert time.monotonic() - asked < 5
    finally:
        code, out = finish(process)
    assert code == 1, out
    run = Run.objects.get(external_id="cancel-1")
    attempt = run.attempts.get()  # a cancel is never retried
    assert attempt.status == RunStatus.CANCELLED
    assert RunEvent.objects.filter(run=run, kind=RunEventKind.CANCELLED).count() == 1
    assert wait_for(lambda: not alive(int((tmp_path / "sleep.pid").read_text())), timeout=5)


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_on_the_launcher_cancels_the_run(world, tmp_path: Path) -> None:
    workload = copy_workload(tmp_path, "sleep.yaml")
    process = start_launcher("-f", str(workload), "--team", "vision", "--external-id", "sigint-1")
    try:
        assert wait_for(lambda: _running_attempt("sigint-1") and (tmp_path / "sleep.pid").exists(), timeout=20)
        process.send_signal(signal.SIGINT)
    finally:
        code, out = finish(process)
    assert code == 1, out
    run = Run.objects.get(external_id="sigint-1")
    assert run.status == RunStatus.CANCELLED
    assert run.attempts.get().status == RunStatus.CANCELLED
    assert "SIGINT: stopping the command" in out
    assert wait_for(lambda: not alive(int((tmp_path / "sleep.pid").read_text())), timeout=5)


def test_each_attempt_gets_its_own_mlflow_run(world, tmp_path: Path, settings) -> None:
    from mlflow.tracking import MlflowClient

    settings.AIRBOARD_MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Attempt 1 fails, the retry succeeds; both print the MLflow run id they were given.
    command = 'bash -c \'echo "$MLFLOW_TRACKING_URI $MLFLOW_RUN_ID"; test "$AIRBOARD_ATTEMPT" = 2\''
    workload = write_workload(tmp_path, command, "max_retries: 1\n")

    code, out, _ = launch("-f", str(workload), "--team", "vision", "--external-id", "ml-1")

    assert code == 0, out
    run = Run.objects.get()
    first, second = run.attempts.all()
    assert first.mlflow_run_id and second.mlflow_run_id and first.mlflow_run_id != second.mlflow_run_id
    assert run.mlflow_run_id == second.mlflow_run_id
    for attempt, status in ((first, "FAILED"), (second, "FINISHED")):
        assert log_of(run, attempt.number) == f"{settings.AIRBOARD_MLFLOW_TRACKING_URI} {attempt.mlflow_run_id}\n"
        mlflow_run = MlflowClient(tracking_uri=settings.AIRBOARD_MLFLOW_TRACKING_URI).get_run(attempt.mlflow_run_id)
        assert mlflow_run.data.tags["airboard.run_id"] == "ml-1"
        assert mlflow_run.info.status == status


# --- The demo workloads `make run` can launch -------------------------------------------------

DEMOS = ROOT / "dashboard" / "demo" / "workloads"


@pytest.mark.parametrize("name", ["succeed.yaml", "fail.yaml", "timeout.yaml"])
def test_demo_workloads_are_launchable(name: str) -> None:
    workload = parse_workload((DEMOS / name).read_text())
    assert launch_problems(workload) == []


def test_fail_demo_ends_with_a_real_traceback(world) -> None:
    code, _, _ = launch("-f", str(DEMOS / "fail.yaml"), "--team", "vision")

    assert code == 1
    run = Run.objects.get()
    assert [a.exit_code for a in run.attempts.all()] == [1, 1]
    assert log_of(run, 2).rstrip().endswith("ZeroDivisionError: division by zero")
