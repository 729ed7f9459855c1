"""Price history: every create or edit of a price, field by field, with who and when."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import models
from django.utils import timezone

from billing.models import PriceChange

# The fields of a price worth a history line (ids and timestamps of the row itself are not).
TRACKED = ("accelerator_type", "instance_type", "kind", "region", "source_region", "destination_region",
           "effective_from", "usd_per_hour", "usd_per_gb", "usd_per_gb_processing", "source")  # fmt: skip


def snapshot(obj: models.Model) -> dict[str, str]:
    """The tracked fields of a price as strings, for comparing before and after an edit."""
    out = {}
    for name in TRACKED:
        if hasattr(obj, name):
            value: Any = getattr(obj, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else str(value)
    return out


def record(
    obj: models.Model, before: dict[str, str] | None, user: User | None, note: str = "", at: datetime | None = None
) -> list[PriceChange]:
    """Write one PriceChange per tracked field that differs from `before` (all of them when new)."""
    return record_many([(obj, before)], user, note, at)


def record_many(
    changes: Iterable[tuple[models.Model, dict[str, str] | None]],
    user: User | None,
    note: str = "",
    at: datetime | None = None,
) -> list[PriceChange]:
    """`record` for many objects in one INSERT."""
    at = at or timezone.now()
    rows = []
    for obj, before in changes:
        after = snapshot(obj)
        for name, new in after.items():
            old = (before or {}).get(name, "")
            if before is None or old != new:
                rows.append(
                    PriceChange(
                        model=type(obj).__name__, object_id=obj.pk, field=name, old=old, new=new,
                        user=user, at=at, note=note,
                    )
                )  # fmt: skip
    return PriceChange.objects.bulk_create(rows)


@dataclass(frozen=True)
class PriceEdit:
    """The changes one save made to one price, as one readable row of the history pages."""

    at: datetime
    user: Any
    model: str
    object_id: int
    note: str
    created: bool  # every field went from blank to a value: the price was added
    fields: tuple[tuple[str, str, str], ...]  # (field, old, new)


def grouped(changes: Iterable[PriceChange]) -> list[PriceEdit]:
    """Consecutive field changes of one price by one save (same time, person and note) as one edit."""
    edits: list[PriceEdit] = []
    key = None
    fields: list[tuple[str, str, str]] = []
    first: PriceChange | None = None
    for change in [*changes, None]:
        this = None if change is None else (change.model, change.object_id, change.at, change.user_id, change.note)
        if this != key and first is not None:
            created = all(not old for _, old, _ in fields)
            edits.append(PriceEdit(first.at, first.user, first.model, first.object_id, first.note, created,
                                   tuple(fields)))  # fmt: skip
            fields = []
        if change is None:
            break
        if this != key:
            key, first = this, change
        fields.append((change.field, change.old, change.new))
    return edits
