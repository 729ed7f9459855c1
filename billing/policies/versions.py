"""A policy's history as people read it: each setting by its label, each value formatted.

A version stores its snapshot and diff as JSON (`billing.policies.budget.snapshot`): field
names, money as a string, teams and thresholds as lists. The history page and the rollback
confirmation show them through `readable`: "Budget (USD)" for `budget_usd`, "$1,500.00" for
"1500.00", "vision, nlp" for ["nlp", "vision"], "every team" for [], "no limit" for None.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import Group
from django.db.models import Field
from django.utils.text import capfirst

from billing.choices import BudgetPeriod, SpentAction
from billing.models import PolicyVersion, UsagePolicy
from billing.policies.budget import VERSIONED, diff, snapshot
from billing.prices.money import format_usd
from runs.choices import AcceleratorType

# What a setting's empty value (None, "" or []) means, where it means more than "none".
EMPTY = {
    "teams": "every team",
    "budget_usd": "no budget",
    "allowed_accelerator_types": "any type",
    "allowed_regions": "any region",
    "max_num_accelerators": "no limit",
    "max_timeout_minutes": "no limit",
    "max_retries": "no limit",
    "idle_gpu_percent": "no idle-GPU rule",
    "idle_warn_minutes": "never",
    "idle_cancel_minutes": "never",
}
MINUTES = {"max_timeout_minutes", "idle_warn_minutes", "idle_cancel_minutes"}
PERCENTS = {"alert_thresholds", "forecast_thresholds"}
CHOICES = {"period": BudgetPeriod, "action": SpentAction, "allowed_accelerator_types": AcceleratorType}


def setting_label(name: str) -> str:
    """A policy setting as the form and the admin name it: its model field's verbose name."""
    field = UsagePolicy._meta.get_field(name)
    assert isinstance(field, Field)  # a setting is a column of the policy, not a relation's reverse side
    return str(capfirst(field.verbose_name))


def _choice(name: str, value: Any) -> str:
    labels = dict(CHOICES[name].choices)
    return str(labels.get(value, value))


def _one(name: str, value: Any) -> str:
    if name in CHOICES:
        return _choice(name, value)
    if name in PERCENTS:
        return f"{value}%"
    return str(value)


def display(name: str, value: Any) -> str:
    """One setting's value as a sentence fragment ("$1,500.00", "50%, 80%", "30 minutes")."""
    if value is None or value == "" or value == []:
        return EMPTY.get(name, "none")
    if isinstance(value, list):
        return ", ".join(_one(name, v) for v in value)
    if name == "budget_usd":
        try:
            return format_usd(Decimal(str(value)))
        except InvalidOperation:
            return str(value)
    if name == "allow_cross_region":
        return "allowed" if value else "forbidden"
    if name == "idle_gpu_percent":
        return f"{value:g}%" if isinstance(value, int | float) else f"{value}%"
    if name in MINUTES:
        return f"{value} minute{'' if value == 1 else 's'}"
    return _one(name, value)


@dataclass(frozen=True)
class Change:
    """One setting that differs: its label, what it was ('' in a policy's first version) and what it became."""

    field: str
    label: str
    old: str
    new: str


def readable(changes: list[dict[str, Any]], first: bool = False) -> list[Change]:
    """A stored diff ([{field, old, new}]) as Changes; `first`: the policy's first version (no 'was')."""
    out = []
    for change in changes:
        name = change.get("field", "")
        label = setting_label(name) if name in VERSIONED else str(name)
        old = "" if first else display(name, change.get("old"))
        out.append(Change(name, label, old, display(name, change.get("new"))))
    return out


@dataclass(frozen=True)
class VersionView:
    """A version as the history page lists it."""

    version: PolicyVersion
    changes: list[Change]


def history(policy: UsagePolicy) -> list[VersionView]:
    """The policy's versions, newest first, each with its readable diff."""
    versions = policy.versions.select_related("user").order_by("-number")
    return [VersionView(v, readable(v.diff, first=v.number == 1)) for v in versions]


def rollback_changes(policy: UsagePolicy, version: PolicyVersion) -> list[Change]:
    """What rolling back to `version` would change, as `billing.policies.budget.rollback` restores it:
    the version's settings over the current ones, its teams as listed that still exist (none: every team)."""
    current = snapshot(policy)
    teams = sorted(Group.objects.filter(name__in=version.snapshot.get("teams", [])).values_list("name", flat=True))
    return readable(diff(current, {**current, **version.snapshot, "teams": teams}))
