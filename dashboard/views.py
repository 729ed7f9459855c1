"""The overview page and the login page."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from billing.engine import TeamSpend, team_months
from dashboard import taskstate
from dashboard.demo.constants import DEMO_USERNAME, demo_password, is_embedded_default
from dashboard.kit import access, ratelimit
from dashboard.kit.csv_export import csv_response
from dashboard.kit.redaction import redact
from runs import glance
from runs.choices import RunOrigin, RunSource, RunStatus
from runs.models import CollectorState, MlflowRun, Run
from runs.telemetry.stalls import run_stalls

# How far back the overview's failure panel looks.
FAILURE_WINDOW = timedelta(days=7)
# Rows listed in each overview panel; the run list has the rest.
PANEL_ROWS = 10
# Running runs checked for stalled GPUs on the overview, newest first.
STALL_RUNS = 50
# The overview's tables as CSV (?format=csv&table=NAME): every row, not one panel of them.
RUN_CSV_HEADER = [
    "external_id", "team", "experiment_name", "status", "accelerator_type", "num_accelerators", "region",
    "submitted_at", "started_at", "ended_at", "state_message",
]  # fmt: skip
SPEND_CSV_HEADER = ["team", "gpu_hours", "usd", "compute_usd", "egress_usd", "figure", "billed_usd", "billed_figure"]


def _run_csv_rows(runs: QuerySet[Run]) -> Iterator[list[object]]:
    for r in runs:
        yield [r.external_id, r.team.name, r.experiment_name, r.status, r.accelerator_type, r.num_accelerators,
               r.region, r.submitted_at, r.started_at, r.ended_at, r.state_message]  # fmt: skip


def _overview_csv(
    table: str, active: QuerySet[Run], failures: QuerySet[Run], team_spend: list[TeamSpend]
) -> HttpResponse:
    """One of the overview's tables (`table=active|failures|spend`) in full."""
    stamp = f"{timezone.now():%Y-%m-%d}"
    if table == "failures":
        ordered = failures.order_by("-ended_at", "-submitted_at")
        return csv_response(f"failures-{stamp}.csv", RUN_CSV_HEADER, _run_csv_rows(ordered))
    if table == "spend":
        rows = (
            [m.team_name, m.gpu_hours, m.usd, m.compute_usd, m.egress_usd, m.figure.label,
             row.billed.usd if row.billed else "", row.billed.figure.label if row.billed else ""]
            for row in team_spend
            for m in [row.month]
        )  # fmt: skip
        return csv_response(f"spend-by-team-{stamp}.csv", SPEND_CSV_HEADER, rows)
    return csv_response(f"active-runs-{stamp}.csv", RUN_CSV_HEADER, _run_csv_rows(active))


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    runs = Run.objects.for_user(request.user).select_related("team")
    active = runs.active().order_by("-submitted_at")
    since = now - FAILURE_WINDOW
    # A failure counts when it ended in the window; one with no end time yet, when submitted in it.
    failures = runs.filter(status__in=RunStatus.failed()).filter(
        Q(ended_at__gte=since) | Q(ended_at__isnull=True, submitted_at__gte=since)
    )
    team_ids = list(access.visible_teams(request.user).values_list("pk", flat=True))
    if request.GET.get("format") == "csv":
        table = request.GET.get("table", "")
        spend = team_months(team_ids, now=now) if team_ids and table == "spend" else []
        return _overview_csv(table, active, failures, spend)

    ctx = {
        "active_runs": glance.attach(active[:PANEL_ROWS], now=now),
        "active_count": active.count(),
        "failures": failures.order_by("-ended_at", "-submitted_at")[:PANEL_ROWS],
        "failure_count": failures.count(),
        "failure_days": FAILURE_WINDOW.days,
        "team_spend": team_months(team_ids, now=now) if team_ids else [],
        "has_teams": bool(team_ids),
        "has_runs": runs.exists(),
        "month": now,
        "stale_collectors": shown_errors(
            (c for c in CollectorState.objects.all() if c.is_stale), access.sees_all_teams(request.user)
        ),
        # Stalled / process-less GPUs of running runs (runs/telemetry/stalls.py): one sample query per run.
        "stalls": run_stalls(active.filter(status=RunStatus.RUNNING)[:STALL_RUNS]),
    }
    return render(request, "dashboard/overview.html", ctx)


# What a team member sees of a collector's error: its text can name any team's runs (a log
# fetch of another team's run failed), so only staff read it; members see that and when.
MEMBER_ERROR = "failed (the error is shown to staff)"


def shown_errors(states: Iterable[CollectorState], is_staff: bool) -> list[CollectorState]:
    """The states with `shown_error` set: the (already redacted) text for staff, a fixed line otherwise.

    Refusals and skipped items likewise: their count and names are staff's only. Refusals count
    rows naming another team's run, so a member who watched the count move could learn which
    run ids exist in other teams (issue 33); skipped items are named by path and run id.
    """
    out = list(states)
    for state in out:
        # Redacted again on the way out: errors stored before the redactor existed are covered too.
        state.shown_error = (redact(state.last_error) if is_staff else MEMBER_ERROR) if state.last_error else ""
        state.shown_refused = state.refused_total if is_staff else None
        state.shown_refusal = redact(state.last_refusal) if is_staff else ""
    return out


def runs_without_region() -> int:
    """Runs of the Databricks run source that have no region while AIRBOARD_DATABRICKS_REGION is unset (0 when set).

    Such a run cannot be priced (accelerator and instance prices are per region): the
    collectors page names the setting. Counted up to 1,000 (a notice, not a report).
    """
    if settings.AIRBOARD_DATABRICKS_REGION:
        return 0
    found = Run.objects.filter(origin=RunOrigin.COLLECTOR, region="").exclude(source=RunSource.LOCAL)
    return len(found.values_list("pk", flat=True)[:1000])


@login_required
def collectors(request: HttpRequest) -> HttpResponse:
    """Collector health for everyone; MLflow runs not linked to any run only for staff (they carry no team)."""
    is_staff = access.sees_all_teams(request.user)
    states = shown_errors(CollectorState.objects.all(), is_staff)
    if request.GET.get("format") == "csv":
        header = ["name", "kind", "stale", "last_success_at", "items_last_run", "items_total", "refused_total",
                  "last_error_at", "last_error"]  # fmt: skip
        rows = ([c.name, c.kind, c.is_stale, c.last_success_at, c.items_last_run, c.items_total, c.shown_refused,
                 c.last_error_at, c.shown_error] for c in states)  # fmt: skip
        return csv_response(f"collectors-{timezone.now():%Y-%m-%d}.csv", header, rows)
    ctx = {
        "collectors": states,
        "tasks": taskstate.task_rows(),
        "is_staff": is_staff,
        "unlinked": MlflowRun.objects.filter(run__isnull=True).order_by("-start_time")[:200] if is_staff else None,
        "unlinked_count": MlflowRun.objects.filter(run__isnull=True).count() if is_staff else 0,
        "runs_without_region": runs_without_region(),
    }
    return render(request, "dashboard/collectors.html", ctx)


def per_address_login_limit(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """At most AIRBOARD_LOGIN_FAILURES_PER_IP failed logins from one address, any username.

    One counter for every login form: the site's and the admin's (`admin/login/` had none, so
    a spray moved there; issue 33). A POST whose form comes back (200) failed; a success redirects.
    """

    @functools.wraps(view)
    def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        ip = ratelimit.client_ip(request, settings.AIRBOARD_TRUSTED_PROXIES)
        per_ip = ratelimit.Limit(settings.AIRBOARD_LOGIN_FAILURES_PER_IP, settings.AIRBOARD_LOGIN_WINDOW_SECONDS)
        decision = ratelimit.peek("login-ip", ip, per_ip)
        if not decision.allowed:
            response = HttpResponse(
                f"Too many failed logins; try again in {decision.retry_after} seconds.",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(decision.retry_after)
            return response
        response = view(request, *args, **kwargs)
        if response.status_code == 200:
            ratelimit.hit("login-ip", ip, per_ip)
        return response

    return limited


class LoginView(auth_views.LoginView):
    """Django's login, plus the demo credentials while demo data exists on the embedded default.

    Lockout: django-axes (settings AXES_*, dashboard/kit/security.py) counts failures per username
    and address in the database, on every login form, the admin's included; after
    AIRBOARD_LOGIN_FAILURES in the window the form answers 429 with Retry-After, without
    checking the password. Keyed by username and address together so that a stranger cannot
    lock a user out from elsewhere by guessing wrong on purpose. Here, on top: at most
    AIRBOARD_LOGIN_FAILURES_PER_IP failures from one address for any username (spraying),
    counted in Django's cache (Redis when REDIS_URL is set).
    """

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return per_address_login_limit(super().post)(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        # Only the embedded default shows it: a team deployment (DATABASE_URL) never prints a
        # password on a page every stranger can load, even if someone seeded the demo there.
        ctx["demo_login"] = is_embedded_default() and Run.objects.filter(is_demo=True).exists()
        if ctx["demo_login"]:
            ctx["demo_username"] = DEMO_USERNAME
            ctx["demo_password"] = demo_password()
        return ctx


login_view = LoginView.as_view()
