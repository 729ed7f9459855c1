"""Price book and egress records: the facts the cost engine reads."""

from __future__ import annotations

from django.db import models

from runs.choices import AcceleratorType
from runs.models import Run


class AcceleratorPrice(models.Model):
    """Price of one accelerator-hour of a type in a region, in force from `effective_from`."""

    accelerator_type = models.CharField(max_length=32, choices=AcceleratorType.choices)
    region = models.CharField(max_length=32)
    effective_from = models.DateTimeField()
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    source = models.CharField(max_length=500, blank=True, help_text="Where the figure comes from, with its date.")

    class Meta:
        ordering = ["accelerator_type", "region", "effective_from"]
        constraints = [
            # One price per type, region and start; the cost engine looks prices up by this.
            models.UniqueConstraint(
                fields=["accelerator_type", "region", "effective_from"],
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


class EgressRecord(models.Model):
    """Bytes a run moved across regions at a time."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="egress_records")
    source_region = models.CharField(max_length=32)
    destination_region = models.CharField(max_length=32)
    bytes = models.BigIntegerField()
    ts = models.DateTimeField()

    class Meta:
        constraints = [
            # A resent egress record is a no-op.
            models.UniqueConstraint(
                fields=["run", "source_region", "destination_region", "ts"], name="egressrecord_natural_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.bytes} B {self.source_region}->{self.destination_region}"
