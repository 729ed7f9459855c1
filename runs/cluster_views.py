"""Classic cluster pages and the configuration advice page.

Every view scopes to the user's teams first (`team_filter`): another team's cluster is a 404,
not a 403, so the page does not confirm that it exists.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from runs.advice import RULE_IDS, advise, findings_for, recent_runs
from runs.clusters import access_mode, cluster_costs, team_totals
from runs.models import Cluster, Run, team_filter


def _clusters_for(request: HttpRequest) -> QuerySet[Cluster]:
    return Cluster.objects.filter(team_filter(request.user)).select_related("team")


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    """Every classic GPU cluster the user may see, with its cost and a per-team table."""
    clusters = list(_clusters_for(request).prefetch_related("events").order_by("team__name", "name", "cluster_id"))
    costs = cluster_costs(clusters)
    rows = [{"cost": cost, "access": access_mode(cost.cluster)} for cost in costs]
    ctx = {"rows": rows, "teams": team_totals(costs)}
    return render(request, "runs/cluster_list.html", ctx)


@login_required
def cluster_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One cluster: configuration, lifecycle events, cost, runs on it and advice about it."""
    cluster = get_object_or_404(_clusters_for(request), pk=pk)
    now = timezone.now()
    (cost,) = cluster_costs([cluster], now=now)
    runs = Run.objects.for_user(request.user).filter(cluster=cluster).select_related("team")
    findings = findings_for(recent_runs(runs, now), [cluster], now=now)
    ctx = {
        "cluster": cluster,
        "cost": cost,
        "access": access_mode(cluster),
        "events": cluster.events.order_by("ts"),
        "runs": runs.order_by("-submitted_at")[:50],
        "findings": findings,
    }
    return render(request, "runs/cluster_detail.html", ctx)


@login_required
def advice(request: HttpRequest) -> HttpResponse:
    """Configuration findings for the user's clusters and recent runs, grouped by rule."""
    findings = advise(Run.objects.for_user(request.user), _clusters_for(request))
    by_rule = {rule: [f for f in findings if f.rule == rule] for rule in RULE_IDS}
    ctx = {"groups": [(rule, items) for rule, items in by_rule.items() if items], "count": len(findings)}
    return render(request, "runs/advice.html", ctx)
