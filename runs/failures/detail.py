"""The failed run's page, built: the log around the evidence, the telemetry and metric panels on
one time axis, the cost of the failed attempts and similar failures (`failure_detail_context`).

The view scopes the run and renders; everything the page shows is read here.
"""

from __future__ import annotations

from dataclasses import dataclass

from runs.failures.classify_pass import is_error_line
from runs.logs import MAX_LINE_CHARS, chunk_texts, display_text, iter_lines
from runs.models import Node

# Lines of log shown either side of the evidence on the failure page.
CONTEXT_RADIUS = 30


@dataclass(frozen=True)
class ContextLine:
    """A line of log around the evidence, as the failure page shows it."""

    number: int
    text: str
    is_error: bool
    is_evidence: bool


def log_context(node: Node, line: int, radius: int = CONTEXT_RADIUS) -> list[ContextLine]:
    """Lines `line - radius` .. `line + radius` of a node's log, error lines flagged."""
    first, last = max(line - radius, 1), line + radius
    shown = []
    for number, raw in enumerate(iter_lines(chunk_texts(node)), start=1):
        if number < first:
            continue
        if number > last:
            break
        text = display_text(raw)[:MAX_LINE_CHARS]
        shown.append(ContextLine(number, text, is_error_line(text), number == line))
    return shown
