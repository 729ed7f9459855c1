"""The failed run's page, built: the log around the evidence, the telemetry and metric panels on
one time axis, the cost of the failed attempts and similar failures (`failure_detail_context`).

The view scopes the run and renders; everything the page shows is read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q
from django.utils import timezone

from dashboard.kit import access
from runs.failures import charts, logtime
from runs.failures import stats as failure_stats
from runs.failures.classify_pass import FAILED_STATUSES, is_error_line
from runs.logs import MAX_LINE_CHARS, chunk_texts, display_text, iter_lines
from runs.models import FailureAnalysis, Node, Run
from runs.telemetry import charts as telemetry_charts

# Lines of log shown either side of the evidence on the failure page.
CONTEXT_RADIUS = 30
# Minutes of telemetry shown before the failure.
TELEMETRY_WINDOW = timedelta(minutes=30)
SIMILAR_FAILURES = 10


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


def evidence_log(run: Run, analysis: FailureAnalysis | None) -> tuple[Node | None, list[ContextLine]]:
    """The node whose log holds the verdict's evidence line, and the lines around it."""
    if not (analysis and analysis.line and analysis.attempt_number is not None and analysis.node_index is not None):
        return None, []
    node = Node.objects.filter(
        attempt__run=run, attempt__number=analysis.attempt_number, index=analysis.node_index
    ).first()
    return node, log_context(node, analysis.line) if node is not None else []


def similar_failures(run: Run, analysis: FailureAnalysis | None, user: User | AnonymousUser) -> list[FailureAnalysis]:
    """The newest verdicts of the same class on the run's team or experiment, among the user's teams."""
    if not analysis or analysis.class_id == "none":
        return []
    # Scoped on the joined run's team: `run__in=Run.objects.for_user(...)` hashed every
    # visible run first (190 ms at 100,000 runs).
    near = Q(run__team=run.team)
    if run.experiment_name:
        near |= Q(run__experiment_name=run.experiment_name)
    same = FailureAnalysis.objects.filter(access.team_q(user, "run__team"), near)
    same = same.filter(class_id=analysis.class_id).exclude(run=run)
    return list(same.select_related("run__team").order_by("-failed_at")[:SIMILAR_FAILURES])


def failure_detail_context(run: Run, user: User | AnonymousUser) -> dict[str, Any]:
    """Everything the failed run's page shows: root cause, timeline, log around the evidence,
    the last minutes of telemetry and metrics, the failed attempts' cost, similar failures."""
    analysis = FailureAnalysis.objects.filter(run=run).first()
    attempts = list(run.attempts.prefetch_related("nodes").order_by("number"))
    now = timezone.now()
    failed_at = (analysis.failed_at if analysis else None) or run.ended_at
    evidence_node, context_lines = evidence_log(run, analysis)
    # Each shown line with the time it states, for the log's gutter and the charts' marker.
    timed_lines = [(line, logtime.line_time(line.text)) for line in context_lines]
    evidence_at = next((at for line, at in timed_lines if line.is_evidence), None)
    figures: dict[str, dict | None] = {}
    metric_panels: list[dict[str, Any]] = []
    metrics_left_out = 0
    if failed_at is not None:
        start, end = failed_at - TELEMETRY_WINDOW, failed_at + timedelta(minutes=1)
        marks: list[tuple[datetime, str]] = [(failed_at, "failure")]
        if evidence_at is not None and start <= evidence_at <= end and evidence_at != failed_at:
            marks.append((evidence_at, f"log line {analysis.line}"))  # type: ignore[union-attr]
        figures, metric_panels, metrics_left_out = charts.failure_panels(run, start, end, marks)
    failed_cost = failure_stats.failed_attempts_cost([run.pk], now=now).get(run.pk)
    return {
        "run": run,
        "analysis": analysis,
        "attempts": attempts,
        "failed_attempts": [a for a in attempts if a.status in FAILED_STATUSES],
        "timeline": telemetry_charts.timeline_figure(attempts, now=now),
        "context_lines": context_lines,
        "timed_lines": timed_lines,
        "evidence_node": evidence_node,
        "failed_at": failed_at,
        "window_minutes": int(TELEMETRY_WINDOW.total_seconds() // 60),
        "utilization": figures.get("utilization_gpu"),
        "memory": figures.get("memory_used_bytes"),
        "power": figures.get("power_watts"),
        "metric_panels": metric_panels,
        "metrics_left_out": metrics_left_out,
        "evidence_at": evidence_at,
        "failed_cost": failed_cost,
        "similar": similar_failures(run, analysis, user),
        "postmortems": run.postmortems.select_related("owner").order_by("-created_at"),
    }
