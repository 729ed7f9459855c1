"""Billed usage from a configured query: the adapter between a command's output and `reconcile`.

The operator configures whole commands (`AIRBOARD_BILLING_USAGE_COMMAND`, and optionally
`AIRBOARD_BILLING_PRICES_COMMAND`), for example the Databricks CLI running a SQL statement on a
warehouse:

    databricks api post /api/2.0/sql/statements --json '{"warehouse_id": "...",
      "statement": "SELECT * FROM system.billing.usage WHERE usage_date >= current_date() - 7",
      "wait_timeout": "50s", "format": "JSON_ARRAY", "disposition": "INLINE"}'

The command's stdout is either CSV (an export, or a script's own output) or the Statement
Execution API's JSON (`status.state`, `manifest.schema.columns`, `result.data_array`, every
non-null value a string). Both become the CSV that `importing.import_usage` reads, so a query
and a file are imported by the same all-or-nothing rules; in a statement's rows, line N of an
error is row N - 1 of `data_array`. Commands run with no shell and a timeout, their errors
redacted, through the run source's `run_command`.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django.conf import settings

from billing.reconcile import importing
from dashboard.kit.commands import CollectorError, run_command, split_command


class UsageSourceError(Exception):
    """The command could not be run, or its output is neither CSV nor a finished statement."""


def statement_csv(payload: dict[str, Any]) -> str:
    """The Statement Execution API's JSON_ARRAY result as CSV text, header first.

    1. The statement must have SUCCEEDED; any other state is an error naming it (and the
       error message, for FAILED).
    2. Column names come from `manifest.schema.columns`, in `position` order.
    3. A result with more chunks than the first (`next_chunk_index`) or truncated by a limit
       is refused rather than imported in part: narrow the query (a date range) instead.
    """
    status = payload.get("status") or {}
    state = status.get("state")
    if state != "SUCCEEDED":
        message = (status.get("error") or {}).get("message") or ""
        raise UsageSourceError(f"the statement is {state or 'in no state'}{': ' + message if message else ''}")
    manifest = payload.get("manifest") or {}
    columns = sorted((manifest.get("schema") or {}).get("columns") or [], key=lambda c: c.get("position", 0))
    if not columns:
        raise UsageSourceError("the statement's manifest lists no columns")
    result = payload.get("result") or {}
    if result.get("next_chunk_index") is not None or manifest.get("truncated"):
        total = manifest.get("total_row_count")
        raise UsageSourceError(
            f"the result holds more rows than its first chunk ({result.get('row_count', 0)} of {total}); "
            "narrow the query, e.g. to the last 7 days"
        )
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow([c["name"] for c in columns])
    for row in result.get("data_array") or []:
        writer.writerow(["" if value is None else value for value in row])
    return out.getvalue()


def read(command: str) -> io.StringIO:
    """Run `command` and return its output as CSV, whichever of the two shapes it printed."""
    try:
        text = run_command(split_command(command), timeout=settings.AIRBOARD_COLLECTOR_TIMEOUT_SECONDS)
    except CollectorError as exc:
        raise UsageSourceError(str(exc)) from None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            payload = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise UsageSourceError(f"the output looks like JSON but is not: {exc.msg} at line {exc.lineno}") from None
        text = statement_csv(payload)
    return io.StringIO(text, newline="")


def configured() -> bool:
    return bool(settings.AIRBOARD_BILLING_USAGE_COMMAND)


def import_configured() -> importing.ImportResult:
    """Import billed usage (and list prices, when their command is set) from the configured commands."""
    if not configured():
        raise UsageSourceError("AIRBOARD_BILLING_USAGE_COMMAND is not set")
    prices = read(settings.AIRBOARD_BILLING_PRICES_COMMAND) if settings.AIRBOARD_BILLING_PRICES_COMMAND else None
    return importing.import_usage(read(settings.AIRBOARD_BILLING_USAGE_COMMAND), prices)
