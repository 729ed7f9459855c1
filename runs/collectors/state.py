"""Collector health: every pass records its time, item count and error in CollectorState."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db.models import F
from django.utils import timezone

from dashboard.redaction import redact
from runs.models import CollectorState

logger = logging.getLogger(__name__)


@dataclass
class CollectResult:
    """What one pass ingested: a count for the health page and lines for the operator."""

    items: int = 0
    lines: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)


def state_for(name: str, kind: str, expected_interval_seconds: int = 300) -> CollectorState:
    state, _ = CollectorState.objects.get_or_create(
        name=name, defaults={"kind": kind, "expected_interval_seconds": expected_interval_seconds}
    )
    return state


@contextmanager
def track(name: str, kind: str, expected_interval_seconds: int = 300) -> Iterator[tuple[CollectorState, CollectResult]]:
    """Run one collector pass; record success with its item count, or the error, then re-raise it."""
    state = state_for(name, kind, expected_interval_seconds)
    result = CollectResult()
    now = timezone.now()
    CollectorState.objects.filter(pk=state.pk).update(last_run_at=now)
    try:
        yield state, result
    except Exception as exc:
        CollectorState.objects.filter(pk=state.pk).update(
            # Through the one redactor: a CLI's error may quote a URL with a password, a token flag
            # or a header; what is stored is what the collectors page may show.
            last_error=redact(f"{type(exc).__name__}: {exc}")[:5000],
            last_error_at=timezone.now(),
        )
        raise
    CollectorState.objects.filter(pk=state.pk).update(
        last_success_at=timezone.now(), items_last_run=result.items, items_total=F("items_total") + result.items
    )


def save_cursor(state: CollectorState, cursor: dict) -> None:
    """Persist where the next pass starts (only after the items before it are stored)."""
    CollectorState.objects.filter(pk=state.pk).update(cursor=cursor)
    state.cursor = cursor


def count_refusals(state: CollectorState, count: int, why: str) -> None:
    """Add `count` to a collector's refusals on the collectors page, with the latest reason."""
    if count <= 0:
        return
    CollectorState.objects.filter(pk=state.pk).update(
        refused_total=F("refused_total") + count,
        last_refusal=redact(f"{count} refused: {why}")[:500],
        last_refusal_at=timezone.now(),
    )
