"""The run page, its log viewer and log download, and its cancel button.

Every view scopes to `Run.objects.for_user(user)` first: another team's run is a 404, not a
403, so the page does not even confirm that the run exists.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, User
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.text import slugify
from django.views.decorators.http import require_POST

from billing.engine import run_cost
from runs import cancel, compare, glance
from runs.choices import CancelOutcome
from runs.forms import MAX_QUERY_LENGTH
from runs.logs import INLINE_LINE_LIMIT, build_log_view, chunk_texts, grep_lines
from runs.models import Attempt, Node, Run
from runs.telemetry import charts, envelope, life
from runs.views.telemetry import MAX_NODE_INDEX, TELEMETRY_VIEWS

SWEEP_SIBLINGS = 50


def sweep_of(run: Run, user: User | AnonymousUser) -> dict | None:
    """The sweep a run is an iteration of: its id, name and the sibling iterations the user sees."""
    parameters = run.parameters if isinstance(run.parameters, dict) else {}
    sweep_id = str(parameters.get("sweep_run_id") or "")
    if not sweep_id:
        return None
    siblings = (
        Run.objects.for_user(user)
        .filter(source=run.source, parameters__sweep_run_id=sweep_id)
        .exclude(pk=run.pk)
        .order_by("submitted_at", "external_id")
    )
    return {
        "run_id": sweep_id,
        "name": parameters.get("sweep_name") or "",
        "iteration": parameters.get("sweep_iteration") or "",
        "total": parameters.get("sweep_iterations"),
        "siblings": list(siblings[:SWEEP_SIBLINGS]),
        "more": max(siblings.count() - SWEEP_SIBLINGS, 0),
    }


# GPU tasks of one job a run page lists at most.
JOB_TASKS = 50


def job_of(run: Run, user: User | AnonymousUser) -> dict | None:
    """The job a GPU task's run belongs to (`jobs_records.split_gpu_tasks`): a row per GPU task.

    Each row is a task of the job the user sees, this run's included (marked): its task key,
    accelerators, window, status and experiment; `gpus` is their sum, the GPUs the job holds
    when its tasks run at once.
    """
    parameters = run.parameters if isinstance(run.parameters, dict) else {}
    job_id = str(parameters.get("job_run_id") or "")
    if not job_id:
        return None
    tasks = list(
        Run.objects.for_user(user)
        .filter(source=run.source, parameters__job_run_id=job_id)
        .order_by("started_at", "external_id")[:JOB_TASKS]
    )
    return {
        "run_id": job_id,
        "task_key": parameters.get("job_task_key") or "",
        "tasks": tasks,
        "gpus": sum(task.num_accelerators for task in tasks),
    }


def _selected_node(attempts: list[Attempt], attempt_number: str | None, node_index: str | None) -> Node | None:
    """The node the log viewer shows: the requested one, else the first node of the latest attempt."""
    by_number = {str(a.number): a for a in attempts}
    attempt = by_number.get(attempt_number or "") or (attempts[-1] if attempts else None)
    if attempt is None:
        return None
    nodes = list(attempt.nodes.all())
    by_index = {str(n.index): n for n in nodes}
    return by_index.get(node_index or "") or (nodes[0] if nodes else None)


def _gpu_node(value: str | None, indexes: list[int]) -> tuple[int | None, str]:
    """The node index ?gpu_node= picks for the GPU panels, and why it was ignored ("" when it was not).

    Absent or "all": every node. Anything that is not one of the run's node indexes falls back
    to every node, and the page says so beside the selector.
    """
    if value in (None, "", "all"):
        return None, ""
    number = compare.small_number(value, MAX_NODE_INDEX)
    if number is not None and number in indexes:
        return number, ""
    return None, f"This run has no node {value[:20]!r}: showing all nodes."


# The run page's GPU panels, in order: (field, the chart's element id, what it shows).
PANEL_IDS = {"utilization_gpu": "fig-utilization", "memory_used_bytes": "fig-memory"}


def gpu_panels(signals: frozenset[str]) -> list[tuple[str, str, str]]:
    """(field, element id, label) of each GPU panel the run has a signal for, utilization and memory first."""
    out = []
    for field in ("utilization_gpu", "memory_used_bytes", *charts.PANEL_FIELDS):
        if field in signals:
            out.append((field, PANEL_IDS.get(field, f"fig-{field}"), envelope.UNITS[field][0]))
    return out


@login_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.for_user(request.user).select_related("team", "user"), pk=pk)
    attempts = list(run.attempts.prefetch_related("nodes").order_by("number"))
    now = timezone.now()
    node = _selected_node(attempts, request.GET.get("attempt"), request.GET.get("node"))
    query = request.GET.get("q", "")[:MAX_QUERY_LENGTH]
    picked = request.GET.get("range", "all")
    picked = picked if picked in glance.RANGES else "all"
    node_indexes = sorted({n.index for a in attempts for n in a.nodes.all()})
    gpu_node, node_error = _gpu_node(request.GET.get("gpu_node"), node_indexes)
    x_axis = "time" if request.GET.get("x") == "time" else "step"
    view = request.GET.get("view") if request.GET.get("view") in TELEMETRY_VIEWS else "envelope"
    # The frame only: which panels the run has; charts.js asks telemetry.json for each panel's
    # data as it comes into view, at the panel's width. One aggregate over the run's rollups
    # answers the panels, the coverage line and the node-skew table (`life.life`).
    node_ids = None if gpu_node is None else [n.pk for a in attempts for n in a.nodes.all() if n.index == gpu_node]
    found = life.life(run)
    signals = charts.signals_present(run, node_ids, found)
    telemetry = charts.RunPanels(None, None, [], signals)

    ctx = {
        "run": run,
        "attempts": attempts,
        "cost": run_cost(run, now=now),
        # The log viewer is not in the frame: logs.js asks runs/<pk>/log/view/ for it once the
        # charts above the fold are drawn (a 5,000-line log is ~500 KB of HTML).
        "log_node": node,
        "log_attempt": next((a for a in attempts if node and a.pk == node.attempt_id), None),
        "log_query": query,
        "timeline": charts.timeline_figure(attempts, now=now),
        "coverage": glance.coverage(run, now=now, found=found),
        "range": picked,
        "ranges": ["15m", "1h", "6h", "24h", "all"],
        "node_skew": glance.node_skew(run, found),
        "node_indexes": node_indexes,
        "gpu_node": gpu_node,
        "node_error": node_error,
        "signals": telemetry,
        "gpu_panels": gpu_panels(signals),
        "view": view,
        "x_axis": x_axis,
        # The compare page's figure for one run: the same switch, by step or by UTC time.
        "metrics": compare.metrics_overlay([run], "utc" if x_axis == "time" else "step"),
        "parameters": sorted(run.parameters.items()) if isinstance(run.parameters, dict) else [],
        "sweep": sweep_of(run, request.user),
        "job": job_of(run, request.user),
    }
    return render(request, "runs/run_detail.html", ctx)


# Line numbers a log window may start at (?start=, ?before=, ?line=): beyond any real log.
MAX_LINE_NUMBER = 10**12
# The log viewer's window parameters, in the order they win when several are given.
LOG_WINDOW_KEYS = ("line", "start", "before")


@login_required
def run_log_view(request: HttpRequest, pk: int) -> HttpResponse:
    """The run page's log viewer alone (?attempt=&node=&q= as the page reads them): logs.js swaps it in.

    Switching a node's log reads that log only, not the page's charts, costs and figures again.
    It shows a window of INLINE_LINE_LIMIT lines: the tail by default, ?start=N from line N,
    ?before=N the lines before N (the viewer's "earlier lines"), ?line=N the window around line N
    (a #LN link); a value that is not a line number is a 400 naming it.
    """
    run = get_object_or_404(Run.objects.for_user(request.user), pk=pk)
    window: dict[str, int] = {}
    for key in LOG_WINDOW_KEYS:
        value = request.GET.get(key, "")
        if not value:
            continue
        number = compare.small_number(value, MAX_LINE_NUMBER)
        if not number:
            message = f"{key} must be a line number from 1 to {MAX_LINE_NUMBER}."
            return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
        window[key] = number
    start, before = window.get("start"), window.get("before")
    if "line" in window:
        start, before = max(1, window["line"] - INLINE_LINE_LIMIT // 2), None
    elif start is not None:
        before = None
    attempts = list(run.attempts.prefetch_related("nodes").order_by("number"))
    node = _selected_node(attempts, request.GET.get("attempt"), request.GET.get("node"))
    query = request.GET.get("q", "")[:MAX_QUERY_LENGTH]
    log = None
    if node:
        log = build_log_view(chunk_texts(node), query, limit=INLINE_LINE_LIMIT, start=start, before=before)
    ctx = {
        "run": run,
        "attempts": attempts,
        "log_node": node,
        "log_attempt": next((a for a in attempts if node and a.pk == node.attempt_id), None),
        "log": log,
        "log_query": query,
    }
    response = render(request, "runs/_log_section.html", ctx)
    response["Cache-Control"] = "private, no-cache"  # a running node's log grows
    return response


@login_required
def run_log(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """One node's log as text/plain: whole, or `grep -n` style with ?q=; ?download=1 attaches it.

    Streams chunk by chunk, so a multi-gigabyte log never sits in memory.
    """
    run = get_object_or_404(Run.objects.for_user(request.user), pk=pk)
    attempts = list(run.attempts.prefetch_related("nodes").order_by("number"))
    wanted_attempt, wanted_node = request.GET.get("attempt"), request.GET.get("node")
    node = _selected_node(attempts, wanted_attempt, wanted_node)
    if node is None:
        raise Http404("This run has no nodes, so no logs.")
    attempt_number = next(a.number for a in attempts if a.pk == node.attempt_id)
    # The page falls back to a default node; a script asking for a file by name must not get
    # another node's log under that name.
    if (wanted_attempt and wanted_attempt != str(attempt_number)) or (wanted_node and wanted_node != str(node.index)):
        raise Http404("No such attempt or node in this run.")
    query = request.GET.get("q", "")[:MAX_QUERY_LENGTH].strip()
    body = grep_lines(chunk_texts(node), query) if query else chunk_texts(node)
    response = StreamingHttpResponse(body, content_type="text/plain; charset=utf-8")
    if request.GET.get("download"):
        name = slugify(run.external_id) or f"run-{run.pk}"
        suffix = "-matches" if query else ""
        filename = f"{name}-attempt{attempt_number}-node{node.index}{suffix}.log"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    # Logs of a finished node do not change, but a running one grows: never serve a stale copy.
    response["Cache-Control"] = "private, no-cache"
    return response


@require_POST
@login_required
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Ask the run to stop through the one cancel path (runs/cancel.py), as enforcement does.

    Claimed once, so a double click or two team members at once record one request, and a run
    that finished meanwhile is left alone.
    """
    run = get_object_or_404(Run.objects.for_user(request.user), pk=pk)
    user = request.user.get_username()
    done = cancel.request_cancel(run, reason=f"cancel requested by {user}", now=timezone.now(), details={"user": user})
    if done.requested:
        if done.outcome == CancelOutcome.FAILED:
            messages.error(request, f"Cancel requested, but the cancel {done.method} failed; see the run's events.")
        elif done.outcome == CancelOutcome.SKIPPED:
            messages.warning(request, "Cancel requested, but no cancel method is configured for this source "
                                      "(AIRBOARD_CANCEL_COMMAND or AIRBOARD_CANCEL_WEBHOOK_URL).")  # fmt: skip
        elif done.method == cancel.LOCAL_FLAG:
            messages.success(request, "Cancel requested: the launcher stops the run within a few seconds.")
        else:
            messages.success(request, f"Cancel requested: the source was asked to stop the run ({done.method}).")
    else:
        run.refresh_from_db(fields=["status", "cancel_requested_at"])
        if run.is_active:
            messages.info(request, "A cancel was already requested for this run.")
        else:
            messages.info(request, f"The run is already {run.get_status_display().lower()}; nothing to cancel.")
    return redirect("run_detail", pk=run.pk)
