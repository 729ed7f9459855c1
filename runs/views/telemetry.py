"""The run page's JSON endpoints: its GPU panels' figures (telemetry.json) and its polled status.

Every view scopes to `Run.objects.for_user(user)` first (the rule in `runs.views`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from dashboard.kit.figures import escaped
from dashboard.kit.schemas import EARLIEST, LATEST
from runs import compare, glance
from runs.models import Run
from runs.telemetry import charts, envelope

# Node indexes a request may name; a real run has a few hundred nodes at most.
MAX_NODE_INDEX = 1_000_000


def _instant(value: str | None) -> datetime | None:
    """An ISO time from a query string (naive = UTC), or None when absent; ValueError when malformed."""
    if not value:
        return None
    parsed = parse_datetime(value.replace(" ", "T").replace("Z", "+00:00"))
    if parsed is None:
        raise ValueError(value)
    parsed = parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)
    # The API's window for times: at year 1 or 9999 the chart's bucket arithmetic overflows.
    if not EARLIEST <= parsed < LATEST:
        raise ValueError(value)
    return parsed


# The views telemetry.json draws: every GPU folded into a mean with its min-max band, or one trace per GPU.
TELEMETRY_VIEWS = ("envelope", "gpus")


def _telemetry_request(request: HttpRequest, run: Run) -> dict | JsonResponse:
    """The checked parameters of a telemetry.json request, or the 400 naming what is wrong."""
    listed = request.GET.get("fields")
    legacy = listed is None  # ?field= alone: one per-GPU figure, as the page's first zoom asked
    fields = [request.GET.get("field", "utilization_gpu")] if legacy else [f for f in (listed or "").split(",") if f]
    unknown = [f[:40] for f in fields if f not in charts.ROLLUP_FIELDS]
    if unknown or not fields or len(fields) > len(charts.ROLLUP_FIELDS):
        name = "fields" if not legacy else "field"
        return JsonResponse({"error": f"{name} must be one of {', '.join(charts.ROLLUP_FIELDS)}"}, status=400)
    view = request.GET.get("view") or ("gpus" if legacy else "envelope")
    if view not in TELEMETRY_VIEWS:
        return JsonResponse({"error": f"view must be one of {', '.join(TELEMETRY_VIEWS)}"}, status=400)
    raw_width = request.GET.get("width", "")
    if raw_width and not (raw_width.isdigit() and len(raw_width) <= 6):
        return JsonResponse({"error": "width must be the panel's width in pixels, a whole number"}, status=400)
    width = envelope.clamp_width(int(raw_width)) if raw_width else envelope.DEFAULT_WIDTH
    try:
        start, end = _instant(request.GET.get("from")), _instant(request.GET.get("to"))
    except ValueError:
        return JsonResponse({"error": "from and to must be ISO 8601 times"}, status=400)
    if start and end and end <= start:
        return JsonResponse({"error": "to must be after from"}, status=400)
    picked = request.GET.get("range", "")
    if picked and picked != "all" and picked not in glance.RANGES:
        return JsonResponse({"error": f"range must be one of {', '.join(glance.RANGES)}, all"}, status=400)
    if start is None and end is None and picked in glance.RANGES:
        start, end = glance.time_range(run, picked)
    names = charts.series_names(run)
    node, node_ids = None, None
    wanted = request.GET.get("gpu_node", "")
    wanted_index = compare.small_number(wanted, MAX_NODE_INDEX)
    if wanted not in ("", "all"):
        node_ids = charts.node_pks(names, wanted_index) if wanted_index is not None else []
        if not node_ids:
            return JsonResponse({"error": "gpu_node must be one of this run's node indexes, or all"}, status=400)
        node = wanted_index
    return {"fields": fields, "legacy": legacy, "view": view, "width": width, "start": start, "end": end,
            "names": names, "node": node, "node_ids": node_ids}  # fmt: skip


@login_required
def run_telemetry(request: HttpRequest, pk: int) -> JsonResponse:
    """GPU panels of a run as figures for [from, to] (or ?range=): the run page draws each from here.

    ?fields=a,b,c answers {"panels": [{field, tier, figure}]}, every field read in one pass
    (runs/telemetry/envelope.py: at most ?width= buckets, the mean in its min-max band across
    GPUs, the worst GPU named); ?view=gpus draws one trace per GPU instead. ?field= alone
    answers one per-GPU figure as {field, tier, figure}, as before. A narrower window reads a
    finer tier (raw below ~33 minutes), so zooming shows real samples.
    """
    run = get_object_or_404(Run.objects.for_user(request.user), pk=pk)
    asked = _telemetry_request(request, run)
    if isinstance(asked, JsonResponse):
        return asked
    fields, node, node_ids, names = asked["fields"], asked["node"], asked["node_ids"], asked["names"]
    start, end, width = asked["start"], asked["end"], asked["width"]
    panels = []
    if asked["view"] == "envelope":
        envelopes = envelope.read_envelopes(run, fields, start, end, width, node_ids=node_ids, names=names)
        for field in fields:
            found = envelopes.get(field)
            figure = envelope.envelope_figure(found, node) if found else None
            panels.append((field, found.tier if found else None, figure))
    else:
        # One count of the GPUs in scope for every field: each panel shares PANEL_POINTS among them.
        gpus = charts.gpus_in_scope(run, end, node_ids)
        for field in fields:
            series = charts.gpu_series(run, field, start, end, 2 * width, node_ids=node_ids, names=names,
                                       panel_points=charts.PANEL_POINTS, gpus=gpus)  # fmt: skip
            figure = charts.gpu_figure(field, series)
            if figure is not None:
                figure["layout"]["meta"]["view"] = "gpus"
                if node is not None:
                    figure["layout"]["meta"]["node"] = node  # the next zoom asks for the same node
            panels.append((field, series[0].tier if series else None, figure))
    if not asked["legacy"] and any(figure is not None for _, _, figure in panels):
        events = charts.gpu_events(run, node_ids)
        limit = charts.power_limit(run) if "power_watts" in fields else None
        for field, _, figure in panels:
            if field == "power_watts":
                charts.with_limit(figure, limit, "limit")
            if field not in ("memory_used_bytes",):
                charts.with_events(figure, events)
    if asked["legacy"]:
        field, tier, figure = panels[0]
        return JsonResponse({"field": field, "tier": tier, "figure": escaped(figure)})
    answer: dict = {"panels": [{"field": f, "tier": t, "figure": escaped(fig)} for f, t, fig in panels]}
    if request.GET.get("signals") == "1":
        # After a node switch the page's signals line names that node's (one aggregate).
        signals = charts.RunPanels(None, None, [], charts.signals_present(run, node_ids))
        answer["signals_html"] = render_to_string("runs/_signals.html", {"signals": signals, "gpu_node": node})
    return JsonResponse(answer)


@login_required
def run_status(request: HttpRequest, pk: int) -> JsonResponse:
    """A run's status, small enough to poll: static/js/live.js asks every 5 s while it is active.

    One indexed row read; no caching, since the point is to see a change within seconds.
    """
    run = get_object_or_404(
        Run.objects.for_user(request.user).only("pk", "external_id", "status", "started_at", "ended_at", "updated_at"),
        pk=pk,
    )
    response = JsonResponse(
        {
            "id": run.pk,
            "external_id": run.external_id,
            "status": run.status,
            "status_label": run.get_status_display(),
            "active": run.is_active,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "ended_at": run.ended_at.isoformat() if run.ended_at else None,
            "updated_at": run.updated_at.isoformat(),
        }
    )
    response["Cache-Control"] = "private, no-cache"
    return response
