"""Running a configured command (the Databricks CLI, a billing query) the one safe way.

The operator configures whole commands; they are split with shlex and run with no shell, a
timeout, and JSON parsing. Errors become `CollectorError` with the stderr tail (or the CLI's
JSON error envelope), secrets redacted. Both apps' collectors read their sources through here.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from dashboard.kit.redaction import redact

# Characters of stderr kept in an error: enough for the CLI's message, never a whole dump.
STDERR_TAIL_CHARS = 2_000

# The server's own configuration and secrets: no command or workload it starts needs them, and a
# workload's code (or a compromised CLI plugin) could read them (issue 33: DJANGO_SECRET_KEY,
# DATABASE_URL and AIRBOARD_METRICS_TOKEN reached user code). Every DJANGO_* and AIRBOARD_*
# variable, the database and broker URLs, and PostgreSQL's password variables.
SERVER_ENV_PREFIXES = ("DJANGO_", "AIRBOARD_", "CELERY_")
SERVER_ENV_NAMES = frozenset({"DATABASE_URL", "REDIS_URL", "PGPASSWORD", "PGPASSFILE", "SENTRY_DSN"})
# The workspace credentials the operator gives the Databricks CLI: kept for operator commands
# (the CLI authenticates with them), removed for workloads, whose code is the team's.
DATABRICKS_CREDENTIALS = frozenset(
    {"DATABRICKS_TOKEN", "DATABRICKS_CLIENT_SECRET", "DATABRICKS_PASSWORD", "DATABRICKS_AZURE_CLIENT_SECRET"}
)


def scrubbed_env(base: Mapping[str, str] | None = None, *, for_workload: bool = False) -> dict[str, str]:
    """`base` (the server's environment by default) without the server's secrets.

    PATH, HOME, locale and proxy settings stay: commands need them to run at all.
    """
    env = dict(os.environ if base is None else base)
    removed = [
        name
        for name in env
        if name.startswith(SERVER_ENV_PREFIXES)
        or name in SERVER_ENV_NAMES
        or (for_workload and name in DATABRICKS_CREDENTIALS)
    ]
    for name in removed:
        del env[name]
    return env


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


def shown(argv: list[str]) -> str:
    return redact(shlex.join(argv))[:300]


def run_command(argv: list[str], timeout: float) -> str:
    """Run argv (no shell) and return its stdout decoded as UTF-8 (bad bytes replaced)."""
    try:
        completed = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, env=scrubbed_env())
    except subprocess.TimeoutExpired:
        raise CollectorError(f"`{shown(argv)}` timed out after {timeout:g}s") from None
    except OSError as exc:  # not found, not executable
        raise CollectorError(f"`{shown(argv)}` could not start: {exc.strerror or exc}") from None
    if completed.returncode != 0:
        envelope = _error_envelope(completed.stdout)
        if envelope:
            raise CollectorError(f"`{shown(argv)}` exited with {completed.returncode}: {redact(envelope)}")
        tail = completed.stderr.decode("utf-8", "replace").strip()[-STDERR_TAIL_CHARS:]
        raise CollectorError(f"`{shown(argv)}` exited with {completed.returncode}: {redact(tail) or '(no stderr)'}")
    return completed.stdout.decode("utf-8", "replace")


def _error_envelope(stdout: bytes) -> str:
    """The message of a `databricks air ... -o json` error envelope on stdout, or ''.

    The air commands print `{"v": 1, "error": {"code", "message", ...}}` and exit 1, with
    nothing useful on stderr.
    """
    try:
        payload = json.loads(stdout.decode("utf-8", "replace"))
    except ValueError:
        return ""
    return envelope_error(payload)


def run_json(argv: list[str], timeout: float) -> Any:
    """Run argv and parse its stdout as JSON; empty output is None (the CLI prints nothing for no runs)."""
    out = run_command(argv, timeout)
    if not out.strip():
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError as exc:
        raise CollectorError(f"`{shown(argv)}` printed invalid JSON ({exc.msg} at line {exc.lineno})") from None


def envelope_error(payload: Any) -> str:
    """The message of a `databricks air ... -o json` error envelope (`{"v": 1, "error": {...}}`), or ''."""
    if not (isinstance(payload, dict) and "v" in payload and payload.get("error") is not None):
        return ""
    error = payload["error"] if isinstance(payload["error"], dict) else {"message": str(payload["error"])}
    return f"{error.get('code') or 'ERROR'}: {error.get('message') or '(no message)'}"
