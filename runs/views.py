"""Run pages: the filtered, sorted, paginated run list, the run page and its log endpoint.

Every view scopes to `Run.objects.for_user(user)` first: another team's run is a 404, not a
403, so the page does not even confirm that the run exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from itertools import islice

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, User
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.text import slugify
from django.views.decorators.http import require_POST

from billing.engine import run_cost
from dashboard.kit.csv_export import (
    STREAM_CHUNK_ROWS,
    SqlIntegerCell,
    copy_streaming_response,
    csv_response,
    csv_streaming_response,
    sql_cell,
)
from dashboard.kit.figures import escaped
from dashboard.kit.schemas import EARLIEST, LATEST
from runs import cancel, compare, glance
from runs.choices import CancelOutcome
from runs.forms import MAX_QUERY_LENGTH, RunFilterForm
from runs.logs import INLINE_LINE_LIMIT, build_log_view, chunk_texts, grep_lines
from runs.models import Attempt, Node, Run
from runs.telemetry import charts, envelope
from runs.telemetry import fleet as fleet_queries

# Sort keys the run list accepts (a leading "-" reverses), mapped to the ORM field. Anything
# else in ?sort= is ignored: no user-chosen column names reach order_by().
SORTS = {
    "submitted": "submitted_at",
    "started": "started_at",
    # Annotated in sort_runs; not "duration", which is Run's own property.
    "duration": "run_duration",
    "status": "status",
    "experiment": "experiment_name",
    "accelerator": "accelerator_type",
}
DEFAULT_SORT = "-submitted"


def _day_start(day: date) -> datetime:
    """Midnight at the start of `day` in the site's time zone, as an aware datetime."""
    return timezone.make_aware(datetime.combine(day, time.min))


def filter_runs(runs: QuerySet[Run], data: dict) -> QuerySet[Run]:
    """Apply the valid filters in `data` (a form's cleaned_data, possibly partial)."""
    if data.get("q"):
        q = data["q"]
        runs = runs.filter(
            Q(external_id__icontains=q)
            | Q(experiment_name__icontains=q)
            | Q(creator__icontains=q)
            | Q(mlflow_run_id__icontains=q)
        )
    if data.get("status"):
        runs = runs.filter(status=data["status"])
    if data.get("team"):
        runs = runs.filter(team=data["team"])
    if data.get("creator"):
        runs = runs.filter(Q(creator__icontains=data["creator"]) | Q(user__username__iexact=data["creator"]))
    if data.get("accelerator"):
        runs = runs.filter(accelerator_type=data["accelerator"])
    if data.get("region"):
        runs = runs.filter(region=data["region"])
    if data.get("experiment"):
        runs = runs.filter(experiment_name__icontains=data["experiment"])
    if data.get("submitted_from"):
        runs = runs.filter(submitted_at__gte=_day_start(data["submitted_from"]))
    if data.get("submitted_to"):
        # Inclusive of the whole end day.
        runs = runs.filter(submitted_at__lt=_day_start(data["submitted_to"] + timedelta(days=1)))
    if data.get("sweep"):
        runs = runs.filter(parameters__sweep_run_id=data["sweep"])
    return runs


# Sibling iterations a run page lists at most (the runs list, filtered by the sweep, has them all).
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


def sort_runs(runs: QuerySet[Run], sort: str) -> tuple[QuerySet[Run], str]:
    """Order by a whitelisted key; returns the queryset and the key actually applied."""
    key = sort.removeprefix("-")
    if key not in SORTS:
        sort, key = DEFAULT_SORT, DEFAULT_SORT.removeprefix("-")
    field = SORTS[key]
    if key == "duration":
        # Running runs count up to now, so a long-running job sorts among the long ones. "Now"
        # is the web process's clock, as for the durations the page prints, not the database's.
        now = Value(timezone.now(), output_field=DateTimeField())
        runs = runs.annotate(
            run_duration=ExpressionWrapper(Coalesce(F("ended_at"), now) - F("started_at"), output_field=DurationField())
        )
    # Nulls last where there can be any; a NOT NULL column (submitted_at) sorts without the
    # clause, so the default order is read from the run indexes (NULLS LAST does not match an
    # index built DESC, and sorting every run for a page of 50 cost 27 ms at 100,000).
    nulls = {"nulls_last": True} if key == "duration" or Run._meta.get_field(field).null else {}
    expression = F(field).desc(**nulls) if sort.startswith("-") else F(field).asc(**nulls)
    # pk breaks ties so that a page boundary never shows a run twice or skips one.
    return runs.order_by(expression, "-pk"), sort


# The run table's columns in order: (title, sort key or None when not sortable).
COLUMNS = [
    ("Run", None),
    ("Status", "status"),
    ("Experiment", "experiment"),
    ("Team", None),
    ("Creator", None),
    ("Accelerator", "accelerator"),
    ("Region", None),
    ("Submitted", "submitted"),
    ("Started", "started"),
    ("Duration", "duration"),
]
# At a glance (runs.glance) right after the status: what a person scans the table for.
COLUMNS[2:2] = [("GPU utilization (1 h)", None), ("Cost", None)]


def _columns(sort: str) -> list[dict[str, str | None]]:
    """Header cells: a click sorts ascending, a second click on the same column reverses."""
    columns = []
    for title, key in COLUMNS:
        direction = None
        if key and sort.removeprefix("-") == key:
            direction = "desc" if sort.startswith("-") else "asc"
        next_sort = None if key is None else (f"-{key}" if direction == "asc" else key)
        columns.append({"title": title, "key": key, "direction": direction, "next": next_sort})
    return columns


# The run list as CSV (?format=csv): every run the filters match, not one page of them; the
# table's glance columns (utilization, cost: glance.CSV_HEADER) after the run's own.
CSV_HEADER = [
    "external_id", "status", "team", "experiment_name", "creator", "accelerator_type", "num_accelerators",
    "region", "home_region", "submitted_at", "started_at", "ended_at", "duration_seconds", "mlflow_run_id",
    *glance.CSV_HEADER,
]  # fmt: skip


# What the CSV reads of each run (team by name): tuples, not 100,000 model instances.
CSV_FIELDS = (
    "external_id", "status", "team__name", "experiment_name", "creator", "accelerator_type", "num_accelerators",
    "region", "home_region", "submitted_at", "started_at", "ended_at", "mlflow_run_id",
)  # fmt: skip


def runs_csv(
    runs: QuerySet[Run], now: datetime, *, by_database: bool, in_index_order: bool = False
) -> StreamingHttpResponse:
    """The filtered, sorted runs as CSV; times in UTC ISO 8601, so a spreadsheet sorts them.

    A running run's duration counts up to `now`, the same instant for every row. The glance
    cells (utilization, last sample, cost: `glance.CsvCells`) are the table's numbers.
    `by_database` (PostgreSQL): COPY writes the cells from the `cell()` rules in SQL (`sql_cell`),
    the glance cells too for a run with no utilization this hour and a stored cost figure still
    the engine's (`CsvCells.sql`), the others' from `CsvCells` every STREAM_CHUNK_ROWS runs;
    else tuples are read in chunks and written by the one Python writer, the glance cells from
    `CsvCells` for each chunk. Both write the same bytes (tests/dashboard/kit/test_csv_copy.py).
    `in_index_order`: `runs` are the visible runs in the default order, filtered at most by date
    (`index_ordered`), which the COPY reads from run_submitted_id_idx in one process.
    """
    filename = f"runs-{now:%Y-%m-%d}.csv"

    added = glance.CsvCells(now)
    if by_database:
        replaced, glance_cells, tail = added.sql()
        cells = [SqlIntegerCell(F("pk")), *(sql_cell(runs, name) for name in CSV_FIELDS)]
        cells.insert(-1, SqlIntegerCell(Run.duration_seconds_sql(now)))
        first, *more = (runs.filter(q).order_by().values_list("pk", flat=True) for q in replaced)
        flagged = first.union(*more)
        return copy_streaming_response(
            filename, CSV_HEADER, runs.values_list(*cells, *glance_cells), in_index_order=in_index_order,
            added=(glance.CSV_HEADER, flagged, added, tail),
        )  # fmt: skip

    def rows() -> Iterator[list[object]]:
        found = runs.values_list("pk", *CSV_FIELDS).iterator(chunk_size=STREAM_CHUNK_ROWS)
        while chunk := list(islice(found, STREAM_CHUNK_ROWS)):
            glances = added([row[0] for row in chunk])
            for pk, *fields, started, ended, mlflow_run_id in chunk:
                duration = Run.duration_between(started, ended, now)
                seconds = "" if duration is None else int(duration.total_seconds())
                yield [
                    *fields,
                    started,
                    ended,
                    seconds,
                    mlflow_run_id,
                    *glances.get(pk, [None] * len(glance.CSV_HEADER)),
                ]

    return csv_streaming_response(filename, CSV_HEADER, rows())


# Filters that run_submitted_id_idx answers in its own order: a range of its leading column.
INDEX_FILTERS = frozenset({"submitted_from", "submitted_to"})


def index_ordered(sort: str, filters: dict) -> bool:
    """Whether the run list's download is best read in run_submitted_id_idx's order, in one process.

    The default order with no filter but the date range: every visible run, newest first. At
    100,000 runs that COPY took 240-280 ms where the parallel plan, which sorts the formatted rows,
    took 290-370. A filter on anything else leaves fewer rows to sort and a condition worth
    sharing out: a text search took 72 ms in parallel and 112 read in the index's order.
    """
    return sort == DEFAULT_SORT and {name for name, value in filters.items() if value} <= INDEX_FILTERS


@login_required
def run_list(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    form = RunFilterForm(request.GET or None, user=request.user)
    runs: QuerySet[Run] = Run.objects.for_user(request.user).select_related("team", "user")
    filters: dict = {}
    if form.is_bound:
        form.is_valid()
        # cleaned_data holds only the fields that validated: apply those, show errors for the rest.
        filters = getattr(form, "cleaned_data", {})
        runs = filter_runs(runs, filters)
    runs, sort = sort_runs(runs, request.GET.get("sort", DEFAULT_SORT))
    if request.GET.get("format") == "csv":
        by_database = connection.vendor == "postgresql"
        return runs_csv(runs, timezone.now(), by_database=by_database, in_index_order=index_ordered(sort, filters))
    page = Paginator(runs, settings.AIRBOARD_RUNS_PER_PAGE).get_page(request.GET.get("page"))
    page.object_list = glance.attach(page.object_list)

    ctx = {
        "form": form,
        "page": page,
        "sort": sort,
        "columns": _columns(sort),
        "filtered": form.is_bound and any(v for k, v in request.GET.items() if k not in ("sort", "page")),
    }
    return render(request, "runs/run_list.html", ctx)


@login_required
def run_compare(request: HttpRequest) -> HttpResponse:
    """Up to 10 of the user's runs side by side: metrics and utilization overlaid, config diff."""
    try:
        ids = compare.parse_ids(request.GET.getlist("run"))
    except compare.CompareError as exc:
        return render(request, "runs/compare.html", {"error": str(exc)}, status=400)
    if not ids:
        return render(request, "runs/compare.html", {"error": "no run picked yet: tick up to 10 in the runs table"})
    found = {run.pk: run for run in Run.objects.for_user(request.user).select_related("team").filter(pk__in=ids)}
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise Http404(f"No run {', '.join(missing)} among your teams' runs.")
    runs = glance.attach([found[pk] for pk in ids])
    x_axis = "time" if request.GET.get("x") == "time" else "step"
    only_differences = request.GET.get("diff") == "1"
    rows = compare.config_rows(runs)
    ctx = {
        "runs": runs,
        "x_axis": x_axis,
        "only_differences": only_differences,
        "rows": [row for row in rows if row.differs] if only_differences else rows,
        "differing": sum(row.differs for row in rows),
        "metrics": compare.metrics_overlay(runs, x_axis),
        "utilization": compare.utilization_overlay(runs),
        "current": "run_list",
    }
    return render(request, "runs/compare.html", ctx)


def _selected_node(attempts: list[Attempt], attempt_number: str | None, node_index: str | None) -> Node | None:
    """The node the log viewer shows: the requested one, else the first node of the latest attempt."""
    by_number = {str(a.number): a for a in attempts}
    attempt = by_number.get(attempt_number or "") or (attempts[-1] if attempts else None)
    if attempt is None:
        return None
    nodes = list(attempt.nodes.all())
    by_index = {str(n.index): n for n in nodes}
    return by_index.get(node_index or "") or (nodes[0] if nodes else None)


# Node indexes a request may name; a real run has a few hundred nodes at most.
MAX_NODE_INDEX = 1_000_000


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
    # The frame only: which panels the run has (one aggregate); charts.js asks telemetry.json for
    # each panel's data as it comes into view, at the panel's width.
    node_ids = None if gpu_node is None else [n.pk for a in attempts for n in a.nodes.all() if n.index == gpu_node]
    signals = charts.signals_present(run, node_ids)
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
        "coverage": glance.coverage(run, now=now),
        "range": picked,
        "ranges": ["15m", "1h", "6h", "24h", "all"],
        "node_skew": glance.node_skew(run),
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


def _instant(value: str | None) -> datetime | None:
    """An ISO time from a query string (naive = UTC), or None when absent; ValueError when malformed."""
    if not value:
        return None
    parsed = parse_datetime(value.replace(" ", "T").replace("Z", "+00:00"))
    if parsed is None:
        raise ValueError(value)
    parsed = parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)
    # The API's window for times: at year 1 or 9999 the chart's bucket arithmetic overflows.
    if not EARLIEST <= parsed < LATEST:
        raise ValueError(value)
    return parsed


# The views telemetry.json draws: every GPU folded into a mean with its min-max band, or one trace per GPU.
TELEMETRY_VIEWS = ("envelope", "gpus")


def _telemetry_request(request: HttpRequest, run: Run) -> dict | JsonResponse:
    """The checked parameters of a telemetry.json request, or the 400 naming what is wrong."""
    listed = request.GET.get("fields")
    legacy = listed is None  # ?field= alone: one per-GPU figure, as the page's first zoom asked
    fields = [request.GET.get("field", "utilization_gpu")] if legacy else [f for f in (listed or "").split(",") if f]
    unknown = [f[:40] for f in fields if f not in charts.ROLLUP_FIELDS]
    if unknown or not fields or len(fields) > len(charts.ROLLUP_FIELDS):
        name = "fields" if not legacy else "field"
        return JsonResponse({"error": f"{name} must be one of {', '.join(charts.ROLLUP_FIELDS)}"}, status=400)
    view = request.GET.get("view") or ("gpus" if legacy else "envelope")
    if view not in TELEMETRY_VIEWS:
        return JsonResponse({"error": f"view must be one of {', '.join(TELEMETRY_VIEWS)}"}, status=400)
    raw_width = request.GET.get("width", "")
    if raw_width and not (raw_width.isdigit() and len(raw_width) <= 6):
        return JsonResponse({"error": "width must be the panel's width in pixels, a whole number"}, status=400)
    width = envelope.clamp_width(int(raw_width)) if raw_width else envelope.DEFAULT_WIDTH
    try:
        start, end = _instant(request.GET.get("from")), _instant(request.GET.get("to"))
    except ValueError:
        return JsonResponse({"error": "from and to must be ISO 8601 times"}, status=400)
    if start and end and end <= start:
        return JsonResponse({"error": "to must be after from"}, status=400)
    picked = request.GET.get("range", "")
    if picked and picked != "all" and picked not in glance.RANGES:
        return JsonResponse({"error": f"range must be one of {', '.join(glance.RANGES)}, all"}, status=400)
    if start is None and end is None and picked in glance.RANGES:
        start, end = glance.time_range(run, picked)
    names = charts.series_names(run)
    node, node_ids = None, None
    wanted = request.GET.get("gpu_node", "")
    wanted_index = compare.small_number(wanted, MAX_NODE_INDEX)
    if wanted not in ("", "all"):
        node_ids = charts.node_pks(names, wanted_index) if wanted_index is not None else []
        if not node_ids:
            return JsonResponse({"error": "gpu_node must be one of this run's node indexes, or all"}, status=400)
        node = wanted_index
    return {"fields": fields, "legacy": legacy, "view": view, "width": width, "start": start, "end": end,
            "names": names, "node": node, "node_ids": node_ids}  # fmt: skip


@login_required
def run_telemetry(request: HttpRequest, pk: int) -> JsonResponse:
    """GPU panels of a run as figures for [from, to] (or ?range=): the run page draws each from here.

    ?fields=a,b,c answers {"panels": [{field, tier, figure}]}, every field read in one pass
    (runs/telemetry/envelope.py: at most ?width= buckets, the mean in its min-max band across
    GPUs, the worst GPU named); ?view=gpus draws one trace per GPU instead. ?field= alone
    answers one per-GPU figure as {field, tier, figure}, as before. A narrower window reads a
    finer tier (raw below ~33 minutes), so zooming shows real samples.
    """
    run = get_object_or_404(Run.objects.for_user(request.user), pk=pk)
    asked = _telemetry_request(request, run)
    if isinstance(asked, JsonResponse):
        return asked
    fields, node, node_ids, names = asked["fields"], asked["node"], asked["node_ids"], asked["names"]
    start, end, width = asked["start"], asked["end"], asked["width"]
    panels = []
    if asked["view"] == "envelope":
        envelopes = envelope.read_envelopes(run, fields, start, end, width, node_ids=node_ids, names=names)
        for field in fields:
            found = envelopes.get(field)
            figure = envelope.envelope_figure(found, node) if found else None
            panels.append((field, found.tier if found else None, figure))
    else:
        # One count of the GPUs in scope for every field: each panel shares PANEL_POINTS among them.
        gpus = charts.gpus_in_scope(run, end, node_ids)
        for field in fields:
            series = charts.gpu_series(run, field, start, end, 2 * width, node_ids=node_ids, names=names,
                                       panel_points=charts.PANEL_POINTS, gpus=gpus)  # fmt: skip
            figure = charts.gpu_figure(field, series)
            if figure is not None:
                figure["layout"]["meta"]["view"] = "gpus"
                if node is not None:
                    figure["layout"]["meta"]["node"] = node  # the next zoom asks for the same node
            panels.append((field, series[0].tier if series else None, figure))
    if not asked["legacy"] and any(figure is not None for _, _, figure in panels):
        events = charts.gpu_events(run, node_ids)
        limit = charts.power_limit(run) if "power_watts" in fields else None
        for field, _, figure in panels:
            if field == "power_watts":
                charts.with_limit(figure, limit, "limit")
            if field not in ("memory_used_bytes",):
                charts.with_events(figure, events)
    if asked["legacy"]:
        field, tier, figure = panels[0]
        return JsonResponse({"field": field, "tier": tier, "figure": escaped(figure)})
    answer: dict = {"panels": [{"field": f, "tier": t, "figure": escaped(fig)} for f, t, fig in panels]}
    if request.GET.get("signals") == "1":
        # After a node switch the page's signals line names that node's (one aggregate).
        signals = charts.RunPanels(None, None, [], charts.signals_present(run, node_ids))
        answer["signals_html"] = render_to_string("runs/_signals.html", {"signals": signals, "gpu_node": node})
    return JsonResponse(answer)


@login_required
def run_status(request: HttpRequest, pk: int) -> JsonResponse:
    """A run's status, small enough to poll: static/js/live.js asks every 5 s while it is active.

    One indexed row read; no caching, since the point is to see a change within seconds.
    """
    run = get_object_or_404(
        Run.objects.for_user(request.user).only("pk", "external_id", "status", "started_at", "ended_at", "updated_at"),
        pk=pk,
    )
    response = JsonResponse(
        {
            "id": run.pk,
            "external_id": run.external_id,
            "status": run.status,
            "status_label": run.get_status_display(),
            "active": run.is_active,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "ended_at": run.ended_at.isoformat() if run.ended_at else None,
            "updated_at": run.updated_at.isoformat(),
        }
    )
    response["Cache-Control"] = "private, no-cache"
    return response


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Every GPU of the user's running runs now, and utilization by team and accelerator over time."""
    now = timezone.now()
    nodes = fleet_queries.live_gpus(request.user, now)
    if request.GET.get("format") == "csv":
        header = ["team", "run", "accelerator_type", "node_index", "host", "gpu_index", "minute",
                  "utilization_avg", "utilization_max", "memory_used", "memory_total", "memory_percent"]  # fmt: skip
        rows = ([n.team, n.run_external_id, n.accelerator_type, n.node_index, n.host, g.gpu_index, g.minute,
                 g.utilization, g.utilization_max, g.memory_used, g.memory_total, g.memory_percent]
                for n in nodes for g in n.gpus)  # fmt: skip
        return csv_response(f"fleet-{now:%Y-%m-%d_%H%M}.csv", header, rows)
    history = fleet_queries.utilization_history(request.user, now)
    ctx = {
        "nodes": nodes,
        "gpu_count": sum(len(n.gpus) for n in nodes),
        "run_count": len({n.run_id for n in nodes}),
        "recent_minutes": settings.AIRBOARD_FLEET_RECENT_MINUTES,
        "by_team": fleet_queries.history_figure(history["team"], "team"),
        "by_accelerator": fleet_queries.history_figure(history["accelerator"], "accelerator type"),
    }
    return render(request, "runs/fleet.html", ctx)
