"""What every Celery task did last: when, with what result, how much it brought in.

The worker records each task's pass in TaskState from Celery's own signals (task_prerun,
task_postrun), so the collectors page can show beat's passes even where no collector is
configured (the demo: the live demo, cost rollups, compaction and ingest all run on beat and
the queue). Recording never fails a task: a database error here is logged and dropped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery.schedules import crontab
from celery.signals import task_postrun, task_prerun
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from dashboard.kit.redaction import redact
from dashboard.models import TaskState
from dashboard.schedule import BEAT_SCHEDULE

log = logging.getLogger(__name__)

# What a task's integer result counts, in words ("3 runs collected"); dict results speak for themselves.
RESULT_UNITS = {
    "runs.requeue_pending_batches": "batches re-queued",
    "runs.collect_mlflow": "MLflow items collected",
    "runs.collect_runs": "run records collected",
    "runs.collect_logs": "log lines collected",
    "runs.collect_live_demo": "demo samples written",
    "runs.prune_telemetry": "raw samples pruned",
    "runs.compact_telemetry": "raw samples folded into blocks",
    "runs.maintain_telemetry_partitions": "partitions made",
    "billing.derive_egress": "egress records derived",
}
# Started passes by task id, in this worker process (a solo or prefork child runs one at a time).
_started: dict[str, tuple[float, datetime]] = {}


def summarize(task: str, result: Any) -> str:
    """A task's return value in words, at most 300 characters."""
    if result is None:
        return ""
    if isinstance(result, bool):
        return "yes" if result else "no"
    if isinstance(result, int):
        return f"{result:,} {RESULT_UNITS.get(task, 'items')}"
    if isinstance(result, dict):
        parts = []
        for key, value in result.items():
            shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
            parts.append(f"{key.replace('_', ' ')} {shown}")
        return ", ".join(parts)[:300]
    return str(result)[:300]


@task_prerun.connect
def _on_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task_id:
        _started[task_id] = (time.monotonic(), timezone.now())


@task_postrun.connect
def _on_postrun(
    task_id: str | None = None, task: Any = None, retval: Any = None, state: str | None = None, **_: Any
) -> None:
    name = getattr(task, "name", None)
    if not name:
        return
    began, started_at = _started.pop(task_id or "", (time.monotonic(), timezone.now()))
    try:
        record(name, state or "", retval, started_at, int((time.monotonic() - began) * 1000))
    except Exception:  # recording must never fail or retry the task it describes
        log.exception("could not record the pass of %s", name)


def record(task: str, state: str, retval: Any, started_at: datetime, duration_ms: int) -> None:
    """Write one finished pass: the last pass's fields, the totals counted up in the database."""
    failed = state == "FAILURE" or isinstance(retval, BaseException)
    now = timezone.now()
    fields: dict[str, Any] = {
        "last_started_at": started_at,
        "last_finished_at": now,
        "last_state": state[:16],
        "last_duration_ms": max(0, min(duration_ms, 2**31 - 1)),
        "runs_total": F("runs_total") + 1,
    }
    if failed:
        fields |= {
            "last_error": redact(f"{type(retval).__name__}: {retval}")[:500],
            "last_error_at": now,
            "failures_total": F("failures_total") + 1,
            "last_result": "",
        }
    else:
        fields["last_result"] = summarize(task, retval)
    if TaskState.objects.filter(task=task).update(**fields):
        return
    try:
        with transaction.atomic():
            TaskState.objects.create(task=task)
    except IntegrityError:
        pass  # another worker created it first: the update below counts this pass on its row
    TaskState.objects.filter(task=task).update(**fields)


@dataclass(frozen=True)
class TaskRow:
    """A row of the collectors page's "Scheduled and queued tasks" table."""

    task: str
    schedule: str
    state: TaskState | None

    @property
    def failing(self) -> bool:
        return self.state is not None and self.state.last_state == "FAILURE"


def _every(schedule: object) -> str:
    if isinstance(schedule, crontab):
        # crontab keeps its source text only in these private attributes (not in celery-types' stubs).
        fields = (schedule._orig_minute, schedule._orig_hour)  # type: ignore[attr-defined]
        minute, hour = (str(f) for f in fields)
        if hour == "*" and minute == "*":
            return "every minute"
        if hour == "*" and minute.startswith("*/"):
            return f"every {minute[2:]} minutes"
        if hour == "*" and "/" in minute:
            start, step = minute.split("/", 1)
            return f"every {step} minutes from :{start.split('-')[0].zfill(2)}"
        if hour == "*":
            return f"hourly at :{minute.zfill(2)}"
        return f"daily at {hour.zfill(2)}:{minute.zfill(2)} UTC"
    return str(schedule)


def task_rows() -> list[TaskRow]:
    """Every beat entry (run or not yet), then every other task that has run (ingest, classify)."""
    states = {s.task: s for s in TaskState.objects.all()}
    rows = [TaskRow(entry["task"], _every(entry["schedule"]), states.pop(entry["task"], None))
            for entry in BEAT_SCHEDULE.values()]  # fmt: skip
    rows += [TaskRow(name, "on demand (queued)", state) for name, state in sorted(states.items())]
    return rows
