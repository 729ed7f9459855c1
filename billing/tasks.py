"""Celery tasks of billing/: thin wrappers around the domain code."""

from __future__ import annotations

from datetime import date

from celery import shared_task
from django.db import IntegrityError, OperationalError

from billing.costs import egress, rollups
from billing.policies import enforcement
from billing.reconcile import usage_source


# Sent by name by runs.ingest_process after a metrics batch with network counters; routed to the billing
# queue. Idempotent: it recomputes whole days of the given runs' derived egress.
@shared_task(name="billing.derive_egress", acks_late=True, reject_on_worker_lost=True,
             autoretry_for=(OperationalError,), retry_backoff=5, max_retries=3)  # fmt: skip
def derive_egress(run_days: dict[str, list[str]]) -> int:
    """Re-derive the egress of runs (id -> ISO UTC days their new network counters touched)."""
    days = {int(run): {date.fromisoformat(day) for day in dates} for run, dates in run_days.items()}
    return egress.derive_for_runs(days.keys(), days=days)


# Routed to the billing queue by CELERY_TASK_ROUTES ("billing.*").
# Idempotent: a pass rebuilds whole days from the runs, so a pass re-run after a lost worker
# writes the same rows. The lease in RollupState keeps two passes from running at once, and
# the unique constraint on CostDaily refuses a double insert should a lease ever expire mid-pass.
@shared_task(
    name="billing.roll_up_costs",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError, IntegrityError),
    retry_backoff=10,
    max_retries=3,
    soft_time_limit=240,
    time_limit=300,
)
def roll_up_costs() -> dict[str, int | bool]:
    """Recompute the CostDaily days touched by runs changed since the last pass."""
    result = rollups.refresh_changed()
    return {"claimed": result.claimed, "runs": result.runs, "days": result.days, "rows": result.rows}


# Routed to the billing queue by CELERY_TASK_ROUTES ("billing.*"). Safe to run twice at once,
# or again after a lost worker: every alert and every run action is claimed in the database
# (BudgetAlert's conditional UPDATE, PolicyAction's unique (run, kind)), so a rerun sends and
# cancels nothing twice. Not acks_late:
# a redelivered pass would be harmless but the next beat (five minutes on) does the same work.
@shared_task(
    name="billing.enforce_policies",
    autoretry_for=(OperationalError,),
    retry_backoff=10,
    max_retries=3,
    soft_time_limit=240,
    time_limit=300,
)
def enforce_policies() -> dict[str, int]:
    """Evaluate every usage policy: fire budget alerts, cancel runs, apply the idle-GPU rule."""
    result = enforcement.enforce_all()
    return {"policies": result.policies, "alerts": result.alerts, "actions": len(result.actions)}


# Routed to the billing queue by CELERY_TASK_ROUTES ("billing.*"). Idempotent: usage records
# are unique by record_id and inserted with conflicts ignored, so a rerun adds nothing.
@shared_task(
    name="billing.import_billed_usage",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=30,
    max_retries=3,
    soft_time_limit=540,
    time_limit=600,
)
def import_billed_usage() -> dict[str, int | bool | list[str]]:
    """Import billed usage from the configured query; nothing to do when none is configured."""
    if not usage_source.configured():
        return {"configured": False}
    result = usage_source.import_configured()
    return {"configured": True, "added": result.added, "linked": result.linked,
            "errors": [str(e) for e in result.errors[:20]]}  # fmt: skip
