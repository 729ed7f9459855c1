"""Failure pages: a failed run's root cause, the live log tail, search across a run's logs,
post-mortem write-ups and the failures overview.

Same rule as `runs.views`: every view scopes to `Run.objects.for_user(user)` first (analyses and
post-mortems to the user's teams on their joined run, `access.team_q`), so another team's run
(or its post-mortem) is a 404.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.text import slugify

from billing.engine import format_usd
from dashboard.kit import access
from runs.choices import PostMortemStatus
from runs.failures import detail, postmortem
from runs.failures import stats as failure_stats
from runs.failures.forms import FailureFilterForm, PostMortemForm
from runs.forms import MAX_QUERY_LENGTH
from runs.logs import MAX_LINE_CHARS, chunk_texts, display_text, highlight, iter_lines, query_pattern
from runs.models import FailureAnalysis, Node, PostMortem, Run

# Lines one tail poll returns at most; the client asks again from the last one it got.
TAIL_MAX_LINES = 1_000
# Matches one cross-log search lists at most.
SEARCH_MAX_MATCHES = 500


def _run_for(request: HttpRequest, pk: int) -> Run:
    return get_object_or_404(Run.objects.for_user(request.user).select_related("team", "user"), pk=pk)


def _analysis(run: Run) -> FailureAnalysis | None:
    return FailureAnalysis.objects.filter(run=run).first()


@login_required
def failure_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The failed run's page: root cause, timeline, log around the evidence, last minutes, cost, similar."""
    run = _run_for(request, pk)
    return render(request, "runs/failure_detail.html", detail.failure_detail_context(run, request.user))


def _node_of(run: Run, attempt: str | None, node: str | None) -> Node | None:
    """The node named by ?attempt=&node=; with neither, the latest attempt's first node (as the
    log viewer's default); None when one is missing or names no node of this run."""
    nodes = Node.objects.filter(attempt__run=run)
    if not attempt and not node:
        return nodes.order_by("-attempt__number", "index").first()
    number, index = _count(attempt), _count(node)
    if number is None or index is None:
        return None
    return nodes.filter(attempt__number=number, index=index).first()


def _count(value: str | None) -> int | None:
    """A query parameter as a non-negative int, or None: ASCII digits only ('²'.isdigit() is true
    but int() refuses it) and at most 18 of them (int() refuses 4,301; a 64-bit column, 20)."""
    if value and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


@login_required
def log_tail(request: HttpRequest, pk: int) -> JsonResponse:
    """Lines of one node's log after line `after` (complete lines only), for static/js/logtail.js.

    Only complete lines are sent, so a line still being written is never sent half and then
    skipped; `last` is the number of the last line sent (or `after` when none are new).
    """
    run = _run_for(request, pk)
    node = _node_of(run, request.GET.get("attempt"), request.GET.get("node"))
    if node is None:
        return JsonResponse({"error": "attempt and node must name a node of this run"}, status=404)
    after = _count(request.GET.get("after", "0"))
    if after is None:
        return JsonResponse({"error": "after must be a line number"}, status=400)
    lines: list[dict[str, object]] = []
    last = after
    for number, raw in enumerate(iter_lines(chunk_texts(node), partial=False), start=1):
        if number <= after:
            continue
        if len(lines) >= TAIL_MAX_LINES:
            break
        lines.append({"n": number, "text": display_text(raw)[:MAX_LINE_CHARS]})
        last = number
    response = JsonResponse(
        {"lines": lines, "last": last, "active": run.is_active, "more": len(lines) >= TAIL_MAX_LINES}
    )
    response["Cache-Control"] = "private, no-cache"
    return response


@login_required
def run_search(request: HttpRequest, pk: int) -> HttpResponse:
    """Search every node's log of every attempt of a run; matches link into the log viewer."""
    run = _run_for(request, pk)
    query = request.GET.get("q", "")[:MAX_QUERY_LENGTH].strip()
    pattern = query_pattern(query)
    groups = []
    total = 0
    capped = False
    if pattern is not None:
        attempts = run.attempts.prefetch_related("nodes").order_by("number")
        for attempt in attempts:
            for node in sorted(attempt.nodes.all(), key=lambda n: n.index):
                matches = []
                for number, raw in enumerate(iter_lines(chunk_texts(node)), start=1):
                    text = display_text(raw)
                    if not pattern.search(text):
                        continue
                    total += 1
                    if total > SEARCH_MAX_MATCHES:
                        capped = True
                        break
                    matches.append((number, highlight(text[:MAX_LINE_CHARS], pattern)))
                if matches:
                    groups.append({"attempt": attempt, "node": node, "matches": matches})
                if capped:
                    break
            if capped:
                break
    ctx = {"run": run, "query": query, "groups": groups, "total": min(total, SEARCH_MAX_MATCHES), "capped": capped}
    return render(request, "runs/failure_search.html", ctx)


# --- Post-mortems ------------------------------------------------------------------------


@login_required
def postmortem_new(request: HttpRequest, pk: int) -> HttpResponse:
    """Start a post-mortem of a run, its root cause prefilled from the classifier."""
    run = _run_for(request, pk)
    user = cast(User, request.user)  # login_required: never anonymous here
    instance = PostMortem(run=run, created_by=user, owner=user)
    if request.method == "POST":
        form = PostMortemForm(request.POST, instance=instance, team=run.team)
        if form.is_valid():
            pm = form.save()
            messages.success(request, "Post-mortem created.")
            return redirect("postmortem_detail", pk=pm.pk)
    else:
        analysis = _analysis(run)
        links = {
            "Run": request.build_absolute_uri(reverse("run_detail", args=[run.pk])),
            "Failure page": request.build_absolute_uri(reverse("failure_detail", args=[run.pk])),
            "MLflow": run.mlflow_link(),
        }
        failed_cost = failure_stats.failed_attempts_cost([run.pk]).get(run.pk)
        cost_text = format_usd(failed_cost) if failed_cost is not None else None
        initial = {
            "title": f"{run.external_id}: {analysis.title if analysis else 'failure'}",
            "root_cause": postmortem.root_cause_text(analysis),
            # The write-up drafts itself from what is stored; people edit it from there.
            "body": postmortem.draft_body(run, analysis, failed_cost=cost_text, links=links),
            "owner": user.pk if run.team.user_set.filter(pk=user.pk).exists() else None,
            "status": PostMortemStatus.DRAFT,
        }
        form = PostMortemForm(instance=instance, initial=initial, team=run.team)
    return render(request, "runs/postmortem_form.html", {"run": run, "form": form, "postmortem": None})


def _postmortem_for(request: HttpRequest, pk: int) -> PostMortem:
    visible = PostMortem.objects.filter(access.team_q(request.user, "run__team"))
    return get_object_or_404(visible.select_related("run__team", "owner"), pk=pk)


@login_required
def postmortem_edit(request: HttpRequest, pk: int) -> HttpResponse:
    pm = _postmortem_for(request, pk)
    form = PostMortemForm(request.POST or None, instance=pm, team=pm.run.team)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Post-mortem saved.")
        return redirect("postmortem_detail", pk=pm.pk)
    return render(request, "runs/postmortem_form.html", {"run": pm.run, "form": form, "postmortem": pm})


@login_required
def postmortem_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A post-mortem, its Markdown rendered sanitised; ?format=md downloads it as Markdown."""
    pm = _postmortem_for(request, pk)
    if request.GET.get("format") == "md":
        response = HttpResponse(postmortem.postmortem_markdown(pm), content_type="text/markdown; charset=utf-8")
        name = slugify(pm.title) or f"postmortem-{pm.pk}"
        response["Content-Disposition"] = f'attachment; filename="{name}.md"'
        return response
    ctx = {
        "postmortem": pm,
        "run": pm.run,
        # Sanitised by nh3 (postmortem.render_markdown): only Markdown's own tags and safe links.
        "body_html": mark_safe(postmortem.render_markdown(pm.body)),  # noqa: S308
        "root_cause_html": mark_safe(postmortem.render_markdown(pm.root_cause)),  # noqa: S308
    }
    return render(request, "runs/postmortem_detail.html", ctx)


# --- Failures overview -------------------------------------------------------------------


@login_required
def failures_overview(request: HttpRequest) -> HttpResponse:
    """Failures by class, team and week with their cost and top causes; ?format=csv exports the table."""
    form = FailureFilterForm(request.GET or None, user=request.user)
    data: dict[str, Any] = {}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
    analyses = failure_stats.failures_for(
        request.user,
        team=data["team"].pk if data.get("team") else None,
        class_id=data.get("failure_class") or "",
        start=data.get("start"),
        end=data.get("end"),
    )
    stats = failure_stats.failure_stats(analyses)
    if request.GET.get("format") == "csv":
        response = HttpResponse(failure_stats.stats_csv(stats.rows), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="failures.csv"'
        return response
    query = request.GET.copy()
    query["format"] = "csv"
    ctx = {
        "form": form,
        "stats": stats,
        "figure": failure_stats.stacked_figure(stats.rows),
        "csv_query": query.urlencode(),
        "recent": _with_postmortems(list(analyses[:20])),
    }
    return render(request, "runs/failure_overview.html", ctx)


def _with_postmortems(analyses: list[FailureAnalysis]) -> list[FailureAnalysis]:
    """Set `.postmortem` on each verdict: its run's newest post-mortem, or None (one query)."""
    newest: dict[int, PostMortem] = {}
    for pm in PostMortem.objects.filter(run__in=[a.run_id for a in analyses]).order_by("run_id", "-created_at"):
        newest.setdefault(pm.run_id, pm)
    for analysis in analyses:
        analysis.postmortem = newest.get(analysis.run_id)
    return analyses


# Post-mortems one index page lists at most (newest first).
POSTMORTEM_INDEX_LIMIT = 200


@login_required
def postmortem_index(request: HttpRequest) -> HttpResponse:
    """Every post-mortem of the runs the user may see, newest first, with its run's verdict."""
    status = request.GET.get("status", "")
    pms = PostMortem.objects.filter(access.team_q(request.user, "run__team"))
    if status in PostMortemStatus.values:
        pms = pms.filter(status=status)
    pms = pms.select_related("run__team", "owner", "run__failure").order_by("-updated_at", "-pk")
    ctx = {
        "postmortems": list(pms[:POSTMORTEM_INDEX_LIMIT]),
        "limit": POSTMORTEM_INDEX_LIMIT,
        "status": status,
        "statuses": PostMortemStatus.choices,
    }
    return render(request, "runs/postmortem_index.html", ctx)
