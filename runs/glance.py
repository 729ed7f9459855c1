"""At a glance: each listed run's GPU utilization over the last hour, its last sample, its cost.

"Is my GPU busy?" should not take a click per run. Active now and the runs table show, per
row, a sparkline of the average utilization of the run's GPUs per minute (from the minute
rollups, one query for the page), how long ago the last sample came (a silent agent shows as
stale, not as a busy GPU) and the cost so far, read from the one cost engine
(`billing.engine.run_costs`): this module computes no money.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import (
    Avg,
    Case,
    DateTimeField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import Expression, RawSQL
from django.db.models.functions import Least
from django.utils import timezone

from billing.engine import RunCostAnswer, RunFigures, run_costs
from dashboard.kit.csv_export import SqlDatetimeCell, Tail
from runs.models import GpuMinute, Node, Run
from runs.telemetry import life, underuse

WINDOW = timedelta(hours=1)
# A running run whose last sample is older than this is called stale on the page.
STALE_AFTER = timedelta(minutes=3)
# The sparkline's box, in SVG user units (the CSS scales it).
WIDTH, HEIGHT = 120.0, 24.0


@dataclass(frozen=True)
class Glance:
    """One row's glance: sparkline segments (gaps stay gaps), last utilization, last sample, cost."""

    segments: tuple[str, ...]  # SVG polyline `points` strings, one per stretch without a gap
    last_utilization: float | None
    last_sample_at: datetime | None
    stale: bool
    cost: RunCostAnswer

    @property
    def has_series(self) -> bool:
        return bool(self.segments)


def glances(runs: Iterable[Run], now: datetime | None = None) -> dict[int, Glance]:
    """Each run's glance, keyed by run id: two telemetry queries (one when every run reported
    within the window) and the cost engine's, for the page."""
    runs = list(runs)
    if not runs:
        return {}
    now = now or timezone.now()
    since, per_minute, last_minutes = _recent(runs, now)
    costs = run_costs(runs, now=now)
    result = {}
    for run in runs:
        points = per_minute.get(run.pk, [])
        last_at = last_minutes.get(run.pk)
        stale = run.status == "running" and (last_at is None or now - last_at > STALE_AFTER)
        result[run.pk] = Glance(
            segments=sparkline(points, since, now),
            last_utilization=points[-1][1] if points else None,
            last_sample_at=last_at,
            stale=stale,
            cost=costs[run.pk],
        )
    return result


def _recent(
    runs: list[Run], now: datetime
) -> tuple[datetime, dict[int, list[tuple[datetime, float]]], dict[int, datetime]]:
    """(window start, per run its (minute, mean utilization) in the window, per run its last sample's time)."""
    since = (now - WINDOW).replace(second=0, microsecond=0)
    ids = [run.pk for run in runs]
    per_minute: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    rows = (
        GpuMinute.objects.filter(run_id__in=ids, minute__gte=since)
        .values("run_id", "minute")
        .annotate(util=Avg("utilization_gpu_avg"))
        .order_by("run_id", "minute")
    )
    last_minutes: dict[int, datetime] = {}
    for row in rows:
        last_minutes[row["run_id"]] = row["minute"]  # rows come in time order
        if row["util"] is not None:
            per_minute[row["run_id"]].append((row["minute"], float(row["util"])))
    # The last minute with samples, over all time: a run silent for a day says so. A run with
    # minutes in the window has its last one among them; only the others are looked up, each
    # run's newest minute one probe of the natural key (run, minute, ...): Max() per run read
    # every minute of them (120 ms for a page of 50 failed runs with 262,800 minutes).
    silent = [pk for pk in ids if pk not in last_minutes]
    if silent:
        newest = GpuMinute.objects.filter(run_id=OuterRef("pk")).order_by("-minute").values("minute")[:1]
        last_minutes.update(
            (pk, minute)
            for pk, minute in Run.objects.filter(pk__in=silent).values_list("pk", Subquery(newest))
            if minute is not None
        )
    # The end of that minute's samples, never after now.
    last_at = {pk: min(minute + timedelta(minutes=1), now) for pk, minute in last_minutes.items()}
    return since, per_minute, last_at


# The run list's CSV columns for what the table's glance cells show (runs/_glance.html, _glance_cost.html):
# the last minute's utilization of the hour, the last sample, the cost so far and the bill beside it.
CSV_HEADER = ["gpu_utilization_percent", "last_sample_at", "cost_usd", "cost_kind", "billed_usd"]


class CsvCells:
    """The CSV_HEADER cells of many runs, a chunk at a time, for one `now`: the numbers the table
    reads, utilization and last sample as `glances` finds them, cost from the cost engine
    (`billing.engine.RunFigures`: the stored figure of a settled run, the others priced)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.costs = RunFigures(now)

    def sql(self, team_ids: Iterable[int] | None) -> tuple[list[Q], list[Expression], Tail]:
        """The CSV_HEADER cells for COPY of runs of `team_ids` (None: every team; the stored
        figures read are theirs), by dashboard.kit.csv_export's rules: which runs' cells must come
        from `__call__` (the runs any of the returned conditions selects; csv_export._splice reads
        their ids first, the union of one query a condition), the first two cells as SQL, and the
        cost cells of every other run as a `Tail` (the stored figures', read beside the COPY).

        SQL writes a row when the run has no minute in the window (no utilization to show: its
        last sample is the probe `_recent` makes for a silent run, whose minute is read the same
        way) and its stored cost figure is still the engine's (`RunFigures.stored`; such a run has
        no billed usage, so no bill), and its cost cells are the stored figure's
        (`RunFigures.stored_cells`). Every other row's cells are replaced. The test of which is
        not in the COPY's rows, nor over every run: each condition is a set of a few hundred runs
        read from its small side (the minutes of the last hour; the figures not usable, every run
        having a figure row), so each query of the union probes the runs by id rather than
        reading all 100,000. Nor are the figures joined in the COPY: in its index's order that
        was an index probe a row.
        """
        since = (self.now - WINDOW).replace(second=0, microsecond=0)
        unusable, _, _ = self.costs.stored()
        # The runs with a minute in the window, read here from the minute index (53,000 minutes of
        # 125 runs at 100,000 runs: 14 ms): as a subquery PostgreSQL probed the minutes once a
        # run, all 100,000 (70 ms).
        recent_ids = GpuMinute.objects.filter(minute__gte=since).order_by().values_list("run_id", flat=True)
        recent = Q(pk__in=list(recent_ids.distinct()))
        end = ExpressionWrapper(F("minute") + Value(timedelta(minutes=1)), output_field=DateTimeField())
        newest = GpuMinute.objects.filter(run_id=OuterRef("pk")).order_by("-minute")
        last = Subquery(newest.values(end=Least(end, Value(self.now, output_field=DateTimeField())))[:1])
        # Probed only for the runs with any minute (a few hundred of 100,000: the minute tier is
        # kept for days), found by skipping through the natural key's index a run at a time and
        # read once into a hash; every other run's probe would find nothing (~1-2 us a row).
        table = GpuMinute._meta.db_table  # the model's own name, no input of anyone's
        skip = (
            f"WITH RECURSIVE r AS ((SELECT run_id FROM {table} ORDER BY run_id LIMIT 1) UNION ALL"  # noqa: S608
            f" SELECT (SELECT run_id FROM {table} WHERE run_id > r.run_id ORDER BY run_id LIMIT 1)"
            " FROM r WHERE r.run_id IS NOT NULL) SELECT run_id FROM r WHERE run_id IS NOT NULL"
        )
        with_minutes = RawSQL(skip, [])  # noqa: S611
        shown = Case(When(Q(pk__in=with_minutes), then=last), default=None, output_field=DateTimeField())
        nothing = Value(None, output_field=TextField())
        # The cost cells (usd, kind, the empty bill) from the stored figures, read beside the
        # COPY rather than joined a row in it (csv_export.Tail).
        return [recent, unusable], [nothing, SqlDatetimeCell(shown)], Tail(3, self.costs.stored_cells(team_ids))

    def __call__(self, run_ids: Sequence[int]) -> dict[int, list[object]]:
        runs = list(Run.objects.filter(pk__in=list(run_ids)).only("pk"))
        _, per_minute, last_at = _recent(runs, self.now)
        out: dict[int, list[object]] = {}
        for pk, (usd, kind, billed) in self.costs.of(run.pk for run in runs).items():
            points = per_minute.get(pk)
            out[pk] = [points[-1][1] if points else None, last_at.get(pk), usd, kind, billed]
        return out


def sparkline(points: list[tuple[datetime, float]], start: datetime, end: datetime) -> tuple[str, ...]:
    """SVG polyline point strings for utilization 0-100 % over [start, end]; a missing minute breaks the line."""
    span = (end - start).total_seconds() or 1.0
    segments: list[list[str]] = []
    previous: datetime | None = None
    for minute, util in points:
        if previous is None or minute - previous > timedelta(minutes=1):
            segments.append([])
        x = WIDTH * max(0.0, min(1.0, (minute - start).total_seconds() / span))
        y = HEIGHT - HEIGHT * max(0.0, min(100.0, util)) / 100.0
        segments[-1].append(f"{x:.1f},{y:.1f}")
        previous = minute
    # A lone minute still draws: a short tick rather than nothing.
    return tuple(" ".join(s if len(s) > 1 else [s[0], _nudge(s[0])]) for s in segments)


def _nudge(point: str) -> str:
    x, y = point.split(",")
    return f"{float(x) + 1.5:.1f},{y}"


def attach(runs: Iterable[Run], now: datetime | None = None) -> list[Run]:
    """The runs as a list, each with its `glance` and `underuse` set, for templates (runs/_glance.html).

    `underuse` is runs.telemetry.underuse's answer (None for a run without utilization yet).
    """
    runs = list(runs)
    now = now or timezone.now()
    found = glances(runs, now=now)
    flags = underuse.underuse_of_runs(runs, now=now)
    for run in runs:
        run.glance = found[run.pk]
        run.underuse = flags.get(run.pk)
    return runs


@dataclass(frozen=True)
class Coverage:
    """What a run page's GPU charts rest on: which nodes reported, over what span, how long ago."""

    nodes_reporting: int
    nodes: int
    first: datetime | None
    last: datetime | None
    started: datetime | None
    ended: datetime | None  # the run's end, or now while it runs
    stale: bool

    @property
    def partial(self) -> bool:
        return self.nodes_reporting < self.nodes

    @property
    def recent(self) -> bool:
        """The last sample came within the last minute ("just now" rather than "0 minutes ago")."""
        return self.last is not None and (self.ended or self.last) - self.last < timedelta(minutes=1)


def _minute_span(run: Run, found: life.RunLife | None = None) -> dict:
    """First and last minute of the run's rollups and the nodes that reported, without reading every minute.

    The first and last minute are two one-row reads of the natural key (run, minute, ...), ordered
    as it is; the nodes are those with rollups over the run's life (`life.life`, one aggregate
    over the hour rollups, 60 times fewer rows; the page's frame passes the one it read). One
    aggregate over every minute read 1.2 million rows for a 13-day 64-GPU run.
    """
    minutes = GpuMinute.objects.filter(run=run)
    first = minutes.order_by("run_id", "minute").values_list("minute", flat=True).first()
    if first is None:
        return {"first": None, "last": None, "nodes": 0}
    last = minutes.order_by("-run_id", "-minute").values_list("minute", flat=True).first()
    found = found if found is not None else life.life(run)
    return {"first": first, "last": last, "nodes": len(found.nodes)}


def coverage(run: Run, now: datetime | None = None, found: life.RunLife | None = None) -> Coverage:
    """The run's telemetry coverage from its minute rollups: two one-row reads, a node count and the nodes."""
    now = now or timezone.now()
    span = _minute_span(run, found)
    nodes = Node.objects.filter(attempt__run=run).count()
    last = span["last"] + timedelta(minutes=1) if span["last"] else None
    if last and last > now:
        last = now
    stale = run.status == "running" and (last is None or now - last > STALE_AFTER)
    return Coverage(span["nodes"] or 0, nodes, span["first"], last, run.started_at, run.ended_at or now, stale)


# The run page's time range picker: the last N of the run's telemetry, or all of it.
RANGES = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(days=1)}


def time_range(run: Run, choice: str) -> tuple[datetime | None, datetime | None]:
    """[start, end] of the picked range, ending at the run's last minute of telemetry; (None, None) for all."""
    span = RANGES.get(choice)
    if span is None:
        return None, None
    last = GpuMinute.objects.filter(run=run).order_by("-run_id", "-minute").values_list("minute", flat=True).first()
    if last is None:
        return None, None
    end = last + timedelta(minutes=1)
    return end - span, end


@dataclass(frozen=True)
class NodeSkew:
    """One node's mean utilization over the run and how far it sits from the run's mean."""

    index: int
    host: str
    attempt: int
    mean_utilization: float
    skew: float  # percentage points against the mean of all nodes


def node_skew(run: Run, found: life.RunLife | None = None) -> list[NodeSkew]:
    """Per-node mean GPU utilization against the run's; [] for one node.

    The mean of each node's hour rollups' means (`life.life`: 60 times fewer rows than the
    minutes, which for a 13-day 64-GPU run are 1.2 million), else of its minutes' (rollups
    loaded without hours); the page's frame passes the aggregate it read as `found`.
    """
    found = found if found is not None else life.life(run)
    means = {pk: node.mean_utilization for pk, node in found.nodes.items() if node.mean_utilization is not None}
    if len(means) < 2:
        return []
    names = Node.objects.filter(pk__in=means).values_list("pk", "index", "host", "attempt__number")
    rows = sorted(names, key=lambda row: (row[3], row[1]))
    mean = sum(means.values()) / len(means)
    return [NodeSkew(index, host, attempt, means[pk], means[pk] - mean) for pk, index, host, attempt in rows]
