"""Admin for the price book and egress records: where a staff user corrects a price by hand."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.contrib import admin

from billing.models import (
    AcceleratorPrice,
    AlertChannel,
    BudgetAlert,
    Delivery,
    EgressPrice,
    EgressRecord,
    PolicyAction,
    PolicyVersion,
    UsagePolicy,
)
from billing.prices.money import format_usd


def money(field: str, description: str) -> Callable[[Any], str]:
    """A list column showing a money field as every page does (`format_usd`: "$6,254.12")."""

    @admin.display(description=description, ordering=field)
    def column(obj: object) -> str:
        value = getattr(obj, field)
        return format_usd(Decimal(value)) if value is not None else "-"

    return column


@admin.register(AcceleratorPrice)
class AcceleratorPriceAdmin(admin.ModelAdmin):
    list_display = ("accelerator_type", "region", "effective_from", "usd_per_hour", "source")
    list_filter = ("accelerator_type", "region")
    search_fields = ("accelerator_type", "region", "source")
    date_hierarchy = "effective_from"
    ordering = ("accelerator_type", "region", "-effective_from")


@admin.register(EgressPrice)
class EgressPriceAdmin(admin.ModelAdmin):
    list_display = ("source_region", "destination_region", "effective_from", "usd_per_gb", "source")
    list_filter = ("source_region", "destination_region")
    search_fields = ("source_region", "destination_region", "source")
    date_hierarchy = "effective_from"
    ordering = ("source_region", "destination_region", "-effective_from")


@admin.register(EgressRecord)
class EgressRecordAdmin(admin.ModelAdmin):
    list_display = ("ts", "run", "source_region", "destination_region", "bytes")
    list_filter = ("source_region", "destination_region")
    search_fields = ("run__external_id", "run__experiment_name")
    date_hierarchy = "ts"
    ordering = ("-ts",)
    # Run.__str__ is on every row: join it rather than one query per row; and a run picker
    # must not render a <select> of every run ever recorded.
    list_select_related = ("run",)
    raw_id_fields = ("run",)


@admin.register(UsagePolicy)
class UsagePolicyAdmin(admin.ModelAdmin):
    list_display = ("name", money("budget_usd", "budget"), "period", "action", "updated_at")
    search_fields = ("name",)
    filter_horizontal = ("teams",)


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ("policy", "number", "user", "at", "note")
    list_select_related = ("policy", "user")
    readonly_fields = ("policy", "number", "snapshot", "diff", "user", "at", "note")


@admin.register(AlertChannel)
class AlertChannelAdmin(admin.ModelAdmin):
    list_display = ("policy", "kind", "secret_prefix")
    list_select_related = ("policy",)
    # The signing secret is never shown again after creation: not even here.
    exclude = ("secret", "target")
    readonly_fields = ("policy", "kind", "secret_prefix")


@admin.register(BudgetAlert)
class BudgetAlertAdmin(admin.ModelAdmin):
    list_display = ("policy", "period_start", "kind", "threshold", money("spend_usd", "spend"), "fired_at")
    list_select_related = ("policy",)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("at", "policy", "channel_kind", "target", "status", "status_code", "attempts")
    list_select_related = ("policy",)


@admin.register(PolicyAction)
class PolicyActionAdmin(admin.ModelAdmin):
    list_display = ("at", "policy", "run", "kind", "outcome", "method")
    list_select_related = ("policy", "run")
    raw_id_fields = ("run",)
