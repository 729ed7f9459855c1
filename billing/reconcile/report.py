"""The reconciliation page's rows: estimated against billed per run and per day, in a date range."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import date
from decimal import Decimal

from django.db.models import Q, QuerySet

from billing.costs import reports
from billing.models import BilledUsage
from billing.prices.money import ZERO, exact_sum
from billing.reconcile.compare import BilledFigure, difference_and_percent, per_run
from runs.models import Run


def visible_usage(team_ids: Iterable[int], staff: bool) -> QuerySet[BilledUsage]:
    """Billed usage of runs of `team_ids`; staff also see records linked to no run."""
    linked = Q(run__team_id__in=list(team_ids))
    return BilledUsage.objects.filter(linked | Q(run__isnull=True) if staff else linked)


def run_rows(team_ids: Iterable[int], start: date, end: date, staff: bool, team_id: int | None = None) -> list[dict]:
    """One row per run with billed usage dated in [start, end]; staff also get unlinked ids.

    Estimated and billed are whole-run figures, so a run that spans the range's edge compares
    like with like.
    """
    usage = visible_usage(team_ids, staff).filter(usage_date__gte=start, usage_date__lte=end)
    if team_id:
        usage = usage.filter(run__team_id=team_id)
    run_ids = set(usage.exclude(run__isnull=True).values_list("run_id", flat=True))
    runs = list(Run.objects.filter(pk__in=run_ids).select_related("team").order_by("-submitted_at"))
    figures = per_run(runs)
    out = []
    for run in runs:
        figure = figures[run.pk]
        out.append({"run": run, "job_run_id": run.external_id, "team": run.team.name, **_figure_dict(figure)})
    if staff and not team_id:
        loose: dict[str, list] = defaultdict(list)
        for job_run_id, usd in usage.filter(run__isnull=True).values_list("job_run_id", "billed_usd"):
            loose[job_run_id].append(usd)
        for job_run_id, values in sorted(loose.items()):
            figure = BilledFigure(
                ZERO, exact_sum(v for v in values if v is not None), len(values), sum(v is None for v in values)
            )
            out.append({"run": None, "job_run_id": job_run_id or "(none)", "team": "", **_figure_dict(figure)})
    return out


def _figure_dict(figure: BilledFigure) -> dict:
    diff, percent = difference_and_percent(figure.estimated, figure.billed)
    return {
        "estimated": figure.estimated,
        "billed": figure.billed,
        "difference": diff,
        "percent": percent,
        "records": figure.records,
        "unpriced": figure.unpriced,
    }


def day_rows(team_ids: Iterable[int], start: date, end: date, staff: bool, team_id: int | None = None) -> list[dict]:
    """One row per day in [start, end] with an estimate or a bill: estimated, billed, diff, %."""
    team_ids = list(team_ids)
    filters = reports.CostFilters(start, end, team_id=team_id)
    estimated = {row["day"]: row["total_usd"] for row in reports.sum_by(reports.cost_rows(team_ids, filters), ["day"])}
    usage = visible_usage(team_ids, staff and not team_id).filter(usage_date__gte=start, usage_date__lte=end)
    if team_id:
        usage = usage.filter(run__team_id=team_id)
    billed: dict[date, list[Decimal]] = defaultdict(list)
    for day, usd in usage.values_list("usage_date", "billed_usd"):
        if usd is not None:
            billed[day].append(usd)
    out = []
    for day in sorted(set(estimated) | set(billed)):
        figure = BilledFigure(estimated.get(day, ZERO), exact_sum(billed[day]), 0, 0)
        row = _figure_dict(figure)
        del row["records"], row["unpriced"]
        out.append({"day": day, **row})
    return out
