"""Admission of a workload file: parsed here, judged by its team's usage policy (billing).

Billing never reads workload files: it judges a parsed `Workload` (`billing.policies.admission.admit`).
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import Group

from billing.engine import Decision, Violation, admit
from runs.workload.schema import WorkloadError, parse_workload


def admit_yaml(text: str, team: Group, *, region: str | None = None, now: datetime | None = None) -> Decision:
    """`admit` for workload YAML text; an invalid workload is denied with its problems."""
    try:
        workload = parse_workload(text)
    except WorkloadError as exc:
        violations = [Violation("workload", f"Fix the workload file: {p}.") for p in exc.problems]
        return Decision(violations=violations, region=region or "")
    return admit(workload, team, region=region, now=now)
