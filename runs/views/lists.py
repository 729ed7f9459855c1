"""Run lists: the filtered, sorted, paginated run list (and its CSV), the compare page, the fleet page.

Every view scopes to `Run.objects.for_user(user)` first (the rule in `runs.views`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import date, datetime, time, timedelta
from itertools import islice

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from dashboard.kit.access import visible_team_ids
from dashboard.kit.csv_export import (
    STREAM_CHUNK_ROWS,
    SqlIntegerCell,
    copy_streaming_response,
    csv_response,
    csv_streaming_response,
    sql_cell,
)
from runs import compare, glance
from runs.forms import RunFilterForm
from runs.models import Run
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
    runs: QuerySet[Run],
    now: datetime,
    *,
    by_database: bool,
    in_index_order: bool = False,
    team_ids: Iterable[int] | None,
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
    `team_ids`: the teams `runs` are of (None: every team), whose stored cost figures are read.
    """
    filename = f"runs-{now:%Y-%m-%d}.csv"

    added = glance.CsvCells(now)
    if by_database:
        replaced, glance_cells, tail = added.sql(team_ids)
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
        return runs_csv(
            runs, timezone.now(), by_database=by_database, in_index_order=index_ordered(sort, filters),
            team_ids=visible_team_ids(request.user),
        )  # fmt: skip
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
