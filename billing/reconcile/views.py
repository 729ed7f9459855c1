"""Reconciliation page (`/costs/reconcile/`): estimated vs billed per day and per run, with CSV.

Scoped like the cost pages: a user sees their teams' runs; billed records linked to no run
(a job_run_id we never collected) are shown to staff only, since we cannot tell whose they are.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from billing.reconcile import matching as reconcile
from dashboard.kit import access
from dashboard.kit.csv_export import csv_response

FIGURE_HEADER = ["estimated_usd", "billed_usd", "difference_usd", "difference_percent"]


class ReconcileFilterForm(forms.Form):
    """A UTC date range (default: this month so far) and an optional team."""

    start = forms.DateField(required=False, label="From", widget=forms.DateInput({"type": "date"}))
    end = forms.DateField(required=False, label="to", widget=forms.DateInput({"type": "date"}))
    team = forms.ModelChoiceField(required=False, queryset=Group.objects.none(), empty_label="all my teams")

    def __init__(self, *args: Any, teams: QuerySet[Group], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["team"]).queryset = teams

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        if data.get("start") and data.get("end") and data["start"] > data["end"]:
            self.add_error("end", "The range ends before it starts.")
        return data

    def values(self) -> tuple:
        today = timezone.now().date()
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        end = data.get("end") or today
        start = data.get("start") or min(end.replace(day=1), end)
        if (end - start).days > 3660:
            start = end - timedelta(days=3660)
        return start, end, data.get("team")


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
    days = reconcile.day_rows(team_ids, start, end, staff, team_id=team_id)
    runs = reconcile.run_rows(team_ids, start, end, staff, team_id=team_id)

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
