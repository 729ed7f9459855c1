"""The failures overview: failed runs by class, team and week, what they cost, and recurring causes.

Reads stored `FailureAnalysis` rows (one per classified failed run), so the page never runs
the classifier. Cost is the cost of the failed attempts only (`billing.costs.failed`): a run that
failed twice and then succeeded counts the two failed attempts.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.db.models.functions import Coalesce, TruncDate, TruncWeek

from billing.engine import failed_attempts_cost
from dashboard.kit import access
from dashboard.kit.csv_export import cell
from runs.choices import RunStatus
from runs.failures.classify_pass import FAILED_STATUSES
from runs.models import FailureAnalysis
from runs.telemetry.charts import STATUS_COLORS, time_layout

# Failed runs read for one overview; a wider range shows a note and asks for a narrower one.
MAX_FAILURES = 5_000
# What failure_stats reads of a verdict, as tuples: its grouping fields and the team's name.
# Not model instances (15,000 of them with runs and teams were half the page at 5,000
# failures), nor the run fields the engine prices by: billing.costs.failed loads those for the
# runs it has to price.
# The week (Monday, UTC) comes from the database as a date, as `week_of` computes it: parsing
# 10,000 timestamps was a tenth of the page.
STATS_FIELDS = ("run_id", "class_id", "title", "signature", "stats_week", "run__team__name")
TOP_CAUSES = 10
ZERO = Decimal("0")


@dataclass(frozen=True)
class WeekRow:
    """Failures of one class of one team in one week (weeks start on Monday, UTC)."""

    week: date
    team: str
    class_id: str
    title: str
    failures: int
    cost: Decimal


@dataclass(frozen=True)
class Cause:
    """A recurring cause: a class and its folded evidence, and how often it failed a run."""

    class_id: str
    signature: str
    failures: int
    example_run: int


@dataclass(frozen=True)
class FailureStats:
    rows: list[WeekRow]
    causes: list[Cause]
    total_failures: int
    total_cost: Decimal
    capped: bool


def failures_for(user: User | AnonymousUser, *, team: int | None = None, class_id: str = "", start: date | None = None,
                 end: date | None = None) -> QuerySet[FailureAnalysis]:  # fmt: skip
    """Stored verdicts of the failed runs the user may see, filtered; end date inclusive."""
    # The team filter on the run's own team, not `run__in` a scoped subquery of every run: at
    # 100,000 runs that semi-join hashed them all.
    qs = FailureAnalysis.objects.filter(access.team_q(user, "run__team"), run__status__in=FAILED_STATUSES)
    qs = qs.select_related("run__team")
    if team:
        qs = qs.filter(run__team_id=team)
    if class_id:
        qs = qs.filter(class_id=class_id)
    if start:
        qs = qs.filter(failed_at__gte=datetime.combine(start, datetime.min.time(), tzinfo=UTC))
    if end:
        qs = qs.filter(failed_at__lt=datetime.combine(end + timedelta(days=1), datetime.min.time(), tzinfo=UTC))
    return qs.order_by("-failed_at", "-pk")


def week_of(ts: datetime) -> date:
    day = ts.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def failure_stats(analyses: QuerySet[FailureAnalysis], now: datetime | None = None) -> FailureStats:
    """Aggregate the verdicts by (week, team, class), price their failed attempts, count causes.

    1. Read at most MAX_FAILURES verdicts with their runs (one query).
    2. Their failed attempts' cost (`billing.costs.failed.failed_attempts_cost`: the figure the cost
       rollup stored for settled runs, the engine's for the rest; constant queries).
    3. Fold into week rows, newest week first, and count (class, signature) pairs.
    """
    weeks = analyses.annotate(
        stats_week=TruncDate(TruncWeek(Coalesce("failed_at", "classified_at"), tzinfo=UTC), tzinfo=UTC)
    )
    found = list(weeks.values_list(*STATS_FIELDS)[: MAX_FAILURES + 1])
    capped = len(found) > MAX_FAILURES
    found = found[:MAX_FAILURES]
    costs = failed_attempts_cost([row[0] for row in found], now=now)
    counts: Counter[tuple[date, str, str]] = Counter()
    sums: dict[tuple[date, str, str], Decimal] = defaultdict(lambda: ZERO)
    titles: dict[str, str] = {}
    causes: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], int] = {}
    for run_id, class_id, title, signature, week, team in found:
        key = (week, team, class_id)
        counts[key] += 1
        sums[key] += costs.get(run_id, ZERO)
        titles[class_id] = title
        causes[(class_id, signature)] += 1
        examples.setdefault((class_id, signature), run_id)
    rows = [
        WeekRow(week, team, class_id, titles[class_id], n, sums[(week, team, class_id)])
        for (week, team, class_id), n in sorted(counts.items(), key=lambda kv: (-kv[0][0].toordinal(), kv[0][1:]))
    ]
    top = [Cause(c, s, n, examples[(c, s)]) for (c, s), n in causes.most_common(TOP_CAUSES)]
    return FailureStats(rows, top, len(found), sum(costs.values(), ZERO), capped)


def stacked_figure(rows: list[WeekRow]) -> dict | None:
    """Failures per week as a stacked bar per class; None with no failures."""
    if not rows:
        return None
    weeks = sorted({r.week for r in rows})
    by_class: dict[str, Counter[date]] = defaultdict(Counter)
    for r in rows:
        by_class[r.class_id][r.week] += r.failures
    traces = [
        {
            "type": "bar",
            "name": class_id,
            "x": [w.isoformat() for w in weeks],
            "y": [counts[w] for w in weeks],
            "hovertemplate": "%{y} failed run(s)<extra>%{fullData.name}</extra>",
        }
        for class_id, counts in sorted(by_class.items())
    ]
    layout = time_layout("", "failed runs", series_count=len(traces), barmode="stack", hovermode="closest")
    layout["xaxis"]["title"] = {"text": "week (Monday, UTC)"}
    layout["colorway"] = [STATUS_COLORS[RunStatus.FAILED], "#3b82f6", "#f59e0b", "#22c55e", "#a855f7", "#14b8a6"]
    return {"data": traces, "layout": layout}


def stats_csv(rows: list[WeekRow]) -> str:
    """The week rows as CSV (week, team, class, title, failures, failed attempts' cost in USD, exact as
    every export writes it: a rounding here disagreed with the page's cents)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["week", "team", "class", "title", "failed_runs", "failed_cost_usd"])
    for r in rows:
        writer.writerow([cell(v) for v in (r.week.isoformat(), r.team, r.class_id, r.title, r.failures, r.cost)])
    return out.getvalue()
