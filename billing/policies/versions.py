"""A policy's versions: stored on every save (`record_version`), restored (`rollback`), and read.

A version stores its snapshot and diff as JSON (`snapshot`, `diff`): field
names, money as a string, teams and thresholds as lists. The history page and the rollback
confirmation show them through `readable`: "Budget (USD)" for `budget_usd`, "$1,500.00" for
"1500.00", "vision, nlp" for ["nlp", "vision"], "every team" for [], "no limit" for None.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Field
from django.utils import timezone
from django.utils.text import capfirst

from billing.choices import BudgetPeriod, SpentAction
from billing.models import PolicyVersion, UsagePolicy
from billing.prices.money import CENT, format_usd
from runs.choices import AcceleratorType

# Fields of a policy kept in a version snapshot, in the order the diff lists them.
VERSIONED = (
    "name", "description", "teams", "budget_usd", "period", "period_start_day", "alert_thresholds",
    "forecast_thresholds", "action", "allowed_accelerator_types", "max_num_accelerators",
    "max_timeout_minutes", "max_retries", "allowed_regions", "allow_cross_region", "idle_gpu_percent",
    "idle_warn_minutes", "idle_cancel_minutes",
)  # fmt: skip

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
    """What rolling back to `version` would change, as `rollback` restores it:
    the version's settings over the current ones, its teams as listed that still exist (none: every team)."""
    current = snapshot(policy)
    teams = sorted(Group.objects.filter(name__in=version.snapshot.get("teams", [])).values_list("name", flat=True))
    return readable(diff(current, {**current, **version.snapshot, "teams": teams}))


# --- Storing versions ----------------------------------------------------------------------


def snapshot(policy: UsagePolicy) -> dict[str, Any]:
    """The versioned fields of a saved policy as JSON-safe values (teams by name, sorted)."""
    out: dict[str, Any] = {}
    for name in VERSIONED:
        if name == "teams":
            out[name] = sorted(policy.teams.values_list("name", flat=True))
            continue
        value = getattr(policy, name)
        # Quantized so 1000 typed in a form and 1000.00 read back are one and the same version.
        out[name] = str(Decimal(value).quantize(CENT)) if isinstance(value, Decimal) else value
    return out


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[dict[str, Any]]:
    """[{field, old, new}] for every versioned field that differs (all of them when `old` is None)."""
    old = old or {}
    return [{"field": f, "old": old.get(f), "new": new.get(f)} for f in VERSIONED if old.get(f) != new.get(f)]


def record_version(policy: UsagePolicy, user: User | None, note: str = "") -> PolicyVersion | None:
    """Store the policy's state as its next version; None when nothing changed since the last."""
    with transaction.atomic():
        # Lock the policy row so two saves number their versions one after the other.
        UsagePolicy.objects.select_for_update().filter(pk=policy.pk).first()
        last = policy.versions.order_by("-number").first()
        state = snapshot(policy)
        changes = diff(last.snapshot if last else None, state)
        if last is not None and not changes:
            return None
        return PolicyVersion.objects.create(
            policy=policy, number=(last.number + 1) if last else 1, snapshot=state, diff=changes,
            user=user, at=timezone.now(), note=note,
        )  # fmt: skip


def rollback(policy: UsagePolicy, version: PolicyVersion, user: User | None) -> PolicyVersion | None:
    """Restore `version`'s snapshot onto the policy and record that as a new version."""
    state = version.snapshot
    with transaction.atomic():
        for name in VERSIONED:
            if name == "teams" or name not in state:
                continue
            value = state[name]
            setattr(policy, name, Decimal(value) if name == "budget_usd" and value is not None else value)
        policy.save()
        policy.teams.set(Group.objects.filter(name__in=state.get("teams", [])))
        return record_version(policy, user, note=f"rolled back to version {version.number}")
