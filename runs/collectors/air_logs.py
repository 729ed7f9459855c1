"""Node logs of an AI Runtime (serverless GPU) run, from whichever shape the log command prints.

The log command (`AIRBOARD_LOG_SOURCE_COMMAND`) fetches one node's log of one attempt. Besides
plain text it may print, exactly as Databricks does (../shared/reference/databricks-ai-runtime.md,
from databricks/cli `experimental/air/cmd/logstream.go` and its acceptance test `logs`):

- the logs endpoint, `databricks api get /api/2.0/ai-training/workflows/by-run-id/{run_id}/logs
  ?ref.attempt_number={retry}&filter.node_index={node}&page_token={page_token}`: a JSON object
  `{"log_records": [{"time_unix_nano", "body", "node_index"}], "next_page_token"}`, records
  possibly newest first. With `{page_token}` in the command every page is fetched (at most
  MAX_PAGES); the records are put in time order.
- `databricks air logs {run_id} --retry {retry} --node {node} -o json`: one JSON object a line,
  `{"type": "LOG"|"ALERT"|"ERROR", "ts", "node", "line"}`. ALERT lines repeat a LOG line the
  CLI's patterns matched and ERROR lines say there is nothing (yet): only LOG lines are log.
  An `{"v": 1, "error": {...}}` envelope is the command's error.

When the command fails for an attempt that has an MLflow run (the logs endpoint is gated off
for some workspaces, and older runs predate it), the node's log is read from that run's
artifacts instead, as `air logs` falls back: `logs/attempt_<retry>/node_<node>/`, or
`logs/node_<node>/` in the older layout, holding `logs-<i>.chunk.txt` files joined in index
order (experimental/air/cmd/logmlflow.go).

The result is the node's whole log as text, so the caller appends only what is beyond the
stored part (incremental, as for any log command). The runtime's own lines ("ERROR: Script
failed with exit code N after Ss", the MLflow logger's stall warning) are ordinary lines of it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dashboard.commands import CollectorError
from runs.collectors.databricks_cli import run_node_log_command
from runs.collectors.jobs_records import EnvelopeError, air_run_ids, is_air_envelope
from runs.collectors.mlflow_client import MlflowSource, MlflowSourceError

# Pages of the logs endpoint read for one node in one pass: the rest waits for the next pass.
MAX_PAGES = 200
CHUNK_FILE = re.compile(r"^logs-(\d+)\.chunk\.txt$")


def records_text(records: list[dict[str, Any]], node: int) -> str:
    """Log records of one node in time order (stable for equal times), one body a line."""
    mine = [r for r in records if isinstance(r, dict) and int(r.get("node_index") or 0) == node]
    mine.sort(key=lambda r: int(r.get("time_unix_nano") or 0))
    return "".join(f"{str(r.get('body') or '').rstrip(chr(10))}\n" for r in mine)


def json_lines_text(output: str, node: int) -> str | None:
    """`air logs -o json` lines as text, or None when the output is not that shape."""
    lines: list[str] = []
    for raw in output.splitlines():
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except json.JSONDecodeError:
            return None
        if not isinstance(item, dict) or "type" not in item or "line" not in item:
            return None
        if item["type"] == "LOG" and int(item.get("node") or 0) == node:
            lines.append(f"{item['line']}\n")
    return "".join(lines)


def parse_page(output: str) -> tuple[list[dict[str, Any]] | None, str]:
    """(records, next page token) of a logs-endpoint answer; (None, '') for any other output."""
    try:
        payload = json.loads(output)
    except json.JSONDecodeError:
        return None, ""
    if is_air_envelope(payload):
        try:
            air_run_ids(payload)
        except EnvelopeError as exc:
            raise CollectorError(str(exc)) from None
        return None, ""
    if not isinstance(payload, dict) or ("log_records" not in payload and "next_page_token" not in payload):
        return None, ""
    records = payload.get("log_records") or []
    if not isinstance(records, list):
        raise CollectorError("log_records is not a list")
    return records, str(payload.get("next_page_token") or "")


def fetch_node_log(template: str, run_id: str, attempt: int, node: int, timeout: float) -> str:
    """The node's whole log as text, whichever shape the command prints (see the module docstring)."""
    output = run_node_log_command(template, run_id, attempt, node, timeout)
    stripped = output.strip()
    if not stripped.startswith("{"):
        return output
    records, token = parse_page(stripped)
    if records is None:
        lines = json_lines_text(stripped, node)
        return output if lines is None else lines
    pages = 1
    while token and "{page_token}" in template and pages < MAX_PAGES:
        more, token = parse_page(run_node_log_command(template, run_id, attempt, node, timeout, token).strip())
        records += more or []
        pages += 1
    return records_text(records, node)


def mlflow_node_log(source: MlflowSource, mlflow_run_id: str, attempt: int, node: int) -> str | None:
    """The node's log from the MLflow run's artifacts, or None when the run holds none for it.

    The attempt-prefixed layout (`logs/attempt_<attempt - 1>/node_<node>`) is tried first,
    then the older `logs/node_<node>`; chunk files are joined in numeric index order.
    """
    try:
        top = set(source.artifact_paths(mlflow_run_id, "logs"))
        if f"logs/attempt_{attempt - 1}" in top:
            folder = f"logs/attempt_{attempt - 1}/node_{node}"
        elif f"logs/node_{node}" in top:
            folder = f"logs/node_{node}"
        else:
            return None
        chunks = sorted(
            (int(match[1]), path)
            for path in source.artifact_paths(mlflow_run_id, folder)
            if (match := CHUNK_FILE.match(path.rsplit("/", 1)[-1]))
        )
        if not chunks:
            return None
        return "".join(source.artifact_text(mlflow_run_id, path) for _, path in chunks)
    except MlflowSourceError as exc:
        raise CollectorError(str(exc)) from None
    return None
