"""Cost pages (`/costs/`) and price book pages (`/costs/prices/`).

Cost pages read the daily rollups scoped to the user's teams (staff: all), so another team's
spend never reaches a sum. Every table downloads as CSV with `?format=csv&table=NAME`.
Price pages: everyone logged in reads; billing admins (`can_edit_prices`) edit, upload.
"""

from __future__ import annotations

import io
from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from billing import engine
from billing.choices import GroupBy
from billing.costs import charts, reports, spend
from billing.forms import PRICE_FORMS, CostFilterForm, PriceUploadForm, can_edit_prices
from billing.models import AcceleratorPrice, EgressPrice, InstancePrice, PriceChange, UsagePolicy
from billing.policies.budget import period_bounds
from billing.prices import history
from billing.prices.money import estimate
from billing.prices.pricebook import export_price_csv, load_price_csv
from billing.reconcile import matching as reconcile
from dashboard.kit import access
from dashboard.kit.csv_export import csv_response

# Rows in the "top" tables; the CSV download has them all.
TOP = 20
MAX_UPLOAD_BYTES = 1_048_576


AMOUNT_HEADER = ["compute_usd", "egress_usd", "idle_usd", "total_usd", "gpu_hours", "idle_gpu_hours", "figure"]


def _amounts(row: dict, figure: str) -> list[object]:
    """A row's amounts and what they are (the export's label: estimated or a lower bound, as of when)."""
    return [*(row[name] for name in AMOUNT_HEADER[:-1]), figure]


def _billed_cells(flow: dict) -> list[object]:
    """An egress flow's billed quantity, unit and USD for the CSV ('' when the route was not billed)."""
    routes = flow["billed"]
    if not routes:
        return ["", "", ""]
    quantities = "; ".join(reports.decimal_str(r.quantity) for r in routes)
    return [quantities, "; ".join(r.usage_unit for r in routes), flow["billed_usd"]]


@login_required
def cost_overview(request: HttpRequest) -> HttpResponse:
    teams = access.visible_teams(request.user)
    form = CostFilterForm(request.GET or None, teams=teams)
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    start, end = form.range()
    group_by = data.get("group_by") or GroupBy.TEAM
    team_ids = [t.pk for t in teams]
    filters = reports.CostFilters(
        start, end,
        team_id=data["team"].pk if data.get("team") else None,
        accelerator_type=data.get("accelerator", ""),
        region=data.get("region", ""),
        usage_policy_name=data.get("policy", ""),
    )  # fmt: skip
    rows = reports.cost_rows(team_ids, filters)
    now = timezone.now()
    # Running runs' spend since the last rollup pass, computed once for every table here.
    accrued = spend.accrual(team_ids, now)
    extra = reports.accrual_for(accrued, team_ids, filters)
    group_field = reports.GROUP_FIELDS[GroupBy(group_by)]
    by_group = reports.grouped(reports.rows_for(team_ids, filters, group_by), group_by, extra)
    experiments = reports.grouped(rows, GroupBy.EXPERIMENT_NAME, extra)
    creators = reports.grouped(rows, GroupBy.CREATOR, extra)
    daily = reports.sum_by(reports.rows_for(team_ids, filters, group_by), ["day", group_field], extra)
    # The derived estimate per route, the billed NETWORKING rows beside it (as the run page shows them).
    flows = reconcile.flows_with_billed(
        reports.egress_flows(team_ids, filters), reconcile.billed_egress(team_ids, filters)
    )
    idle = sorted((r for r in experiments if r["idle_usd"] > 0), key=lambda r: -r["idle_usd"])

    total = reports.totals(reports.rows_for(team_ids, filters), extra)
    total_figure = estimate(total["total_usd"], now, reports.unpriced_reasons(rows, extra))
    label = total_figure.label
    table = request.GET.get("table", "")
    if request.GET.get("format") == "csv":
        stamp = f"{start}_{end}"
        if table == "experiments":
            return csv_response(f"costs-experiments-{stamp}.csv", ["experiment_name", *AMOUNT_HEADER],
                                ([r["key"], *_amounts(r, label)] for r in experiments))  # fmt: skip
        if table == "users":
            return csv_response(f"costs-users-{stamp}.csv", ["creator", *AMOUNT_HEADER],
                                ([r["key"], *_amounts(r, label)] for r in creators))  # fmt: skip
        if table == "idle":
            return csv_response(f"costs-idle-{stamp}.csv", ["experiment_name", "idle_usd", "idle_gpu_hours"],
                                ([r["key"], r["idle_usd"], r["idle_gpu_hours"]] for r in idle))  # fmt: skip
        if table == "egress":
            # `unpriced`: the page's "(no price)"; a 0 alone would read as free. `billed_*`: the
            # route's NETWORKING usage rows (blank when none), one quantity per unit.
            header = ["source_region", "destination_region", "bytes", "estimated_bytes", "usd", "unpriced"]
            billed_header = ["billed_quantity", "billed_unit", "billed_usd"]
            return csv_response(
                f"costs-egress-{stamp}.csv",
                [*header, *billed_header],
                ([*(f[name] for name in header), *_billed_cells(f)] for f in flows),
            )
        if table == "daily":
            ordered = sorted(daily, key=lambda r: r["day"])
            return csv_response(f"costs-daily-{stamp}.csv", ["day", group_by, *AMOUNT_HEADER],
                                ([r["day"], r[group_field], *_amounts(r, label)] for r in ordered))  # fmt: skip
        return csv_response(f"costs-by-{group_by}-{stamp}.csv", [group_by, *AMOUNT_HEADER],
                            ([r["key"], *_amounts(r, label)] for r in by_group))  # fmt: skip

    # Month to date under every filter of the page; a policy's own period when one is chosen,
    # so the figure is the policy page's (for a viewer who sees every team the policy covers).
    policy = UsagePolicy.objects.filter(name=filters.usage_policy_name).first() if filters.usage_policy_name else None
    period = period_bounds(policy, now.date()) if policy is not None else None
    mtd = reports.month_to_date(team_ids, now, accrued, filters, period)
    mtd_filters = reports.CostFilters(
        mtd.month, now.date(), filters.team_id, filters.accelerator_type, filters.region, filters.usage_policy_name
    )
    ctx = {
        "form": form,
        "start": start,
        "end": end,
        "group_by": group_by,
        "group_label": GroupBy(group_by).label,
        "by_group": by_group,
        "experiments": experiments[:TOP],
        "creators": creators[:TOP],
        "idle": idle[:TOP],
        "flows": flows,
        "total": total,
        "egress_share": (total["egress_usd"] / total["total_usd"] * 100) if total["total_usd"] else None,
        "mtd": mtd,
        "mtd_policy": policy,
        "mtd_billed": engine.billed_between(team_ids, mtd_filters, now),
        "total_figure": total_figure,
        "total_billed": engine.billed_between(team_ids, filters, now),
        "min_forecast_days": reports.MIN_FORECAST_DAYS,
        "spend_figure": charts.spend_over_time_figure(
            [{"day": r["day"], "group": r[group_field], "total_usd": r["total_usd"]} for r in daily],
            GroupBy(group_by).label,
        ),
        "egress_figure": charts.egress_sankey_figure(flows),
        "query": request.GET.urlencode(),
    }
    return render(request, "billing/costs.html", ctx)


# --- Price book -------------------------------------------------------------------------

PRICE_MODELS = {"accelerator": AcceleratorPrice, "instance": InstancePrice, "egress": EgressPrice}


@login_required
def price_list(request: HttpRequest) -> HttpResponse:
    ctx = {
        "accelerator_prices": AcceleratorPrice.objects.order_by(
            "accelerator_type", "region", "kind", "-effective_from"
        ),
        "instance_prices": InstancePrice.objects.order_by("instance_type", "region", "-effective_from"),
        "egress_prices": EgressPrice.objects.order_by("source_region", "destination_region", "-effective_from"),
        "can_edit": can_edit_prices(request.user),
        "recent": PriceChange.objects.select_related("user")[:10],
    }
    return render(request, "billing/prices.html", ctx)


def _require_editor(request: HttpRequest) -> None:
    if not can_edit_prices(request.user):
        raise PermissionDenied("Only billing admins can change the price book.")


@login_required
def price_edit(request: HttpRequest, kind: str, pk: int | None = None) -> HttpResponse:
    if kind not in PRICE_FORMS:
        raise Http404("No such kind of price.")
    _require_editor(request)
    instance = get_object_or_404(PRICE_MODELS[kind], pk=pk) if pk else None
    before = history.snapshot(instance) if instance else None
    form = PRICE_FORMS[kind](request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                price = form.save()
                history.record(price, before, cast(User, request.user), note="price book page")
        except IntegrityError:
            form.add_error(None, "A price with the same key and effective_from already exists.")
        else:
            messages.success(request, f"Saved: {price}.")
            return redirect("price_list")
    changes = (
        PriceChange.objects.filter(model=PRICE_MODELS[kind].__name__, object_id=pk).select_related("user") if pk else []
    )
    ctx = {"form": form, "kind": kind, "instance": instance, "changes": history.grouped(changes)}
    return render(request, "billing/price_form.html", ctx)


@login_required
def price_upload(request: HttpRequest) -> HttpResponse:
    _require_editor(request)
    form = PriceUploadForm(request.POST or None, request.FILES or None)
    result = None
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        if upload.size > MAX_UPLOAD_BYTES:
            form.add_error("file", "The file is larger than 1 MB; a price book is tens of rows.")
        else:
            try:
                text = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                form.add_error("file", "The file is not UTF-8 text.")
            else:
                result = load_price_csv(
                    io.StringIO(text, newline=""), replace=form.cleaned_data["replace"],
                    dry_run=form.cleaned_data["dry_run"], user=cast(User, request.user),
                    note=f"CSV upload {upload.name}"[:200],
                )  # fmt: skip
                if result.ok and not form.cleaned_data["dry_run"]:
                    messages.success(
                        request, f"{result.added} added, {result.updated} updated, {result.unchanged} unchanged."
                    )
                    return redirect("price_list")
    return render(request, "billing/price_upload.html", {"form": form, "result": result})


@login_required
def price_export(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="prices-{timezone.now():%Y-%m-%d}.csv"'
    export_price_csv(response)
    return response


@login_required
def price_history(request: HttpRequest) -> HttpResponse:
    changes = PriceChange.objects.select_related("user")
    if request.GET.get("format") == "csv":
        header = ["at", "user", "model", "object_id", "field", "old", "new", "note"]
        rows = ([c.at, c.user.get_username() if c.user else "", c.model, c.object_id, c.field, c.old, c.new, c.note]
                for c in changes.iterator(chunk_size=2000))  # fmt: skip
        return csv_response(f"price-history-{timezone.now():%Y-%m-%d}.csv", header, rows)
    page = Paginator(changes, 100).get_page(request.GET.get("page"))
    # A page holds 100 field changes; the saves among them read as one row each.
    return render(request, "billing/price_history.html", {"page": page, "edits": history.grouped(page.object_list)})
