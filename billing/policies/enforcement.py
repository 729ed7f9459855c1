"""Policy enforcement: the `billing.enforce_policies` pass, cancels and the idle-GPU rule.

Each pass evaluates every policy, fires the alerts it crossed (billing.policies.alerts), cancels the
running runs of a spent policy whose action says so, and applies the idle-GPU rule. What it
does to a run is a `PolicyAction`, claimed by inserting (run, kind) under a unique constraint:
a second worker's insert conflicts and it does nothing, so a run is cancelled (or warned) at
most once whatever the number of workers.

How a run is cancelled is runs/cancel.py's to say (the one cancel path, the run page's button
uses it too): a flag the launcher polls, else AIRBOARD_CANCEL_COMMAND, else the cancel webhook,
else nothing, recorded as skipped; the channels are told either way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from billing.choices import EnforcementKind, EnforcementOutcome, SpentAction
from billing.models import PolicyAction, UsagePolicy
from billing.policies import alerts, budget, pushed
from billing.prices.money import format_usd
from runs import cancel
from runs.choices import RunEventKind
from runs.models import GpuMinute, Run, RunEvent

logger = logging.getLogger(__name__)
# Telemetry older than this at the time of a pass says nothing about the GPUs now.
IDLE_DATA_STALE = timedelta(minutes=5)


@dataclass
class PassResult:
    """What one enforcement pass did."""

    policies: int = 0
    alerts: int = 0
    actions: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def enforce_all(now: datetime | None = None) -> PassResult:
    """Evaluate every policy; one failing policy is logged and the others still run."""
    now = now or timezone.now()
    result = PassResult()
    for policy in UsagePolicy.objects.prefetch_related("teams", "channels"):
        result.policies += 1
        try:
            fired, actions = enforce_policy(policy, now)
        except Exception as exc:
            logger.exception("enforcing policy %s failed", policy.name)
            result.errors.append(f"{policy.name}: {type(exc).__name__}")
            continue
        result.alerts += fired
        result.actions += [a.pk for a in actions]
    return result


def enforce_policy(policy: UsagePolicy, now: datetime) -> tuple[int, list[PolicyAction]]:
    """One policy's pass.

    1. Evaluate spend and forecast; fire the alerts crossed (each exactly once).
    2. A spent budget with action CANCEL: cancel each running run under the policy.
    3. The idle-GPU rule, when the policy has one.
    """
    status = budget.evaluate(policy, now)
    fired = alerts.fire(status, now)
    actions: list[PolicyAction] = []
    if status.exhausted and policy.action == SpentAction.CANCEL:
        spent = format_usd(policy.budget_usd)
        reason = f"policy {policy.name} spent its {spent} budget for the period from {status.period_start}"
        running = budget.running_runs(policy, budget.covered_team_ids(policy))
        # Another team's pushed data, which no collector confirmed, never cancels a run (SECURITY.md).
        parts = pushed.pushed_spend(status) if running else None
        for run in running:
            assert parts is not None and policy.budget_usd is not None
            if parts.confirmed_for(run.team_id) < policy.budget_usd:
                logger.warning(
                    "policy %s: run %s not cancelled; without other teams' pushed data the policy spent %s of %s",
                    policy.name, run.pk, parts.confirmed_for(run.team_id), policy.budget_usd,
                )  # fmt: skip
                continue
            action = cancel_run(policy, run, EnforcementKind.BUDGET_CANCEL, reason, now)
            if action is not None:
                actions.append(action)
    if policy.idle_gpu_percent is not None:
        actions += apply_idle_rule(policy, now)
    return len(fired), actions


def claim(policy: UsagePolicy, run: Run, kind: str, now: datetime) -> PolicyAction | None:
    """Insert the (run, kind) action; None when it exists already (another pass acted)."""
    try:
        with transaction.atomic():
            return PolicyAction.objects.create(policy=policy, run=run, kind=kind, at=now)
    except IntegrityError:
        return None


def cancel_run(policy: UsagePolicy, run: Run, kind: str, reason: str, now: datetime) -> PolicyAction | None:
    """Cancel `run` once for `policy` through the one cancel path (runs/cancel.py), and record it."""
    action = claim(policy, run, kind, now)
    if action is None:
        return None
    done = cancel.request_cancel(run, reason=reason, now=now, details={"policy": policy.name, "action": kind})
    # The output is already cut to runs.cancel.OUTPUT_TAIL (and redacted) by the cancel path.
    action.method, action.outcome, action.output_tail = done.method, done.outcome, done.output
    action.save(update_fields=["method", "outcome", "output_tail"])
    message = done.describe(reason)
    alerts.notify(policy, alerts.Notice(f"[Airboard] {policy.name}: run {run.external_id} cancelled",
                                        f"Run {run.external_id} ({run.experiment_name}): {message}.",
                                        {"event": "run_cancel", "policy": policy.name, "run_id": run.external_id,
                                         "outcome": done.outcome, "text": message}))  # fmt: skip
    return action


def _event(run: Run, kind: str, message: str, action: PolicyAction, now: datetime) -> None:
    details = {"policy": action.policy.name, "action": action.kind, "outcome": action.outcome, "method": action.method}
    RunEvent.objects.create(run=run, ts=now, kind=kind, message=message, details=details)


# --- Idle-GPU rule ---------------------------------------------------------------------------


def idle_streaks(
    run_ids: list[int], threshold: float, since: datetime, until: datetime | None = None
) -> dict[int, tuple[datetime, int]]:
    """Per run: (latest minute with data, minutes in a row up to it with every GPU below `threshold`).

    One query: the busiest GPU's utilization_gpu_max per run and minute in [since, until). A gap
    in the minutes ends a streak (no data is no evidence of idleness).
    """
    minutes = GpuMinute.objects.filter(run_id__in=run_ids, minute__gte=since)
    if until is not None:
        minutes = minutes.filter(minute__lt=until)
    rows = minutes.values("run_id", "minute").annotate(busiest=Max("utilization_gpu_max")).order_by("run_id", "-minute")
    out: dict[int, tuple[datetime, int]] = {}
    previous: dict[int, datetime] = {}
    broken: set[int] = set()
    for row in rows:
        run_id, minute, busiest = row["run_id"], row["minute"], row["busiest"]
        if run_id not in out:
            out[run_id] = (minute, 0)
        if run_id in broken:
            continue
        gap = run_id in previous and previous[run_id] - minute != timedelta(minutes=1)
        if busiest is None or busiest >= threshold or gap:
            broken.add(run_id)
            continue
        out[run_id] = (out[run_id][0], out[run_id][1] + 1)
        previous[run_id] = minute
    return out


def apply_idle_rule(policy: UsagePolicy, now: datetime) -> list[PolicyAction]:
    """Warn (once) a run idle for idle_warn_minutes; cancel (once) one idle for idle_cancel_minutes."""
    warn, cancel = policy.idle_warn_minutes, policy.idle_cancel_minutes
    assert policy.idle_gpu_percent is not None  # the caller applies the rule only when it is set
    longest = max(m for m in (warn, cancel, 1) if m is not None)
    runs = {r.pk: r for r in budget.running_runs(policy, budget.covered_team_ids(policy))}
    if not runs:
        return []
    since = now - timedelta(minutes=longest) - IDLE_DATA_STALE
    out = []
    for run_id, (latest, streak) in idle_streaks(list(runs), policy.idle_gpu_percent, since, now).items():
        if now - latest > IDLE_DATA_STALE:
            continue
        run = runs[run_id]
        what = f"GPUs of run {run.external_id} below {policy.idle_gpu_percent:g}% for {streak} minutes"
        if cancel is not None and streak >= cancel:
            action = cancel_run(policy, run, EnforcementKind.IDLE_CANCEL, f"{what} (policy {policy.name})", now)
            if action is not None:
                out.append(action)
        elif warn is not None and streak >= warn:
            action = claim(policy, run, EnforcementKind.IDLE_WARN, now)
            if action is not None:
                limit = f"; it is cancelled at {cancel} minutes" if cancel is not None else ""
                message = f"{what} (policy {policy.name}){limit}"
                action.outcome = EnforcementOutcome.DONE
                action.save(update_fields=["outcome"])
                _event(run, RunEventKind.NOTE, message, action, now)
                alerts.notify(policy, alerts.Notice(f"[Airboard] {policy.name}: idle GPUs", message,
                                                    {"event": "idle_warning", "policy": policy.name,
                                                     "run_id": run.external_id, "text": message}))  # fmt: skip
                out.append(action)
    return out
