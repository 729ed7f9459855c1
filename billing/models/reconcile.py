"""Billed usage as the provider reports it, and its list prices."""

from __future__ import annotations

from django.db import models

from billing.choices import (
    RecordType,
)
from billing.fields import ExactDecimalField
from runs.models import Cluster, Run

# --- Reconciliation with the provider's bill (billing/reconcile/) ---------------------------------------


class BillingListPrice(models.Model):
    """A row of Databricks `system.billing.list_prices`: a SKU's default price per unit, in force."""

    sku_name = models.CharField(max_length=200)
    price_start_time = models.DateTimeField()
    price_end_time = models.DateTimeField(null=True, blank=True, help_text="Blank: still in force.")
    currency_code = models.CharField(max_length=8, default="USD")
    usage_unit = models.CharField(max_length=64, blank=True)
    price_per_unit = ExactDecimalField(help_text="pricing.default: the list price per usage unit.")

    class Meta:
        ordering = ["sku_name", "price_start_time"]
        constraints = [
            # A re-imported list price is a no-op; usage is priced by (sku, start) lookups.
            models.UniqueConstraint(
                fields=["sku_name", "currency_code", "price_start_time"],
                name="billinglistprice_natural_key",
                violation_error_message="A list price for this SKU already starts at that time.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sku_name} {self.price_per_unit} {self.currency_code}/{self.usage_unit}"


class BilledUsage(models.Model):
    """One billed usage record (`system.billing.usage`), linked to a run by its job_run_id."""

    record_id = models.CharField(max_length=200, help_text="The provider's record_id, or a hash of the row.")
    sku_name = models.CharField(max_length=200)
    usage_start_time = models.DateTimeField()
    usage_end_time = models.DateTimeField()
    usage_date = models.DateField()
    usage_quantity = ExactDecimalField()
    usage_unit = models.CharField(max_length=64, blank=True)
    usage_metadata = models.JSONField(default=dict, blank=True)
    custom_tags = models.JSONField(default=dict, blank=True)
    job_run_id = models.CharField(max_length=200, blank=True)
    billing_origin_product = models.CharField(max_length=64, blank=True, help_text="AI_RUNTIME, JOBS, NETWORKING...")
    record_type = models.CharField(max_length=16, choices=RecordType.choices, default=RecordType.ORIGINAL)
    usage_type = models.CharField(max_length=64, blank=True, help_text="e.g. GPU_TIME, COMPUTE_TIME, NETWORK_BYTE.")
    product_features = models.JSONField(default=dict, blank=True)
    ai_runtime_workload_id = models.CharField(max_length=200, blank=True)
    ai_runtime_pool_id = models.CharField(max_length=200, blank=True, help_text="A reserved pool's usage.")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="billed_usage")
    # `usage_metadata.cluster_id`: the classic cluster (all-purpose or job) the usage ran on.
    databricks_cluster_id = models.CharField(max_length=200, blank=True)
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.SET_NULL, related_name="billed_usage")
    price_per_unit = ExactDecimalField(null=True, blank=True, help_text="Blank: no list price in force.")
    billed_usd = ExactDecimalField(null=True, blank=True, help_text="usage_quantity x price_per_unit.")
    imported_at = models.DateTimeField()

    class Meta:
        ordering = ["usage_date", "record_id"]
        constraints = [
            # Idempotent import: a re-sent record is ignored (bulk insert with ignore_conflicts).
            models.UniqueConstraint(fields=["record_id"], name="billedusage_record_id_unique"),
        ]
        indexes = [
            # Reconciliation per day: billed usage in a date range.
            models.Index(fields=["usage_date"], name="billedusage_date_idx"),
            # Per-run billed figure (billed_for_run) and re-linking rows whose run arrived later.
            models.Index(fields=["job_run_id"], name="billedusage_job_run_idx"),
            # Splitting a reserved pool's rows over the runs that ran on it (reconcile.pool_shares).
            models.Index(fields=["ai_runtime_pool_id"], name="billedusage_pool_idx"),
            # Linking rows to their cluster once it is stored (reconcile.refresh_links_and_prices).
            models.Index(fields=["databricks_cluster_id"], name="billedusage_cluster_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.record_id}: {self.usage_quantity} {self.usage_unit} of {self.sku_name}"
