"""Classic cluster pages and the configuration advice page.

Every view scopes to the user's teams first (`dashboard.kit.access`): another team's cluster is a 404,
not a 403, so the page does not confirm that it exists.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from billing.engine import cluster_costs, team_totals
from dashboard.kit import access
from dashboard.kit.csv_export import csv_response
from runs.clusters.advice import RULE_IDS, RULE_TITLES, advise, findings_for, recent_runs
from runs.clusters.facts import access_mode
from runs.models import Cluster, Run


def _clusters_for(request: HttpRequest) -> QuerySet[Cluster]:
    return access.scope(Cluster.objects.all(), request.user).select_related("team")


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    """Every classic GPU cluster the user may see, with its cost and a per-team table."""
    clusters = list(_clusters_for(request).prefetch_related("events").order_by("team__name", "name", "cluster_id"))
    now = timezone.now()
    costs = cluster_costs(clusters, now=now)
    rows: list[dict[str, Any]] = [{"cost": cost, "access": access_mode(cost.cluster)} for cost in costs]
    if request.GET.get("format") == "csv":
        return _clusters_csv(request.GET.get("table", ""), rows, team_totals(costs))
    # CPU-only clusters are listed apart: their hours are never GPU time (runs.models.instance_types).
    ctx = {
        "rows": [row for row in rows if row["cost"].has_gpus],
        "cpu_rows": [row for row in rows if not row["cost"].has_gpus],
        "teams": team_totals(costs),
        "as_of": now,
    }
    return render(request, "runs/cluster_list.html", ctx)


CLUSTER_CSV_HEADER = [
    "cluster_id", "name", "team", "spark_version", "node_type_id", "driver_node_type_id", "num_workers",
    "autoscale_min_workers", "autoscale_max_workers", "access_mode", "docker_image", "uptime_hours", "uptime_cost_usd",
    "busy_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "idle_cost_usd", "serverless_shape", "what_if_cost_usd",
    "has_gpus", "figure",
]  # fmt: skip
TEAM_CSV_HEADER = [
    "team", "clusters", "uptime_cost_usd", "busy_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "idle_cost_usd",
    "what_if_cost_usd", "what_if_saving_usd", "without_equivalent",
]  # fmt: skip


def _clusters_csv(table: str, rows: list[dict], teams: list) -> HttpResponse:
    """The clusters table (default) or the by-team table (`table=teams`) as CSV."""
    stamp = f"{timezone.now():%Y-%m-%d}"
    if table == "teams":
        return csv_response(f"clusters-by-team-{stamp}.csv", TEAM_CSV_HEADER, (
            [t.team, t.clusters, t.uptime_cost, t.busy_gpu_hours, t.idle_gpu_hours, t.unknown_gpu_hours, t.idle_cost,
             t.what_if_cost, t.what_if_saving, t.without_equivalent] for t in teams
        ))  # fmt: skip
    return csv_response(f"clusters-{stamp}.csv", CLUSTER_CSV_HEADER, (
        [c.cluster_id, c.name, c.team.name, c.spark_version, c.node_type_id, c.driver_node_type_id, c.num_workers,
         c.autoscale_min_workers, c.autoscale_max_workers, row["access"], c.docker_image, cost.uptime_hours,
         cost.uptime_cost, cost.busy_gpu_hours, cost.idle_gpu_hours, cost.unknown_gpu_hours, cost.idle_cost,
         cost.serverless_shape, cost.what_if_cost, cost.has_gpus, cost.figure.label]
        for row in rows for cost in [row["cost"]] for c in [cost.cluster]
    ))  # fmt: skip


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
    if request.GET.get("format") == "csv":
        header = ["rule", "subject_type", "subject_id", "subject", "team", "why", "fix"]
        rows = ([f.rule, f.subject_type, f.subject_id, f.subject, f.team, f.why, f.fix] for f in findings)
        return csv_response(f"advice-{timezone.now():%Y-%m-%d}.csv", header, rows)
    by_rule = {rule: [f for f in findings if f.rule == rule] for rule in RULE_IDS}
    groups = [(rule, RULE_TITLES.get(rule, rule), items) for rule, items in by_rule.items() if items]
    ctx = {"groups": groups, "count": len(findings)}
    return render(request, "runs/advice.html", ctx)
