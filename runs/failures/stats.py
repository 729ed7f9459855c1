"""The failures overview: failed runs by class, team and week, what they cost, and recurring causes.

Reads stored `FailureAnalysis` rows (one per classified failed run), so the page never runs
the classifier. Cost is the cost of the failed attempts only (`billing.run_costs`): a run that
failed twice and then succeeded counts the two failed attempts.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.models import User
from django.db.models import QuerySet

from billing.costs.rollups import RUN_COST_FIELDS
from billing.costs.run_costs import breakdowns_for_runs
from dashboard.csv_export import cell
from runs.choices import RunStatus
from runs.failures.postmortem import FAILED_STATUSES
from runs.models import Attempt, FailureAnalysis, Run
from runs.telemetry.charts import STATUS_COLORS, time_layout

# Failed runs read for one overview; a wider range shows a note and asks for a narrower one.
MAX_FAILURES = 5_000
# What failure_stats reads of a verdict and its run: the verdict's grouping fields, the team's
# name, and the run fields the cost engine prices by (those billing.rollups loads). Not the
# evidence, telemetry and workloads: at 5,000 failures their loading was a fifth of the page.
STATS_FIELDS = (
    "run_id", "class_id", "title", "signature", "failed_at", "classified_at", "run__team__name",
    *(f"run__{name}" for name in RUN_COST_FIELDS),
)  # fmt: skip
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


def failures_for(user: User, *, team: int | None = None, class_id: str = "", start: date | None = None,
                 end: date | None = None) -> QuerySet[FailureAnalysis]:  # fmt: skip
    """Stored verdicts of the failed runs the user may see, filtered; end date inclusive."""
    qs = FailureAnalysis.objects.filter(
        run__in=Run.objects.for_user(user), run__status__in=FAILED_STATUSES
    ).select_related("run__team")
    if team:
        qs = qs.filter(run__team_id=team)
    if class_id:
        qs = qs.filter(class_id=class_id)
    if start:
        qs = qs.filter(failed_at__gte=datetime.combine(start, datetime.min.time(), tzinfo=UTC))
    if end:
        qs = qs.filter(failed_at__lt=datetime.combine(end + timedelta(days=1), datetime.min.time(), tzinfo=UTC))
    return qs.order_by("-failed_at", "-pk")


def failed_attempts_cost(runs: Iterable[Run], now: datetime | None = None) -> dict[int, Decimal]:
    """Per run: compute cost of its failed or timed-out attempts (classic uptime: all of it)."""
    runs = list(runs)
    failed_numbers: dict[int, set[int]] = defaultdict(set)
    for run_id, number in Attempt.objects.filter(run__in=runs, status__in=FAILED_STATUSES).values_list(
        "run_id", "number"
    ):
        failed_numbers[run_id].add(number)
    costs = {}
    for run_id, breakdown in breakdowns_for_runs(runs, now=now).items():
        costs[run_id] = sum(
            (i.compute for i in breakdown.intervals if i.number == 0 or i.number in failed_numbers[run_id]), ZERO
        )
    return costs


def week_of(ts: datetime) -> date:
    day = ts.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def failure_stats(analyses: QuerySet[FailureAnalysis], now: datetime | None = None) -> FailureStats:
    """Aggregate the verdicts by (week, team, class), price their failed attempts, count causes.

    1. Read at most MAX_FAILURES verdicts with their runs (one query).
    2. Price the failed attempts of those runs (`breakdowns_for_runs`, constant queries).
    3. Fold into week rows, newest week first, and count (class, signature) pairs.
    """
    analyses_list = list(analyses.only(*STATS_FIELDS)[: MAX_FAILURES + 1])
    capped = len(analyses_list) > MAX_FAILURES
    analyses_list = analyses_list[:MAX_FAILURES]
    costs = failed_attempts_cost([a.run for a in analyses_list], now=now)
    counts: Counter[tuple[date, str, str]] = Counter()
    sums: dict[tuple[date, str, str], Decimal] = defaultdict(lambda: ZERO)
    titles: dict[str, str] = {}
    causes: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], int] = {}
    for a in analyses_list:
        key = (week_of(a.failed_at or a.classified_at), a.run.team.name, a.class_id)
        counts[key] += 1
        sums[key] += costs.get(a.run_id, ZERO)
        titles[a.class_id] = a.title
        causes[(a.class_id, a.signature)] += 1
        examples.setdefault((a.class_id, a.signature), a.run_id)
    rows = [
        WeekRow(week, team, class_id, titles[class_id], n, sums[(week, team, class_id)])
        for (week, team, class_id), n in sorted(counts.items(), key=lambda kv: (-kv[0][0].toordinal(), kv[0][1:]))
    ]
    top = [Cause(c, s, n, examples[(c, s)]) for (c, s), n in causes.most_common(TOP_CAUSES)]
    return FailureStats(rows, top, len(analyses_list), sum(costs.values(), ZERO), capped)


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
