"""Admin for the price book and egress records: where a staff user corrects a price by hand."""

from __future__ import annotations

from django.contrib import admin

from billing.models import AcceleratorPrice, EgressPrice, EgressRecord


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
