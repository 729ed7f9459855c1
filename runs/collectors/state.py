"""Collector health: every pass records its time, item count and error in CollectorState."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from django.db import DataError, transaction
from django.db.models import F
from django.utils import timezone

from dashboard.kit.redaction import redact
from runs.models import CollectorState

logger = logging.getLogger(__name__)


# What a bad item of a pass raises: its data, not the pass's machinery. A skipped item is counted
# and named, and the pass goes on; anything else (a database gone, a source unreachable) still
# fails the pass, so a transient outage never advances a cursor past items it did not store.
ITEM_ERRORS = (ValueError, TypeError, LookupError, ArithmeticError, DataError)
# Skipped items named on the collectors page (staff only) per pass; the count has them all.
NAMED_SKIPS = 5


@dataclass
class CollectResult:
    """What one pass ingested: a count for the health page, lines for the operator, items skipped."""

    items: int = 0
    lines: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)

    def skip(self, what: str, why: str) -> None:
        """One item the pass could not take (an unreadable file, an odd tag, an absurd value)."""
        entry = redact(f"{what}: {why}")[:300]
        self.skipped.append(entry)
        self.say(f"skipped {entry}")


@contextmanager
def isolated(result: CollectResult, what: str, *, savepoint: bool = True) -> Iterator[None]:
    """Run one item of a pass in its own savepoint; a data error skips it (see ITEM_ERRORS).

    The savepoint matters on PostgreSQL: a failed statement inside the pass's transaction would
    otherwise abort every statement after it, the other teams' items included. `savepoint=False`
    for an item whose writes commit as they go (a log file's chunks: one transaction around a
    64 MB file would hold SQLite's write lock for the whole file).
    """
    try:
        with transaction.atomic() if savepoint else nullcontext():
            yield
    except ITEM_ERRORS as exc:
        result.skip(what, f"{type(exc).__name__}: {exc}")


def record_skips(state: CollectorState, result: CollectResult) -> None:
    """Add the pass's skipped items to the collector's refusals: counted for all, named for staff."""
    if not result.skipped:
        return
    named = "; ".join(result.skipped[:NAMED_SKIPS])
    more = f"; and {len(result.skipped) - NAMED_SKIPS} more" if len(result.skipped) > NAMED_SKIPS else ""
    CollectorState.objects.filter(pk=state.pk).update(
        refused_total=F("refused_total") + len(result.skipped),
        last_refusal=f"{len(result.skipped)} skipped: {named}{more}"[:500],
        last_refusal_at=timezone.now(),
    )


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
        record_skips(state, result)
        CollectorState.objects.filter(pk=state.pk).update(
            # Through the one redactor: a CLI's error may quote a URL with a password, a token flag
            # or a header; what is stored is what the collectors page may show.
            last_error=redact(f"{type(exc).__name__}: {exc}")[:5000],
            last_error_at=timezone.now(),
        )
        raise
    record_skips(state, result)
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
