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
from collections.abc import Callable
from typing import Any

from dashboard.kit.commands import CollectorError
from runs.collectors.databricks_cli import run_node_log_command
from runs.collectors.jobs_records import EnvelopeError, air_run_ids, is_air_envelope
from runs.collectors.mlflow_client import MlflowSource, MlflowSourceError

# Pages of the logs endpoint read for one node in one pass: the rest waits for the next pass.
MAX_PAGES = 200
CHUNK_FILE = re.compile(r"^logs-(\d+)\.chunk\.txt$")


def whole_number(value: Any) -> int | None:
    """An int, or a string of ASCII digits (JSON writes int64 as a string): else None.

    `int()` raises on `"zz"` and on `"²"` (a digit to `str.isdigit`), which ended the pass.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.strip().isdigit() and len(value) <= 30:
        return int(value)
    return None


def records_text(records: list[dict[str, Any]], node: int) -> str:
    """Log records of one node in time order (stable for equal times), one body a line.

    A record whose node or time is no whole number is not this node's (it is left out).
    """
    mine = [r for r in records if isinstance(r, dict) and whole_number(r.get("node_index") or 0) == node]
    mine = [r for r in mine if whole_number(r.get("time_unix_nano") or 0) is not None]
    mine.sort(key=lambda r: whole_number(r.get("time_unix_nano") or 0) or 0)
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
        # A line that is not the CLI's shape (a node that is no number: `{"type": "LOG",
        # "node": "zz"}` printed by the training script itself) means the output is plain text.
        if not isinstance(item, dict) or "type" not in item or "line" not in item:
            return None
        item_node = whole_number(item.get("node") or 0)
        if item_node is None:
            return None
        if item["type"] == "LOG" and item_node == node:
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


def fetch_node_log(
    template: str, run_id: str, attempt: int, node: int, timeout: float, skip: Callable[[str], None] | None = None
) -> str:
    """The node's whole log as text, whichever shape the command prints (see the module docstring).

    Paging stops at MAX_PAGES, and at a page token seen before (an endpoint that answers every
    page with the same token would otherwise be read MAX_PAGES times, its lines stored again
    each time); `skip` is told why.
    """
    output = run_node_log_command(template, run_id, attempt, node, timeout)
    stripped = output.strip()
    if not stripped.startswith("{"):
        return output
    records, token = parse_page(stripped)
    if records is None:
        lines = json_lines_text(stripped, node)
        return output if lines is None else lines
    pages, seen, known = 1, set(), {_record_key(r) for r in records}
    while token and "{page_token}" in template and pages < MAX_PAGES:
        if token in seen:
            if skip is not None:
                skip(f"the logs endpoint repeated page token {token[:40]!r}; paging stopped after {pages} page(s)")
            break
        seen.add(token)
        more, token = parse_page(run_node_log_command(template, run_id, attempt, node, timeout, token).strip())
        # A page that repeats records already read (the same time, node and body) adds nothing.
        fresh = [r for r in more or [] if _record_key(r) not in known]
        known.update(_record_key(r) for r in fresh)
        records += fresh
        pages += 1
    return records_text(records, node)


def _record_key(record: Any) -> tuple[str, str, str]:
    if not isinstance(record, dict):
        return ("", "", repr(record))
    return (str(record.get("time_unix_nano")), str(record.get("node_index")), str(record.get("body")))


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
