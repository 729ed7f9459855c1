"""Price book pages (`/costs/prices/`): everyone logged in reads; billing admins
(`can_edit_prices`) edit and upload. Every change is recorded (`billing.prices.history`).
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

from billing.models import AcceleratorPrice, EgressPrice, InstancePrice, PriceChange
from billing.prices import history
from billing.prices.forms import PRICE_FORMS, PriceUploadForm, can_edit_prices
from billing.prices.pricebook import export_price_csv, load_price_csv
from dashboard.kit.csv_export import csv_response

MAX_UPLOAD_BYTES = 1_048_576

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
