"""The cost page (`/costs/`): the view scopes and renders; `billing.overview` builds what it shows.

Cost pages read the daily rollups scoped to the user's teams (staff: all), so another team's
spend never reaches a sum. Every table downloads as CSV with `?format=csv&table=NAME`.
The view sits at billing's top, beside `billing.overview`: what it reads comes from rooms
(engine, reconcile, policies) that import `billing.costs`, so it cannot live inside it. The
price book's pages are `billing.prices.views`.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from billing import overview
from billing.costs import charts, reports
from billing.costs.forms import CostFilterForm
from dashboard.kit import access
from dashboard.kit.csv_export import csv_response

# Rows in the "top" tables; the CSV download has them all.
TOP = 20


@login_required
def cost_overview(request: HttpRequest) -> HttpResponse:
    teams = access.visible_teams(request.user)
    form = CostFilterForm(request.GET or None, teams=teams)
    filters, group_by = form.filters()
    as_csv = request.GET.get("format") == "csv"
    page = overview.cost_overview([t.pk for t in teams], filters, group_by, timezone.now(), summary=not as_csv)
    if as_csv:
        return csv_response(*overview.csv_table(page, request.GET.get("table", "")))
    ctx = {
        "form": form,
        "start": filters.start,
        "end": filters.end,
        "group_by": group_by,
        "group_label": page.group_label,
        "by_group": page.by_group,
        "experiments": page.experiments[:TOP],
        "creators": page.creators[:TOP],
        "idle": page.idle[:TOP],
        "flows": page.flows,
        "total": page.total,
        "egress_share": page.egress_share,
        "mtd": page.mtd,
        "mtd_policy": page.mtd_policy,
        "mtd_billed": page.mtd_billed,
        "total_figure": page.total_figure,
        "total_billed": page.total_billed,
        "min_forecast_days": reports.MIN_FORECAST_DAYS,
        "spend_figure": charts.daily_spend_figure(page.daily, page.group_field, page.group_label),
        "egress_figure": charts.egress_sankey_figure(page.flows),
        "query": request.GET.urlencode(),
    }
    return render(request, "billing/costs.html", ctx)
