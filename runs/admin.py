"""Admin for runs and their telemetry.

Telemetry tables hold millions of rows: every foreign key is a raw id field (no <select> of
every run), list pages select their related rows in the same query, and the big tables get
no date hierarchy or count-heavy filters that would scan them.
"""

from __future__ import annotations

from django.contrib import admin
from django.db import models

from runs.models import Attempt, GpuMinute, GpuSample, IngestBatch, LogChunk, MetricPoint, Node, Run


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    fields = ("number", "status", "started_at", "ended_at", "exit_code", "mlflow_run_id", "state_message")
    show_change_link = True


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ("index", "host", "status", "started_at", "ended_at", "exit_code")
    show_change_link = True


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "external_id",
        "status",
        "team",
        "creator",
        "experiment_name",
        "accelerator_type",
        "num_accelerators",
        "region",
        "submitted_at",
        "is_demo",
    )
    list_filter = ("status", "source", "accelerator_type", "region", "team", "is_demo")
    search_fields = ("external_id", "experiment_name", "creator", "mlflow_run_id")
    list_select_related = ("team",)
    raw_id_fields = ("user",)
    date_hierarchy = "submitted_at"
    readonly_fields = ("created_at", "updated_at")
    inlines = [AttemptInline]
    # MLflow and run-page links are https; without this Django 5.x warns and prefixes http://.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = ("__str__", "number", "status", "started_at", "ended_at", "exit_code")
    list_filter = ("status",)
    search_fields = ("run__external_id", "mlflow_run_id")
    list_select_related = ("run",)
    raw_id_fields = ("run",)
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("__str__", "index", "host", "status", "exit_code")
    list_filter = ("status",)
    search_fields = ("host", "attempt__run__external_id")
    list_select_related = ("attempt__run",)
    raw_id_fields = ("attempt",)


@admin.register(LogChunk)
class LogChunkAdmin(admin.ModelAdmin):
    list_display = ("__str__", "seq", "line_count", "received_at")
    search_fields = ("node__attempt__run__external_id",)
    list_select_related = ("node__attempt__run",)
    raw_id_fields = ("node",)
    readonly_fields = ("received_at",)


@admin.register(GpuSample)
class GpuSampleAdmin(admin.ModelAdmin):
    list_display = ("run", "node", "gpu_index", "ts", "utilization_gpu", "memory_used_bytes", "power_watts", "source")
    list_filter = ("source",)
    search_fields = ("run__external_id",)
    list_select_related = ("run", "node__attempt__run")
    raw_id_fields = ("run", "node")
    # The changelist's COUNT(*) over millions of samples is slow; show "N of many" instead.
    show_full_result_count = False


@admin.register(GpuMinute)
class GpuMinuteAdmin(admin.ModelAdmin):
    list_display = ("run", "node", "gpu_index", "minute", "samples", "utilization_gpu_avg", "utilization_gpu_max")
    search_fields = ("run__external_id",)
    list_select_related = ("run", "node__attempt__run")
    raw_id_fields = ("run", "node")
    show_full_result_count = False


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ("run", "key", "step", "ts", "value")
    search_fields = ("run__external_id", "key")
    list_select_related = ("run",)
    raw_id_fields = ("run",)
    show_full_result_count = False


@admin.register(IngestBatch)
class IngestBatchAdmin(admin.ModelAdmin):
    list_display = (
        "pk",
        "team",
        "kind",
        "status",
        "row_count",
        "inserted",
        "duplicates",
        "received_at",
        "processed_at",
    )
    list_filter = ("status", "kind", "team")
    search_fields = ("content_hash",)
    list_select_related = ("team",)
    raw_id_fields = ("team",)
    readonly_fields = ("received_at",)
