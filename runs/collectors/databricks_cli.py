"""The run source's adapter: the Databricks CLI (or SDK) behind a few batch calls.

Everything outside our walls goes through here, so `runsource` and the tests never touch a
raw client. The operator configures whole commands (`AIRBOARD_RUN_SOURCE_COMMAND`, e.g.
`databricks jobs list-runs --active-only -o json`); we split them with shlex and run them with
no shell, a timeout, and JSON parsing. Errors become `CollectorError` with the stderr tail,
secrets redacted. The SDK path is used only where `databricks.sdk` is importable and
DATABRICKS_HOST and DATABRICKS_TOKEN are set, and no command is configured.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
from typing import Any, Protocol

from django.conf import settings

from dashboard.redaction import redact

# Characters of stderr kept in an error: enough for the CLI's message, never a whole dump.
STDERR_TAIL_CHARS = 2_000

# Global CLI flags (with a value) that a `get-run` derived from `list-runs` must keep, so it
# reaches the same workspace profile.
GLOBAL_FLAGS_WITH_VALUE = {"-p", "--profile", "-t", "--target"}


class CollectorError(Exception):
    """The source could not be read (bad command, non-zero exit, timeout, bad JSON)."""


def split_command(template: str) -> list[str]:
    """shlex-split an operator's command; an empty or unbalanced one is a CollectorError."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise CollectorError(f"cannot parse command {redact(template)!r}: {exc}") from None
    if not argv:
        raise CollectorError("the configured command is empty")
    return argv


def _shown(argv: list[str]) -> str:
    return redact(shlex.join(argv))[:300]


def run_command(argv: list[str], timeout: float) -> str:
    """Run argv (no shell) and return its stdout decoded as UTF-8 (bad bytes replaced)."""
    try:
        completed = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise CollectorError(f"`{_shown(argv)}` timed out after {timeout:g}s") from None
    except OSError as exc:  # not found, not executable
        raise CollectorError(f"`{_shown(argv)}` could not start: {exc.strerror or exc}") from None
    if completed.returncode != 0:
        tail = completed.stderr.decode("utf-8", "replace").strip()[-STDERR_TAIL_CHARS:]
        raise CollectorError(f"`{_shown(argv)}` exited with {completed.returncode}: {redact(tail) or '(no stderr)'}")
    return completed.stdout.decode("utf-8", "replace")


def run_json(argv: list[str], timeout: float) -> Any:
    """Run argv and parse its stdout as JSON; empty output is None (the CLI prints nothing for no runs)."""
    out = run_command(argv, timeout)
    if not out.strip():
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError as exc:
        raise CollectorError(f"`{_shown(argv)}` printed invalid JSON ({exc.msg} at line {exc.lineno})") from None


def unwrap_list(payload: Any, key: str, id_field: str) -> list[dict[str, Any]]:
    """The records of a list command: a JSON list, or an object {key: [...], "has_more": ...}.

    A single record (what `get-run` prints) becomes a list of one; `{}` or nothing is empty.
    """
    if payload is None:
        return []
    if isinstance(payload, dict):
        payload = [payload] if id_field in payload else payload.get(key) or []
    if not isinstance(payload, list) or not all(isinstance(item, dict) for item in payload):
        raise CollectorError(f"expected a list of {key} objects, got {type(payload).__name__}")
    return payload


def get_run_argv(list_argv: list[str], run_id: int | str) -> list[str] | None:
    """`databricks [flags] jobs get-run ID -o json` from a configured `... jobs list-runs ...`.

    Keeps the program and everything before `list-runs` plus the global profile/target flags
    after it; list-only flags (--active-only, --limit) are dropped. None when the command is
    not a `list-runs` (a custom script): then a vanished run's final state cannot be fetched.
    """
    if "list-runs" not in list_argv:
        return None
    index = list_argv.index("list-runs")
    argv = [*list_argv[:index], "get-run", str(run_id)]
    rest = list_argv[index + 1 :]
    for position, arg in enumerate(rest):
        name = arg.split("=", 1)[0]
        if name in GLOBAL_FLAGS_WITH_VALUE:
            argv.append(arg)
            if "=" not in arg and position + 1 < len(rest):
                argv.append(rest[position + 1])
    return [*argv, "-o", "json"]


class RunSourceClient(Protocol):
    """What `runsource` needs from Databricks, batch-first."""

    def list_runs(self, start_time_from_ms: int | None) -> list[dict[str, Any]]: ...

    def get_runs(self, run_ids: list[int]) -> tuple[list[dict[str, Any]], list[str]]: ...

    def list_clusters(self) -> list[dict[str, Any]] | None: ...


class CliClient:
    """The operator's commands, run as configured (we never append to them)."""

    def __init__(self, runs_command: str, clusters_command: str = "", timeout: float = 120) -> None:
        self.runs_argv = split_command(runs_command)
        self.clusters_argv = split_command(clusters_command) if clusters_command.strip() else None
        self.timeout = timeout

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        # The window is the operator's (their flags); the cursor is not appended.
        return unwrap_list(run_json(self.runs_argv, self.timeout), "runs", "run_id")

    def get_runs(self, run_ids: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        """Each run by id; a run that cannot be fetched is a problem line, not an error."""
        found: list[dict[str, Any]] = []
        problems: list[str] = []
        for run_id in run_ids:
            argv = get_run_argv(self.runs_argv, run_id)
            if argv is None:
                problems.append(f"run {run_id}: no longer listed, and the command has no `list-runs` to derive get-run")
                continue
            try:
                found += unwrap_list(run_json(argv, self.timeout), "runs", "run_id")
            except CollectorError as exc:
                problems.append(f"run {run_id}: {exc}")
        return found, problems

    def list_clusters(self) -> list[dict[str, Any]] | None:
        if self.clusters_argv is None:
            return None
        return unwrap_list(run_json(self.clusters_argv, self.timeout), "clusters", "cluster_id")


class SdkClient:  # pragma: no cover - databricks-sdk is not installed in this project's environments
    """The same calls through databricks-sdk's WorkspaceClient (host + token from settings)."""

    def __init__(self, host: str, token: str) -> None:
        from databricks.sdk import WorkspaceClient

        self.client = WorkspaceClient(host=host, token=token)

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        runs = self.client.jobs.list_runs(expand_tasks=True, start_time_from=start_time_from_ms)
        return [run.as_dict() for run in runs]

    def get_runs(self, run_ids: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        found, problems = [], []
        for run_id in run_ids:
            try:
                found.append(self.client.jobs.get_run(run_id).as_dict())
            except Exception as exc:  # the SDK raises its own DatabricksError family
                problems.append(f"run {run_id}: {redact(str(exc))}")
        return found, problems

    def list_clusters(self) -> list[dict[str, Any]] | None:
        return [cluster.as_dict() for cluster in self.client.clusters.list()]


def sdk_importable() -> bool:
    """databricks-sdk is optional: find it without importing it."""
    try:
        return importlib.util.find_spec("databricks.sdk") is not None
    except ModuleNotFoundError:  # no `databricks` package at all
        return False


def client_from_settings() -> RunSourceClient | None:
    """The configured client: the command first, else the SDK with host + token; None when neither."""
    timeout = settings.AIRBOARD_COLLECTOR_TIMEOUT_SECONDS
    if settings.AIRBOARD_RUN_SOURCE_COMMAND.strip():
        return CliClient(settings.AIRBOARD_RUN_SOURCE_COMMAND, settings.AIRBOARD_CLUSTER_SOURCE_COMMAND, timeout)
    if settings.DATABRICKS_HOST and settings.DATABRICKS_TOKEN and sdk_importable():  # pragma: no cover
        return SdkClient(settings.DATABRICKS_HOST, settings.DATABRICKS_TOKEN)
    return None


def run_node_log_command(template: str, run_id: str, attempt: int, node: int, timeout: float) -> str:
    """A node's whole log from the operator's log command (placeholders filled per argument, no shell)."""
    values = {"{run_id}": run_id, "{attempt}": str(attempt), "{node}": str(node)}
    argv = []
    for arg in split_command(template):
        for placeholder, value in values.items():
            # str.replace, not str.format: an argument may hold other braces (JSON, globs).
            arg = arg.replace(placeholder, value)
        argv.append(arg)
    return run_command(argv, timeout)
