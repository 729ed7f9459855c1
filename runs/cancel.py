"""The one way a run is cancelled: the run page's button and budget enforcement both come here.

Claimed once: `cancel_requested_at` is set by a conditional UPDATE on an active run with no
request yet, so a double click, two team members, or a member and the enforcer at once make
one request, and a run that finished meanwhile is left alone. The claimant then asks the run to
stop by the first method that applies and records a `RunEvent`:

- a run Airboard's launcher or an API key wrote (`origin` is not the collector), or a local run:
  the flag is the request; its launcher polls for it and stops the process;
- a run the run-source collector wrote: `AIRBOARD_CANCEL_COMMAND` with `{run_id}` (e.g.
  `databricks jobs cancel-run {run_id}`), else `AIRBOARD_CANCEL_WEBHOOK_URL` (signed JSON);
  only such runs carry the source's own id, so another team's run can never be hit by id.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from dashboard.kit.commands import scrubbed_env
from dashboard.kit.outbound import SIGNATURE_HEADER, send, sign
from dashboard.kit.redaction import redact
from runs.choices import CancelOutcome, RunEventKind, RunOrigin, RunSource, RunStatus
from runs.models import Run, RunEvent

# Characters of a cancel command's output kept with the outcome.
OUTPUT_TAIL = 2000
LOCAL_FLAG = "local flag"


@dataclass(frozen=True)
class Cancel:
    """What a cancel request did: `requested` False when another request (or the run's end) came first."""

    requested: bool
    method: str = ""
    outcome: str = CancelOutcome.SKIPPED
    output: str = ""

    def describe(self, reason: str) -> str:
        """The line the run's event, a policy's notice and its webhook payload say."""
        return f"{reason}: cancel {CancelOutcome(self.outcome).label.lower()} via {self.method or 'nothing'}"


def request_cancel(run: Run, *, reason: str, now: datetime, details: dict[str, Any] | None = None) -> Cancel:
    """Ask `run` to stop, once. `reason` heads the run's event; `details` are kept on it."""
    claimed = Run.objects.filter(pk=run.pk, status__in=RunStatus.active(), cancel_requested_at__isnull=True).update(
        cancel_requested_at=now
    )
    if not claimed:
        return Cancel(requested=False, output="a cancel was already requested, or the run has ended")
    run.cancel_requested_at = now
    method, outcome, output = _by_method(run, reason)
    done = Cancel(requested=True, method=method, outcome=outcome, output=output[-OUTPUT_TAIL:])
    RunEvent.objects.create(
        run=run, ts=now, kind=RunEventKind.CANCEL_REQUESTED, message=done.describe(reason),
        details={**(details or {}), "method": method, "outcome": outcome},
    )  # fmt: skip
    return done


def _by_method(run: Run, reason: str) -> tuple[str, str, str]:
    """(method, outcome, output) of asking `run` to stop by the first method that applies."""
    if run.source == RunSource.LOCAL or run.origin != RunOrigin.COLLECTOR:
        return LOCAL_FLAG, CancelOutcome.DONE, ""
    template = settings.AIRBOARD_CANCEL_COMMAND
    if template:
        return ("command", *run_cancel_command(template, run.external_id))
    url = settings.AIRBOARD_CANCEL_WEBHOOK_URL
    if url:
        body = json.dumps({"event": "cancel", "run_id": run.external_id, "reason": reason}).encode()
        headers = {"Content-Type": "application/json"}
        if settings.AIRBOARD_CANCEL_WEBHOOK_SECRET:
            headers[SIGNATURE_HEADER] = sign(settings.AIRBOARD_CANCEL_WEBHOOK_SECRET, body)
        code, error = send(url, body, headers, settings.AIRBOARD_WEBHOOK_TIMEOUT_SECONDS)
        ok = code is not None and 200 <= code < 300
        return "webhook", CancelOutcome.DONE if ok else CancelOutcome.FAILED, error or f"HTTP {code}"
    return "", CancelOutcome.SKIPPED, "no cancel method: set AIRBOARD_CANCEL_COMMAND or AIRBOARD_CANCEL_WEBHOOK_URL"


def run_cancel_command(template: str, run_id: str) -> tuple[str, str]:
    """Run the cancel command for `run_id`: (outcome, output tail).

    The template is split first and {run_id} substituted into each argument after, so a run
    id can never add arguments or reach a shell. A template that does not split (an unclosed
    quote) fails the cancel like a command that exits non-zero, never the page or the pass. The
    output is kept redacted, as every command's error is (dashboard.kit.commands): the policy page
    shows it to the team.
    """
    try:
        parts = shlex.split(template)
    except ValueError as exc:
        return CancelOutcome.FAILED, f"cannot parse AIRBOARD_CANCEL_COMMAND: {exc}"
    if not parts:
        return CancelOutcome.FAILED, "AIRBOARD_CANCEL_COMMAND is blank"
    args = [part.replace("{run_id}", run_id) for part in parts]
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=settings.AIRBOARD_CANCEL_TIMEOUT_SECONDS, check=False,
            env=scrubbed_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return CancelOutcome.FAILED, f"timed out after {settings.AIRBOARD_CANCEL_TIMEOUT_SECONDS} s"
    except OSError as exc:
        return CancelOutcome.FAILED, f"cannot run {args[0]!r}: {exc.strerror or exc}"
    output = redact((done.stdout + done.stderr)[-OUTPUT_TAIL:])
    if done.returncode != 0:
        return CancelOutcome.FAILED, f"exit status {done.returncode}\n{output}"
    return CancelOutcome.DONE, output
