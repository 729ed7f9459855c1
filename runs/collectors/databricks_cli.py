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
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from django.conf import settings

from dashboard.kit.commands import CollectorError, run_command, run_json, shown, split_command
from dashboard.kit.redaction import redact
from runs.collectors.jobs_records import EnvelopeError, air_ended_ids, air_run_ids, is_air_envelope

# Global CLI flags (with a value) that a `get-run` derived from `list-runs` must keep, so it
# reaches the same workspace profile.
GLOBAL_FLAGS_WITH_VALUE = {"-p", "--profile", "-t", "--target"}


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


def more_pages(payload: Any, key: str, id_field: str, argv: list[str]) -> str | None:
    """What is lost when a list command printed one page of a paged answer, or None.

    `databricks api get /api/2.2/jobs/runs/list` (and a script around it) prints the REST
    page as it is: `{"runs": [...], "has_more": true, "next_page_token": "..."}`. Only that
    page is read; `databricks jobs list-runs` and `clusters list` follow the pages themselves.
    """
    if not isinstance(payload, dict) or id_field in payload:  # a list, or one record (`get-run` pages its tasks)
        return None
    if not (payload.get("has_more") or payload.get("next_page_token")):
        return None
    count = len(payload.get(key) or []) if isinstance(payload.get(key), list) else 0
    return (
        f"`{shown(argv)}` printed one page ({count} {key}) and says there are more (has_more /"
        f" next_page_token): only that page was read; `databricks jobs list-runs` or"
        f" `databricks clusters list` follow the pages themselves"
    )


def jobs_argv(configured: list[str], words: list[str], run_id: int | str) -> list[str] | None:
    """`databricks [flags] jobs WORDS ID -o json` derived from the configured list command.

    The configured command is `... jobs list-runs ...` or `... [experimental] air list|get ...`:
    the program and everything before the subcommand are kept, plus the global profile/target
    flags after it; list-only flags (--active-only, --limit, --all-status) are dropped. None
    when the command is neither (a custom script): then nothing can be fetched by id.
    """
    if "list-runs" in configured:
        index = configured.index("list-runs")
        head = configured[:index]
    elif "air" in configured:
        index = configured.index("air")
        head = configured[: index - 1 if index and configured[index - 1] == "experimental" else index]
        head = [*head, "jobs"]
    else:
        return None
    argv = [*head, *words, str(run_id)]
    rest = configured[index + 1 :]
    for position, arg in enumerate(rest):
        name = arg.split("=", 1)[0]
        if name in GLOBAL_FLAGS_WITH_VALUE:
            argv.append(arg)
            if "=" not in arg and position + 1 < len(rest):
                argv.append(rest[position + 1])
    return [*argv, "-o", "json"]


def get_run_argv(list_argv: list[str], run_id: int | str) -> list[str] | None:
    """`databricks [flags] jobs get-run ID -o json` from a configured list command (see `jobs_argv`)."""
    return jobs_argv(list_argv, ["get-run"], run_id)


class RunSourceClient(Protocol):
    """What `runsource` needs from Databricks, batch-first."""

    def list_runs(self, start_time_from_ms: int | None) -> list[dict[str, Any]]: ...

    def get_runs(self, run_ids: Sequence[int | str]) -> tuple[list[dict[str, Any]], list[str]]: ...

    def list_clusters(self) -> list[dict[str, Any]] | None: ...

    def get_outputs(self, task_run_ids: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]: ...


class CliClient:
    """The operator's commands, run as configured (we never append to them)."""

    def __init__(
        self,
        runs_command: str,
        clusters_command: str = "",
        timeout: float = 120,
        settled: Callable[[list[str]], set[str]] | None = None,
    ) -> None:
        self.runs_argv = split_command(runs_command)
        self.clusters_argv = split_command(clusters_command) if clusters_command.strip() else None
        self.timeout = timeout
        # Run ids already stored as finished: `air list` rows that ended are not fetched again.
        self.settled = settled
        # Lines for the pass report about what the commands printed (a page of a paged answer).
        self.notes: list[str] = []

    def take_notes(self) -> list[str]:
        """The notes since the last call, which are then forgotten."""
        notes, self.notes = self.notes, []
        return notes

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        """The Jobs records the command prints; `air list|get` rows are fetched with `jobs get-run`.

        The window is the operator's (their flags); the cursor is not appended.
        """
        payload = run_json(self.runs_argv, self.timeout)
        if not is_air_envelope(payload):
            if note := more_pages(payload, "runs", "run_id", self.runs_argv):
                self.notes.append(note)
            return unwrap_list(payload, "runs", "run_id")
        try:
            run_ids = air_run_ids(payload)
        except EnvelopeError as exc:
            raise CollectorError(f"`{shown(self.runs_argv)}` answered an error: {redact(str(exc))}") from None
        if self.settled is not None:
            ended = set(air_ended_ids(payload))
            done = self.settled(sorted(ended)) if ended else set()
            run_ids = [run_id for run_id in run_ids if run_id not in done]
        found, problems = self.get_runs(run_ids)
        if problems:
            # A listed run that cannot be read now is read next pass; one problem says why.
            raise CollectorError(f"{len(problems)} of {len(run_ids)} listed run(s) could not be read: {problems[0]}")
        return found

    def get_runs(self, run_ids: Sequence[int | str]) -> tuple[list[dict[str, Any]], list[str]]:
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

    def get_outputs(self, task_run_ids: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """`jobs get-run-output` of each task run, by id; `{}` (no output yet) is kept as is."""
        found: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        for task_run_id in task_run_ids:
            argv = jobs_argv(self.runs_argv, ["get-run-output"], task_run_id)
            if argv is None:
                problems.append(f"task run {task_run_id}: the command has no `list-runs` to derive get-run-output")
                break
            try:
                payload = run_json(argv, self.timeout)
            except CollectorError as exc:
                problems.append(f"task run {task_run_id}: {exc}")
                continue
            found[str(task_run_id)] = payload if isinstance(payload, dict) else {}
        return found, problems

    def list_clusters(self) -> list[dict[str, Any]] | None:
        if self.clusters_argv is None:
            return None
        payload = run_json(self.clusters_argv, self.timeout)
        if note := more_pages(payload, "clusters", "cluster_id", self.clusters_argv):
            self.notes.append(note)
        return unwrap_list(payload, "clusters", "cluster_id")


class SdkClient:
    """The same calls through databricks-sdk's WorkspaceClient (host + token from settings).

    The SDK comes with MLflow. Its typed records keep every field the readers use
    (tests/runs/collectors/test_sdk_client.py, against a stand-in of the REST API).
    """

    def __init__(self, host: str, token: str) -> None:
        from databricks.sdk import WorkspaceClient

        self.client = WorkspaceClient(host=host, token=token)

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        runs = self.client.jobs.list_runs(expand_tasks=True, start_time_from=start_time_from_ms)
        return [run.as_dict() for run in runs]

    def get_runs(self, run_ids: Sequence[int | str]) -> tuple[list[dict[str, Any]], list[str]]:
        found, problems = [], []
        for run_id in run_ids:
            try:
                found.append(self.client.jobs.get_run(int(run_id)).as_dict())
            except Exception as exc:  # the SDK raises its own DatabricksError family
                problems.append(f"run {run_id}: {redact(str(exc))}")
        return found, problems

    def list_clusters(self) -> list[dict[str, Any]] | None:
        return [cluster.as_dict() for cluster in self.client.clusters.list()]

    def get_outputs(self, task_run_ids: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        found, problems = {}, []
        for task_run_id in task_run_ids:
            try:
                found[task_run_id] = self.client.jobs.get_run_output(int(task_run_id)).as_dict()
            except Exception as exc:  # the SDK raises its own DatabricksError family
                problems.append(f"task run {task_run_id}: {redact(str(exc))}")
        return found, problems


def sdk_importable() -> bool:
    """databricks-sdk is optional: find it without importing it."""
    try:
        return importlib.util.find_spec("databricks.sdk") is not None
    except ModuleNotFoundError:  # no `databricks` package at all
        return False


def client_from_settings(settled: Callable[[list[str]], set[str]] | None = None) -> RunSourceClient | None:
    """The configured client: the command first, else the SDK with host + token; None when neither.

    `settled(run_ids)` names the run ids already stored as finished (see `CliClient`).
    """
    timeout = settings.AIRBOARD_COLLECTOR_TIMEOUT_SECONDS
    if settings.AIRBOARD_RUN_SOURCE_COMMAND.strip():
        return CliClient(
            settings.AIRBOARD_RUN_SOURCE_COMMAND, settings.AIRBOARD_CLUSTER_SOURCE_COMMAND, timeout, settled
        )
    if settings.DATABRICKS_HOST and settings.DATABRICKS_TOKEN and sdk_importable():  # pragma: no cover
        return SdkClient(settings.DATABRICKS_HOST, settings.DATABRICKS_TOKEN)
    return None


def run_node_log_command(
    template: str, run_id: str, attempt: int, node: int, timeout: float, page_token: str = ""
) -> str:
    """One node's log from the operator's log command (placeholders filled per argument, no shell).

    `{run_id}`, `{attempt}` (from 1), `{retry}` (the same attempt from 0, as `air logs --retry`
    and the logs endpoint's `ref.attempt_number` count), `{node}` and `{page_token}`.
    """
    values = {
        "{run_id}": run_id,
        "{attempt}": str(attempt),
        "{retry}": str(attempt - 1),
        "{node}": str(node),
        "{page_token}": page_token,
    }
    argv = []
    for arg in split_command(template):
        for placeholder, value in values.items():
            # str.replace, not str.format: an argument may hold other braces (JSON, globs).
            arg = arg.replace(placeholder, value)
        argv.append(arg)
    return run_command(argv, timeout)
