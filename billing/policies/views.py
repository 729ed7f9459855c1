"""Usage policy pages (`/costs/policies/`).

Policy admins (`can_manage_policies`: staff or `billing.manage_policies`) see and edit every
policy. Other users see their teams' policies read-only; any other policy answers 404, so a
page never tells whether another team's policy exists.
"""

from __future__ import annotations

from decimal import Decimal
from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from billing.models import AlertChannel, PolicyAction, UsagePolicy
from billing.policies import budget, charts, pushed, versions
from billing.policies import split as policy_split
from billing.policies.forms import MANAGE_POLICIES, ChannelForm, PolicyForm, can_manage_policies
from billing.prices.money import ZERO
from dashboard.kit import access
from dashboard.kit.csv_export import csv_response
from runs.models import Run

# Rows of the delivery, alert and action logs on a policy page.
LOG_ROWS = 50


def visible_policies(request: HttpRequest) -> QuerySet[UsagePolicy]:
    """Every policy for an admin; else those covering one of the user's teams."""
    if can_manage_policies(request.user):
        return UsagePolicy.objects.all()
    return access.scope(UsagePolicy.objects.all(), request.user, "teams").distinct()


def _policy(request: HttpRequest, pk: int) -> UsagePolicy:
    return get_object_or_404(visible_policies(request).prefetch_related("teams"), pk=pk)


def _require_admin(request: HttpRequest) -> None:
    if not can_manage_policies(request.user):
        raise PermissionDenied("Only policy admins change policies.")


POLICY_CSV_HEADER = [
    "name", "teams", "period_start", "period_end", "budget_usd", "spend_usd", "percent", "remaining_usd",
    "forecast_usd", "action", "spend_figure", "forecast_figure", "billed_usd", "billed_figure", "enforced_on",
]  # fmt: skip


def by_share_used(status: budget.PolicyStatus) -> tuple[bool, bool, Decimal, str]:
    """Sort key of the policy list: spent budgets first (`exhausted`, what enforcement acts on), then
    by the share of the budget used (`PolicyStatus.share`), highest first; policies without a budget last."""
    share = status.share
    return (not status.exhausted, share is None, -(share or ZERO), status.policy.name)


@login_required
def policy_list(request: HttpRequest) -> HttpResponse:
    rows = []
    visible = visible_policies(request).prefetch_related("teams").order_by("name")
    statuses = sorted((budget.evaluate(policy) for policy in visible), key=by_share_used)
    if request.GET.get("format") == "csv":
        return csv_response("budget.csv", POLICY_CSV_HEADER, (
            [s.policy.name, ", ".join(t.name for t in s.policy.teams.all()) or "every team", s.period_start,
             s.period_end, s.budget, s.spend, s.percent, s.remaining,
             s.forecast_figure.usd if s.forecast_figure else None, s.policy.get_action_display(), s.spend_figure.label,
             s.forecast_figure.label if s.forecast_figure else "", s.billed.usd if s.billed else "",
             s.billed.figure.label if s.billed else "", s.ENFORCED_BY]
            for s in statuses
        ))  # fmt: skip
    for status in statuses:
        policy, figure = status.policy, charts.burn_down_figure(status)
        rows.append({"policy": policy, "status": status, "figure": figure, "figure_id": f"burn-{policy.pk}"})
    ctx = {"rows": rows, "can_manage": can_manage_policies(request.user), "current": "policy_list"}
    return render(request, "billing/policy_list.html", ctx)


def pushed_alone(request: HttpRequest, status: budget.PolicyStatus) -> list[tuple[str, object]]:
    """(team, pushed spend) of each team whose pushed data alone spends the budget; teams the viewer
    cannot see are named "another team" (their part of the spend is shown, not who they are)."""
    # A team's pushed part is at most the spend: only a spent budget can be spent by it alone.
    found = pushed.pushed_spend(status).alone(status.budget) if status.exhausted else []
    visible = viewer_team_ids(request)
    names = None if visible is None else set(access.visible_teams(request.user).values_list("name", flat=True))
    return [(name if names is None or name in names else "another team", amount) for name, amount in found]


def _detail_ctx(request: HttpRequest, policy: UsagePolicy, **extra: object) -> dict:
    status = budget.evaluate(policy)
    return {
        "policy": policy,
        "status": status,
        "pushed_alone": pushed_alone(request, status),
        "figure": charts.burn_down_figure(status),
        "split": policy_split.split(policy, now=status.now, team_ids=viewer_team_ids(request)),
        "channels": policy.channels.order_by("pk"),
        "deliveries": policy.deliveries.order_by("-at", "-pk")[:LOG_ROWS],
        "alerts": policy.alerts.filter(fired_at__isnull=False).order_by("-fired_at")[:LOG_ROWS],
        "actions": visible_actions(request, policy)[:LOG_ROWS],
        "can_manage": can_manage_policies(request.user),
        "show_delivery_errors": shows_delivery_errors(request),
        "current": "policy_list",
        **extra,
    }


def viewer_team_ids(request: HttpRequest) -> list[int] | None:
    """The teams whose part of a policy the user sees: every team (None) for staff and policy admins."""
    return access.visible_team_ids(request.user, all_with_perm=MANAGE_POLICIES)


def visible_actions(request: HttpRequest, policy: UsagePolicy) -> QuerySet[PolicyAction]:
    """What enforcement did to the runs the user may see: a policy shared by several teams
    must not show one team's run ids (and cancel output) to the others."""
    runs = Run.objects.for_user(request.user)
    return policy.actions.filter(run__in=runs).select_related("run").order_by("-at", "-pk")


def shows_delivery_errors(request: HttpRequest) -> bool:
    """A delivery's network error is staff's to read: shown to a team, 'connection refused' versus
    'timed out' would make the webhook form a scanner of the worker's network. Others see status."""
    return access.sees_all_teams(request.user)


def _detail_csv(request: HttpRequest, policy: UsagePolicy, table: str, show_errors: bool) -> HttpResponse:
    """The policy page's logs, whole: alerts fired, deliveries (targets already redacted), actions."""
    if table == "deliveries":
        deliveries = policy.deliveries.order_by("-at", "-pk")
        rows: list[tuple[object, ...]] = [
            (d.at, d.get_channel_kind_display(), d.target, d.get_status_display(), d.status_code, d.attempts, error)
            for d in deliveries
            for error in [d.error if show_errors else ""]
        ]
        header = ["at", "channel", "target", "status", "status_code", "attempts", "error"]
    elif table == "actions":
        rows = [
            (a.at, a.run.external_id, a.get_kind_display(), a.get_outcome_display(), a.method, a.output_tail)
            for a in visible_actions(request, policy)
        ]
        header = ["at", "run", "action", "outcome", "via", "output"]
    else:
        table = "alerts"
        rows = [
            (a.fired_at, a.get_kind_display(), a.threshold, a.spend_usd, a.forecast_usd, a.budget_usd)
            for a in policy.alerts.filter(fired_at__isnull=False).order_by("-fired_at")
        ]
        header = ["fired_at", "kind", "threshold_percent", "spend_usd", "forecast_usd", "budget_usd"]
    return csv_response(f"policy-{policy.name}-{table}.csv", header, rows)


@login_required
def policy_detail(request: HttpRequest, pk: int) -> HttpResponse:
    policy = _policy(request, pk)
    if request.GET.get("format") == "csv":
        return _detail_csv(request, policy, request.GET.get("table", "alerts"), shows_delivery_errors(request))
    ctx = _detail_ctx(request, policy, channel_form=ChannelForm() if can_manage_policies(request.user) else None)
    return render(request, "billing/policy_detail.html", ctx)


@login_required
def policy_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """Create (no pk) or edit a policy; every save that changes it stores a version."""
    policy = _policy(request, pk) if pk is not None else None
    _require_admin(request)
    form = PolicyForm(request.POST or None, instance=policy)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            saved = form.save()
            version = versions.record_version(
                saved, cast(User, request.user), note="created" if policy is None else "edited"
            )
        if version is None:
            messages.info(request, "Nothing changed.")
        else:
            messages.success(request, f"Saved {saved.name} as version {version.number}.")
        return redirect("policy_detail", pk=saved.pk)
    return render(request, "billing/policy_form.html", {"form": form, "policy": policy, "current": "policy_list"})


@login_required
def policy_versions(request: HttpRequest, pk: int) -> HttpResponse:
    policy = _policy(request, pk)
    ctx = {"policy": policy, "versions": versions.history(policy), "can_manage": can_manage_policies(request.user),
           "current": "policy_list"}  # fmt: skip
    return render(request, "billing/policy_versions.html", ctx)


# The rollback form's confirmation field: a POST without it shows the confirmation page instead.
CONFIRM = "confirm"


@login_required
@require_http_methods(["GET", "POST"])
def policy_rollback(request: HttpRequest, pk: int, number: int) -> HttpResponse:
    """GET, or a POST without `confirm`: what the rollback would change, and a button to confirm
    it (a plain form, so it works without JavaScript). A POST with `confirm` rolls back."""
    policy = _policy(request, pk)
    _require_admin(request)
    version = policy.versions.filter(number=number).first()
    if version is None:
        raise Http404("No such version.")
    if request.method != "POST" or request.POST.get(CONFIRM) != "yes":
        ctx = {"policy": policy, "version": version, "changes": versions.rollback_changes(policy, version),
               "confirm": CONFIRM, "current": "policy_list"}  # fmt: skip
        return render(request, "billing/policy_rollback.html", ctx)
    new = versions.rollback(policy, version, cast(User, request.user))
    if new is None:
        messages.info(request, f"The policy already matches version {number}.")
    else:
        messages.success(request, f"Rolled back to version {number}, saved as version {new.number}.")
    return redirect("policy_versions", pk=policy.pk)


@login_required
@require_POST
def channel_add(request: HttpRequest, pk: int) -> HttpResponse:
    """Add a channel. A signed webhook's secret is shown in this one response, never again."""
    policy = _policy(request, pk)
    _require_admin(request)
    form = ChannelForm(request.POST)
    if not form.is_valid():
        return render(
            request, "billing/policy_detail.html", _detail_ctx(request, policy, channel_form=form), status=400
        )
    channel = form.save(commit=False)
    channel.policy = policy
    channel.save()
    ctx = _detail_ctx(request, policy, channel_form=ChannelForm(), new_secret=channel.secret or None)
    return render(request, "billing/policy_detail.html", ctx)


@login_required
@require_POST
def channel_delete(request: HttpRequest, pk: int, channel_pk: int) -> HttpResponse:
    policy = _policy(request, pk)
    _require_admin(request)
    get_object_or_404(AlertChannel, pk=channel_pk, policy=policy).delete()
    messages.success(request, "Channel removed.")
    return redirect("policy_detail", pk=policy.pk)
