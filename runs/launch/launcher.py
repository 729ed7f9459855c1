"""The local launcher: run a workload's `command` on this machine as a real, recorded run.

`manage.py launch` is a thin shell around `Launcher`. What it records is what a remote source
would send: a `Run` (source `local`), one `Attempt` per try with one `Node` (index 0, this
host), the node's merged stdout/stderr as `LogChunk`s written *while* it runs, and `RunEvent`s
for timeouts, cancels and deaths by signal. Everything goes through `runs.ingest`, the same
functions the push API uses, so a launched run looks like any other run to the rest of the code.

Decisions, each for a reason:
- The command runs under `bash -c`: in the workload file it is a shell script by design (a list
  of commands is joined into one script; `databricks air run` runs it the same way).
- `{{parameters.NAME}}` placeholders are replaced by the parameter's value, shell-quoted, so a
  value cannot inject shell syntax. Write them bare, not inside quotes of your own.
- The child is the leader of its own process group (`start_new_session=True`): a training script
  forks data loaders and per-GPU workers, and only a signal to the whole group stops them all.
  The new session also keeps a terminal's Ctrl-C away from the child, so the launcher decides
  how the child stops (SIGTERM, then SIGKILL after a grace period) and records it.
- `timeout_minutes` limits each attempt. A timed-out attempt ends the run as `timed_out` and is
  not retried: a hang usually hangs again, and retrying would bill up to (1 + max_retries) times
  the limit the user set. Only a non-zero exit is retried.
- A cancel (dashboard `cancel_requested_at`, or SIGINT/SIGTERM to the launcher) stops the child
  and ends the run as `cancelled`, never retried.
- Exit codes follow Python's `Popen.returncode`: negative for a signal (-9 for SIGKILL). A death
  by a signal the launcher did not send (the OOM killer, a segfault) also records a `signal`
  event; the signals the launcher sends are recorded in the timeout or cancel event instead.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from django.contrib.auth.models import Group
from django.utils import timezone

from dashboard.kit.commands import scrubbed_env
from runs.choices import RunEventKind, RunOrigin, RunSource, RunStatus
from runs.ingest import append_log_chunk, node_for, upsert_run
from runs.models import Run, RunEvent
from runs.workload.schema import Problem, Workload

logger = logging.getLogger(__name__)

# After SIGTERM, how long the child may take to save a checkpoint and exit before SIGKILL.
KILL_GRACE_SECONDS = 10.0
# A log chunk is stored at least this often while output flows, and at most this big.
FLUSH_SECONDS = 1.0
FLUSH_BYTES = 64 * 1024
# How often the database is asked whether the dashboard requested a cancel.
CANCEL_POLL_SECONDS = 1.0
# The supervising loop's heartbeat: bounds the delay of every check above.
TICK_SECONDS = 0.1
# When the command has exited, how long processes it left behind may keep the pipe open.
DRAIN_SECONDS = 5.0

PLACEHOLDER = re.compile(r"\{\{\s*parameters\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")


def admit(workload: Workload, team: Group) -> list[str]:
    """Admission hook: the reasons this team may not run this workload now ([] = admitted).

    Delegates to `billing.policies.admission.admit` (usage policy constraints and budget). The launcher
    prints each reason and exits 1 when the list is not empty.
    """
    from billing.engine import admit as admit_by_policy

    return [violation.message for violation in admit_by_policy(workload, team).violations]


def launch_problems(workload: Workload) -> list[Problem]:
    """What stops this valid workload from running *locally*: placeholders with no parameter."""
    unknown = sorted({name for name in PLACEHOLDER.findall(workload.command) if name not in workload.parameters})
    return [Problem("command", None, f"{{{{parameters.{name}}}}} has no value under `parameters`") for name in unknown]


def located(filename: str, problem: Problem) -> str:
    """`FILE:LINE: path: message` (the shape editors and CI annotators parse), leaving out missing parts."""
    where = f"{filename}:{problem.line}" if problem.line is not None else filename
    return ": ".join(part for part in (where, problem.path, problem.message) if part)


def as_text(value: Any) -> str:
    """A parameter or env value as the shell sees it: YAML booleans lower-case, structures as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def render_command(command: str, parameters: Mapping[str, Any]) -> str:
    """Replace `{{parameters.NAME}}` with the shell-quoted value (KeyError for an unknown name)."""
    return PLACEHOLDER.sub(lambda match: shlex.quote(as_text(parameters[match.group(1)])), command)


def child_env(
    base: Mapping[str, str],
    workload: Workload,
    external_id: str,
    attempt: int,
    tracking_uri: str = "",
    mlflow_run_id: str = "",
) -> dict[str, str]:
    """The child's environment: ours without the server's secrets, the workload's env_variables,
    then the Airboard variables."""
    env = scrubbed_env(base, for_workload=True)
    # Python block-buffers stdout into a pipe: without this a training script's prints would
    # reach the log minutes late, defeating the live log. The workload may still override it.
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update({name: as_text(value) for name, value in workload.env_variables.items()})
    env["AIRBOARD_RUN_ID"] = external_id
    env["AIRBOARD_ATTEMPT"] = str(attempt)
    env.pop("MLFLOW_RUN_ID", None)
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    if mlflow_run_id:
        env["MLFLOW_RUN_ID"] = mlflow_run_id
    return env


def new_external_id() -> str:
    return f"local-{uuid.uuid4().hex[:12]}"


# --- MLflow adapter: the only code here that touches the MLflow client -----------------------


def mlflow_start_run(tracking_uri: str, experiment_name: str, run_name: str, tags: dict[str, str]) -> str:
    """Create an MLflow run in the experiment (created if missing); return its id."""
    from mlflow.tracking import MlflowClient  # slow to import; only launches with MLflow pay for it

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(experiment_name)
    return client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id


def mlflow_end_run(tracking_uri: str, run_id: str, status: str) -> None:
    """Mark the MLflow run terminated: FINISHED, FAILED or KILLED."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=tracking_uri).set_terminated(run_id, status=status)


MLFLOW_STATUS: dict[str, str] = {RunStatus.SUCCEEDED: "FINISHED", RunStatus.FAILED: "FAILED"}  # else KILLED


# --- Streaming the child's output into LogChunks ----------------------------------------------


class PipeReader(threading.Thread):
    """Reads the child's merged output into a queue, so the supervising loop never blocks on it."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(daemon=True, name="launcher-pipe")
        self.stream = stream
        self.chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def run(self) -> None:
        fd = self.stream.fileno()
        # os.read returns whatever is there (a partial line too) instead of waiting to fill a buffer.
        while data := os.read(fd, FLUSH_BYTES):
            self.chunks.put(data)

    def drain(self) -> bytes:
        parts = []
        while True:
            try:
                parts.append(self.chunks.get_nowait())
            except queue.Empty:
                return b"".join(parts)


class LogWriter:
    """Buffers output and stores it as the node's next LogChunk every second or 64 KB."""

    def __init__(self, run: Run, attempt: int, host: str, echo: Callable[[str], None] | None = None) -> None:
        self.run, self.attempt, self.host, self.echo = run, attempt, host, echo
        self.seq = 0
        self.buffer = bytearray()
        # Incremental: a UTF-8 character split across two reads is decoded whole, not as two U+FFFD.
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.last_flush = time.monotonic()

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= FLUSH_BYTES:
            self._store(bytes(self.buffer[:FLUSH_BYTES]))
            del self.buffer[:FLUSH_BYTES]

    def tick(self) -> None:
        if self.buffer and time.monotonic() - self.last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self, final: bool = False) -> None:
        data = bytes(self.buffer)
        self.buffer.clear()
        self._store(data, final)

    def _store(self, data: bytes, final: bool = False) -> None:
        text = self.decoder.decode(data, final=final)
        self.last_flush = time.monotonic()
        if not text:
            return
        append_log_chunk(self.run, self.attempt, 0, self.seq, text, self.host)
        self.seq += 1
        if self.echo:
            self.echo(text)


# --- The launcher ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended."""

    status: str
    exit_code: int | None
    message: str


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def kill_group(pgid: int, sig: int) -> None:
    """Signal the child's whole process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


class Launcher:
    """Runs one workload as one run: attempts, live logs, timeout, cancel, final status."""

    def __init__(
        self,
        workload: Workload,
        *,
        workload_text: str,
        workdir: Path,
        team: Group,
        creator: str = "",
        external_id: str | None = None,
        timeout_seconds: float | None = None,
        kill_grace_seconds: float = KILL_GRACE_SECONDS,
        tracking_uri: str = "",
        say: Callable[[str], None] = print,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.workload = workload
        self.workload_text = workload_text
        self.workdir = workdir
        self.team = team
        self.creator = creator
        self.external_id = external_id or new_external_id()
        if timeout_seconds is None and workload.timeout_minutes:
            timeout_seconds = workload.timeout_minutes * 60.0
        self.timeout_seconds = timeout_seconds
        self.kill_grace_seconds = kill_grace_seconds
        self.tracking_uri = tracking_uri
        self.say = say
        self.echo = echo
        self.host = socket.gethostname()
        self.run: Run | None = None
        # Set from our SIGINT/SIGTERM handler: how many times the launcher was asked to stop.
        self.interrupts = 0

    def launch(self) -> Run:
        """Run the workload to its end and return the finished run.

        1. Create the run (running, started now) through `ingest.upsert_run`.
        2. For attempt 1 .. 1 + max_retries:
           a. stop here as cancelled if a cancel is already requested;
           b. with an MLflow tracking URI, create the attempt's MLflow run (a failure is logged
              as a note and the attempt runs without MLFLOW_RUN_ID);
           c. record the attempt and its node 0 as running;
           d. start `bash -c COMMAND` in its own process group and supervise it (`_supervise`):
              logs stored as they come, timeout and cancel enforced;
           e. record the attempt's end and exit code, end the MLflow run;
           f. success, timeout or cancel ends the loop; a failure retries while tries are left.
        3. Record the run's final status, ended_at and state message.
        SIGINT and SIGTERM to the launcher count as a cancel while this runs.
        """
        previous = self._install_handlers()
        try:
            now = timezone.now()
            self.run = upsert_run(
                self.team, self._run_fields(status=RunStatus.RUNNING, started_at=now), origin=RunOrigin.OPERATOR
            ).run
            outcome = Outcome(RunStatus.CANCELLED, None, "cancelled before the first attempt")
            tries = 1 + self.workload.max_retries
            for number in range(1, tries + 1):
                if self._cancel_requested():
                    outcome = Outcome(RunStatus.CANCELLED, outcome.exit_code, f"cancelled before attempt {number}")
                    self._event(RunEventKind.CANCELLED, outcome.message)
                    break
                outcome = self._attempt(number)
                self.say(f"attempt {number} of {tries}: {outcome.status} ({outcome.message})")
                if outcome.status != RunStatus.FAILED:
                    break
            self._finish(outcome)
        except BaseException as exc:
            if self.run is not None:
                self._finish(Outcome(RunStatus.FAILED, None, f"launcher error: {exc!r}"))
            raise
        finally:
            self._restore_handlers(previous)
        self.say(f"run {self.external_id}: {self.run.status}")
        return self.run

    # -- steps --

    def _run_fields(self, **fields: Any) -> dict[str, Any]:
        workload = self.workload
        data: dict[str, Any] = {
            "source": RunSource.LOCAL,
            "external_id": self.external_id,
            # upsert_run links the run to the dashboard user with this username or email.
            "creator": self.creator,
            **workload.run_fields(),
            "workload_yaml": self.workload_text,
            "submitted_at": timezone.now(),
        }
        data.update(fields)
        return data

    def _attempt(self, number: int) -> Outcome:
        assert self.run is not None
        mlflow_run_id = self._mlflow_start(number)
        started = timezone.now()
        self._record_attempt(number, RunStatus.RUNNING, started_at=started, mlflow_run_id=mlflow_run_id)
        env = child_env(os.environ, self.workload, self.external_id, number, self.tracking_uri, mlflow_run_id)
        command = render_command(self.workload.command, self.workload.parameters)
        try:
            process = subprocess.Popen(
                ["bash", "-c", command],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                # One pipe for both: the log keeps stderr lines in order among stdout lines.
                stderr=subprocess.STDOUT,
                # Own process group (and session): see the module docstring.
                start_new_session=True,
            )
        except OSError as exc:
            outcome = Outcome(RunStatus.FAILED, None, f"could not start bash: {exc}")
        else:
            outcome = self._supervise(process, number)
        self._record_attempt(number, outcome.status, ended_at=timezone.now(), exit_code=outcome.exit_code,
                             state_message=outcome.message)  # fmt: skip
        if mlflow_run_id:
            self._mlflow_end(mlflow_run_id, outcome.status)
        return outcome

    def _supervise(self, process: subprocess.Popen[bytes], number: int) -> Outcome:
        """Stream the output and enforce timeout and cancel until the command exits."""
        assert self.run is not None and process.stdout is not None
        reader = PipeReader(process.stdout)
        reader.start()
        writer = LogWriter(self.run, number, self.host, self.echo)
        start = time.monotonic()
        next_cancel_poll = start + CANCEL_POLL_SECONDS
        stopping: tuple[str, str, str] | None = None  # (status, event kind, message)
        kill_at = 0.0
        try:
            while process.poll() is None:
                writer.feed(reader.drain())
                writer.tick()
                now = time.monotonic()
                if stopping is None:
                    stopping = self._stop_reason(now - start, now >= next_cancel_poll)
                    if now >= next_cancel_poll:
                        next_cancel_poll = now + CANCEL_POLL_SECONDS
                    if stopping is not None:
                        kill_group(process.pid, signal.SIGTERM)
                        kill_at = now + self.kill_grace_seconds
                elif kill_at and (now >= kill_at or self.interrupts >= 2):
                    # A second Ctrl-C means "now": skip the rest of the grace period.
                    kill_group(process.pid, signal.SIGKILL)
                    kill_at = 0.0
                time.sleep(TICK_SECONDS)
            # The command has exited; children it left in the background may still hold the pipe.
            reader.join(DRAIN_SECONDS)
        finally:
            # Nothing of the attempt outlives it: leftover group members (orphaned data loaders
            # holding GPU memory) are killed. The group id cannot be reused while members remain,
            # so this cannot hit an unrelated process group.
            kill_group(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait()
            reader.join(1.0)
            writer.feed(reader.drain())
            writer.flush(final=True)
            process.stdout.close()

        code = process.returncode
        if stopping is not None:
            status, kind, message = stopping
            how = "SIGTERM" if kill_at else f"SIGTERM, then SIGKILL after {self.kill_grace_seconds:g} s"
            self._event(kind, f"{message}; stopped with {how}", {"exit_code": code}, number)
            return Outcome(status, code, message)
        if code == 0:
            return Outcome(RunStatus.SUCCEEDED, 0, "exit 0")
        if code < 0:
            name = signal_name(-code)
            self._event(RunEventKind.SIGNAL, f"attempt {number} killed by {name}", {"signal": name}, number)
            return Outcome(RunStatus.FAILED, code, f"killed by {name}")
        return Outcome(RunStatus.FAILED, code, f"exit {code}")

    def _stop_reason(self, elapsed: float, poll_db: bool) -> tuple[str, str, str] | None:
        if self.interrupts:
            return RunStatus.CANCELLED, RunEventKind.CANCELLED, "the launcher was interrupted"
        if self.timeout_seconds is not None and elapsed >= self.timeout_seconds:
            limit = f"{self.timeout_seconds:g} s"
            return RunStatus.TIMED_OUT, RunEventKind.TIMEOUT, f"still running after the {limit} timeout"
        if poll_db and self._cancel_requested():
            return RunStatus.CANCELLED, RunEventKind.CANCELLED, "cancel requested from the dashboard"
        return None

    def _cancel_requested(self) -> bool:
        assert self.run is not None
        return bool(self.interrupts) or Run.objects.filter(pk=self.run.pk, cancel_requested_at__isnull=False).exists()

    def _finish(self, outcome: Outcome) -> None:
        assert self.run is not None
        data = {"source": RunSource.LOCAL, "external_id": self.external_id, "status": outcome.status,
                "ended_at": timezone.now(), "state_message": outcome.message}  # fmt: skip
        self.run = upsert_run(self.team, data, origin=RunOrigin.OPERATOR).run

    def _record_attempt(self, number: int, status: str, **fields: Any) -> None:
        assert self.run is not None
        node_fields = {key: value for key, value in fields.items() if key in ("started_at", "ended_at", "exit_code")}
        attempt = {"number": number, "status": status, **fields,
                   "nodes": [{"index": 0, "host": self.host, "status": status, **node_fields}]}  # fmt: skip
        data: dict[str, Any] = {"source": RunSource.LOCAL, "external_id": self.external_id, "attempts": [attempt]}
        if fields.get("mlflow_run_id"):
            data["mlflow_run_id"] = fields["mlflow_run_id"]
        self.run = upsert_run(self.team, data, origin=RunOrigin.OPERATOR).run

    def _event(
        self, kind: str, message: str, details: dict[str, Any] | None = None, attempt: int | None = None
    ) -> None:
        assert self.run is not None
        node = node_for(self.run, attempt, 0, self.host) if attempt is not None else None
        RunEvent.objects.create(
            run=self.run, node=node, ts=timezone.now(), kind=kind, message=message, details=details or {}
        )

    def _mlflow_start(self, number: int) -> str:
        if not self.tracking_uri:
            return ""
        name = self.workload.mlflow_run_name or self.external_id
        tags = {"airboard.run_id": self.external_id, "airboard.attempt": str(number)}
        try:
            return mlflow_start_run(self.tracking_uri, self.workload.experiment_name, f"{name}-{number}", tags)
        except Exception as exc:  # the MLflow client raises many kinds; tracking must not block training
            logger.warning("could not create the MLflow run", exc_info=True)
            self._event(RunEventKind.NOTE, f"attempt {number}: no MLflow run ({exc}); MLFLOW_RUN_ID not set")
            return ""

    def _mlflow_end(self, run_id: str, status: str) -> None:
        try:
            mlflow_end_run(self.tracking_uri, run_id, MLFLOW_STATUS.get(status, "KILLED"))
        except Exception:  # as above: a tracking hiccup must not turn a finished attempt into an error
            logger.warning("could not end MLflow run %s", run_id, exc_info=True)

    # -- signals --

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.interrupts += 1
        self.say(f"{signal_name(signum)}: stopping the command" + (" now" if self.interrupts > 1 else ""))

    def _install_handlers(self) -> dict[int, Any]:
        """Make SIGINT/SIGTERM a cancel, not a KeyboardInterrupt in the middle of a database write."""
        if threading.current_thread() is not threading.main_thread():
            return {}  # only the main thread may set handlers; a caller in a thread cancels via the database
        previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _restore_handlers(self, previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
