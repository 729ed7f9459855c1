"""The price book: accelerator, egress and instance prices, and their history."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from billing.choices import (
    PriceKind,
)
from runs.choices import AcceleratorType


class AcceleratorPrice(models.Model):
    """Price of one accelerator-hour of a type in a region, in force from `effective_from`."""

    accelerator_type = models.CharField(max_length=32, choices=AcceleratorType.choices)
    region = models.CharField(max_length=32)
    effective_from = models.DateTimeField()
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    source = models.CharField(max_length=500, blank=True, help_text="Where the figure comes from, with its date.")
    kind = models.CharField(
        max_length=16,
        choices=PriceKind.choices,
        default=PriceKind.LIST,
        help_text="A negotiated price, where one exists for the type and region, replaces the list price.",
    )

    class Meta:
        ordering = ["accelerator_type", "region", "effective_from"]
        constraints = [
            # One price per type, region, kind and start; the cost engine looks prices up by this.
            models.UniqueConstraint(
                fields=["accelerator_type", "region", "kind", "effective_from"],
                name="acceleratorprice_natural_key",
                violation_error_message="A price for this type and region already starts at that time.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.accelerator_type} {self.region} ${self.usd_per_hour}/h from {self.effective_from:%Y-%m-%d}"


class EgressPrice(models.Model):
    """Price per GB of data moved from one region to another (or to `internet`)."""

    source_region = models.CharField(max_length=32)
    destination_region = models.CharField(max_length=32)
    effective_from = models.DateTimeField()
    usd_per_gb = models.DecimalField(max_digits=12, decimal_places=6)
    usd_per_gb_processing = models.DecimalField(
        max_digits=12, decimal_places=6, default=0, help_text="Per-GB processing fee (a NAT gateway's, say)."
    )
    source = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["source_region", "destination_region", "effective_from"]
        constraints = [
            # One price per region pair and start; looked up by pair and time.
            models.UniqueConstraint(
                fields=["source_region", "destination_region", "effective_from"],
                name="egressprice_natural_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_region}->{self.destination_region} ${self.usd_per_gb}/GB"


class InstancePrice(models.Model):
    """Price of one instance-hour of a classic cluster node type; blank region = any region."""

    instance_type = models.CharField(max_length=64)
    region = models.CharField(max_length=32, blank=True, help_text="Blank: the price holds in any region.")
    effective_from = models.DateTimeField()
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    source = models.CharField(max_length=500, blank=True, help_text="Where the figure comes from, with its date.")

    class Meta:
        ordering = ["instance_type", "region", "effective_from"]
        constraints = [
            # One price per type, region and start; classic cluster costs look prices up by this.
            models.UniqueConstraint(
                fields=["instance_type", "region", "effective_from"],
                name="instanceprice_natural_key",
                violation_error_message="A price for this instance type and region already starts at that time.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.region or 'any region'} ${self.usd_per_hour}/h"


class PriceChange(models.Model):
    """One field of one price changed (or created, old blank), by whom and when."""

    model = models.CharField(max_length=64, help_text="e.g. AcceleratorPrice.")
    object_id = models.PositiveBigIntegerField()
    field = models.CharField(max_length=64)
    old = models.TextField(blank=True)
    new = models.TextField(blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True, help_text="e.g. 'CSV import prices.csv'.")

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [
            # The history page: newest changes first.
            models.Index(fields=["-at"], name="pricechange_at_idx"),
            # One price's history on its edit page.
            models.Index(fields=["model", "object_id"], name="pricechange_object_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.model}#{self.object_id}.{self.field}: {self.old!r} -> {self.new!r}"
