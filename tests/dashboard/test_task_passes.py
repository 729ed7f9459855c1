"""The collectors page shows every beat and queued task's last pass (dashboard/taskstate.py).

The demo runs no source collector, and the page used to say "No collector has run yet ... start
the worker and beat" while beat had run its tasks 70 times.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.celery import app
from dashboard.models import TaskState
from dashboard.schedule import BEAT_SCHEDULE
from dashboard.taskstate import record, summarize, task_rows
from tests.conftest import World, wait_for

pytestmark = pytest.mark.django_db


def test_results_read_as_words() -> None:
    assert summarize("runs.compact_telemetry", 12000) == "12,000 raw samples folded into blocks"
    assert summarize("billing.enforce_policies", {"policies": 3, "alerts": 1, "actions": 0}) == (
        "policies 3, alerts 1, actions 0"
    )
    assert summarize("runs.ingest_gpu_samples", None) == ""
    assert len(summarize("x", "y" * 1000)) == 300


def test_passes_count_up_and_a_failure_keeps_its_redacted_error() -> None:
    started = timezone.now() - timedelta(seconds=2)
    record("runs.collect_runs", "SUCCESS", 4, started, 1500)
    record("runs.collect_runs", "SUCCESS", 2, started, 900)
    state = TaskState.objects.get(task="runs.collect_runs")
    assert (state.runs_total, state.failures_total, state.last_result) == (2, 0, "2 run records collected")
    assert state.last_duration_ms == 900 and state.last_error == ""
    record(
        "runs.collect_runs", "FAILURE", RuntimeError("token dapi0123456789abcdef0123456789abcdef refused"), started, 5
    )
    state.refresh_from_db()
    assert (state.runs_total, state.failures_total, state.last_state) == (3, 1, "FAILURE")
    assert state.last_error.startswith("RuntimeError: token ") and "dapi0123456789abcdef" not in state.last_error


def test_every_beat_entry_is_listed_run_or_not_then_queued_tasks() -> None:
    record("runs.ingest_gpu_samples", "SUCCESS", None, timezone.now(), 10)
    rows = task_rows()
    beat = [entry["task"] for entry in BEAT_SCHEDULE.values()]
    assert [row.task for row in rows[: len(beat)]] == beat
    assert all(row.state is None for row in rows[: len(beat)])
    assert [(row.task, row.schedule) for row in rows[len(beat) :]] == [
        ("runs.ingest_gpu_samples", "on demand (queued)")
    ]
    schedules = {row.task: row.schedule for row in rows}
    assert schedules["runs.collect_mlflow"] == "every minute"
    assert schedules["billing.roll_up_costs"] == "every 5 minutes"
    assert schedules["billing.enforce_policies"] == "every 5 minutes from :02"
    assert schedules["runs.maintain_telemetry_partitions"] == "hourly at :41"
    assert schedules["billing.import_billed_usage"] == "daily at 04:53 UTC"


def test_the_collectors_page_shows_beats_passes_and_errors_only_to_staff(world: World) -> None:
    record("billing.roll_up_costs", "SUCCESS", {"runs": 12, "days": 3}, timezone.now(), 250)
    record("runs.collect_logs", "FAILURE", OSError("/var/log/secret-host unreadable"), timezone.now(), 3)
    member = world.client_for(world.alice).get("/collectors/").content.decode()
    assert "No collector has run yet" not in member
    assert "billing.roll_up_costs" in member and "runs 12, days 3" in member and "every 5 minutes" in member
    assert "not run yet" in member and ">failed</span>" in member
    assert "secret-host" not in member
    staff = world.client_for(world.sam).get("/collectors/").content.decode()
    assert "secret-host" in staff


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_records_a_beat_tasks_pass(celery_worker) -> None:
    app.send_task("runs.collect_mlflow")
    done = TaskState.objects.filter(task="runs.collect_mlflow", runs_total__gte=1)
    assert wait_for(done.exists, timeout=60), celery_worker.log()
    state = done.get()
    assert state.last_state == "SUCCESS" and state.last_result == "0 MLflow items collected"
    assert state.last_started_at <= state.last_finished_at
