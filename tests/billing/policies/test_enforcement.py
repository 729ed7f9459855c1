"""Enforcement (billing/policies/enforcement.py): cancels of a spent policy's runs and the idle-GPU rule.

The cancel command is tests/bin/fake-cancel, a real executable that appends its arguments
to a file: the test reads what was invoked, and how many times.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from billing.choices import EnforcementKind, EnforcementOutcome, SpentAction
from billing.costs import rollups
from billing.models import AcceleratorPrice, PolicyAction, UsagePolicy
from billing.policies import enforcement
from dashboard.schedule import BEAT_SCHEDULE
from runs.choices import RunEventKind, RunSource, RunStatus
from runs.models import GpuMinute, Node, Run, RunEvent
from tests.conftest import T0, TESTS, make_run

FAKE_CANCEL = TESTS / "bin" / "fake-cancel"


@pytest.fixture
def cancel_log(settings, tmp_path: Path, monkeypatch) -> Path:
    log = tmp_path / "cancel.log"
    monkeypatch.setenv("FAKE_CANCEL_LOG", str(log))
    settings.AIRBOARD_CANCEL_COMMAND = f"{FAKE_CANCEL} air cancel {{run_id}}"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def make_policy(world, **fields: object) -> UsagePolicy:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("10"),
    )  # fmt: skip
    policy = UsagePolicy.objects.create(name="vision-research", **fields)
    policy.teams.add(world.vision)
    return policy


def running(world, external_id: str, **fields: object) -> Run:
    return make_run(world.vision, external_id, usage_policy_name="vision-research", status=RunStatus.RUNNING,
                    ended_at=None, **fields)  # fmt: skip


def test_spent_budget_cancels_each_running_run_once(world, cancel_log: Path) -> None:
    make_policy(world, budget_usd=Decimal("500"), action=SpentAction.CANCEL)
    make_run(world.vision, "done", usage_policy_name="vision-research", ended_at=T0 + timedelta(hours=7))  # $560
    live = running(world, "job-42")
    other_team = make_run(world.nlp, "nlp-live", usage_policy_name="vision-research", status=RunStatus.RUNNING,
                          ended_at=None)  # fmt: skip
    now = T0 + timedelta(hours=8)
    rollups.recompute_days([T0.date()], now=now)
    enforcement.enforce_all(now)
    enforcement.enforce_all(now + timedelta(minutes=5))
    assert calls(cancel_log) == [["air", "cancel", "job-42"]]
    action = PolicyAction.objects.get()
    assert (action.run_id, action.kind, action.outcome, action.method) == (
        live.pk,
        EnforcementKind.BUDGET_CANCEL,
        EnforcementOutcome.DONE,
        "command",
    )
    assert "cancelled job-42" in action.output_tail
    event = RunEvent.objects.get(run=live)
    assert event.kind == RunEventKind.CANCEL_REQUESTED and "spent its $500" in event.message
    assert not PolicyAction.objects.filter(run=other_team).exists()


def test_notify_only_never_cancels(world, cancel_log: Path) -> None:
    make_policy(world, budget_usd=Decimal("10"), action=SpentAction.REFUSE)
    running(world, "job-1")
    enforcement.enforce_all(T0 + timedelta(hours=3))
    assert calls(cancel_log) == [] and not PolicyAction.objects.exists()


def test_local_run_is_flagged_for_its_launcher(world, cancel_log: Path) -> None:
    make_policy(world, budget_usd=Decimal("10"), action=SpentAction.CANCEL)
    live = running(world, "local-1", source=RunSource.LOCAL)
    now = T0 + timedelta(hours=1)
    enforcement.enforce_all(now)
    live.refresh_from_db()
    assert live.cancel_requested_at == now
    assert calls(cancel_log) == []
    assert PolicyAction.objects.get().method == "local flag"


def test_failing_command_is_recorded(world, settings) -> None:
    settings.AIRBOARD_CANCEL_COMMAND = "false {run_id}"
    make_policy(world, budget_usd=Decimal("10"), action=SpentAction.CANCEL)
    running(world, "job-1")
    enforcement.enforce_all(T0 + timedelta(hours=1))
    action = PolicyAction.objects.get()
    assert action.outcome == EnforcementOutcome.FAILED and "exit status 1" in action.output_tail


def test_no_cancel_method_is_skipped(world, settings) -> None:
    settings.AIRBOARD_CANCEL_COMMAND = ""
    settings.AIRBOARD_CANCEL_WEBHOOK_URL = ""
    make_policy(world, budget_usd=Decimal("10"), action=SpentAction.CANCEL)
    running(world, "job-1")
    enforcement.enforce_all(T0 + timedelta(hours=1))
    assert PolicyAction.objects.get().outcome == EnforcementOutcome.SKIPPED


def test_run_id_cannot_inject_arguments(world, cancel_log: Path) -> None:
    make_policy(world, budget_usd=Decimal("10"), action=SpentAction.CANCEL)
    running(world, "x; rm -rf / --all")
    enforcement.enforce_all(T0 + timedelta(hours=1))
    assert calls(cancel_log) == [["air", "cancel", "x; rm -rf / --all"]]


def idle_minutes(run: Run, start: datetime, minutes: int, utilization: float) -> None:
    node = Node.objects.get(attempt__run=run)
    GpuMinute.objects.bulk_create(
        GpuMinute(
            run=run,
            node=node,
            gpu_index=gpu,
            minute=start + timedelta(minutes=m),
            samples=6,
            utilization_gpu_max=utilization,
        )
        for m in range(minutes)
        for gpu in range(2)
    )


def test_idle_rule_warns_then_cancels_once(world, cancel_log: Path) -> None:
    make_policy(world, idle_gpu_percent=5, idle_warn_minutes=10, idle_cancel_minutes=30)
    live = running(world, "idle-1")
    busy = running(world, "busy-1")
    idle_minutes(live, T0, 40, 1.0)
    idle_minutes(busy, T0, 40, 90.0)
    enforcement.enforce_all(T0 + timedelta(minutes=12))  # 12 idle minutes: warn
    assert list(PolicyAction.objects.values_list("kind", flat=True)) == [EnforcementKind.IDLE_WARN]
    assert calls(cancel_log) == []
    enforcement.enforce_all(T0 + timedelta(minutes=20))  # still only warned, and only once
    assert PolicyAction.objects.count() == 1
    enforcement.enforce_all(T0 + timedelta(minutes=40))  # 40 idle minutes: cancel
    enforcement.enforce_all(T0 + timedelta(minutes=41))
    assert calls(cancel_log) == [["air", "cancel", "idle-1"]]
    assert sorted(PolicyAction.objects.filter(run=live).values_list("kind", flat=True)) == [
        EnforcementKind.IDLE_CANCEL, EnforcementKind.IDLE_WARN
    ]  # fmt: skip
    assert not PolicyAction.objects.filter(run=busy).exists()
    assert RunEvent.objects.filter(run=live, kind=RunEventKind.NOTE).count() == 1


def test_idle_streak_broken_by_a_busy_minute(world) -> None:
    live = running(world, "idle-1")
    idle_minutes(live, T0, 20, 1.0)
    GpuMinute.objects.filter(run=live, minute=T0 + timedelta(minutes=15), gpu_index=1).update(utilization_gpu_max=80)
    latest, streak = enforcement.idle_streaks([live.pk], 5, T0)[live.pk]
    assert latest == T0 + timedelta(minutes=19) and streak == 4


def test_beat_entry_and_task_options(settings) -> None:
    from billing.tasks import enforce_policies

    assert BEAT_SCHEDULE["enforce-policies"]["task"] == "billing.enforce_policies" == enforce_policies.name
    assert enforce_policies.max_retries <= 5
    assert settings.CELERY_TASK_ROUTES["billing.*"] == {"queue": "billing"}
