"""Price history: every create or edit of a price, field by field, with who and when."""

from __future__ import annotations

from collections.abc import Iterable
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
