"""Reconciliation page (`/costs/reconcile/`): estimated vs billed per day and per run, with CSV.

Scoped like the cost pages: a user sees their teams' runs; billed records linked to no run
(a job_run_id we never collected) are shown to staff only, since we cannot tell whose they are.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from billing.reconcile import report
from billing.reconcile.forms import ReconcileFilterForm
from dashboard.kit import access
from dashboard.kit.csv_export import csv_response

FIGURE_HEADER = ["estimated_usd", "billed_usd", "difference_usd", "difference_percent"]


def _figures(row: dict) -> list[object]:
    return [row["estimated"], row["billed"], row["difference"], "" if row["percent"] is None else row["percent"]]


@login_required
def reconcile_overview(request: HttpRequest) -> HttpResponse:
    teams = access.visible_teams(request.user)
    staff = access.sees_all_teams(request.user)
    form = ReconcileFilterForm(request.GET or None, teams=teams)
    start, end, team = form.values()
    team_ids = [t.pk for t in teams]
    team_id = team.pk if team else None
    days = report.day_rows(team_ids, start, end, staff, team_id=team_id)
    runs = report.run_rows(team_ids, start, end, staff, team_id=team_id)

    if request.GET.get("format") == "csv":
        stamp = f"{start}_{end}"
        if request.GET.get("table") == "runs":
            header = ["job_run_id", "team", *FIGURE_HEADER, "records", "unpriced_records"]
            rows = ([r["job_run_id"], r["team"], *_figures(r), r["records"], r["unpriced"]] for r in runs)
            return csv_response(f"reconcile-runs-{stamp}.csv", header, rows)
        return csv_response(
            f"reconcile-days-{stamp}.csv", ["day", *FIGURE_HEADER], ([r["day"], *_figures(r)] for r in days)
        )

    ctx = {
        "form": form,
        "start": start,
        "end": end,
        "days": days,
        "runs": runs,
        "staff": staff,
        "query": request.GET.urlencode(),
    }
    return render(request, "billing/reconcile.html", ctx)
