"""What the collectors and the API bring in besides telemetry: MLflow runs and metrics, batches, collector health."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone

from runs.choices import (
    BatchKind,
    BatchStatus,
    CollectorKind,
)
from runs.models.record import Run

# MLflow's system network counters (`system/network_receive_megabytes`, and per node
# `system/<node>/network_transmit_megabytes`): what derived cross-region egress reads.
NETWORK_COUNTER = re.compile(r"^system/(?:[^/]+/)?network_(?P<direction>receive|transmit)_megabytes$")


def is_network_counter(key: str) -> bool:
    """True for the MLflow network counters that derived egress reads."""
    return NETWORK_COUNTER.match(key) is not None


class MetricPoint(models.Model):
    """One value of an MLflow metric; `value` is NULL where MLflow logged NaN or infinity."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_points")
    key = models.CharField(max_length=250)
    step = models.BigIntegerField(default=0)
    ts = models.DateTimeField()
    value = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            # Idempotent ingest, and the metric chart's (run, key) lookup by prefix.
            models.UniqueConstraint(fields=["run", "key", "step", "ts"], name="metricpoint_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.key}@{self.step}"


class CollectorState(models.Model):
    """One collector's cursor and health: last success, lag, items ingested, last error."""

    # Not stored: what a page shows of the error and refusals (dashboard.views.shown_errors).
    shown_error: str
    shown_refused: int | None
    shown_refusal: str

    name = models.CharField(max_length=100, help_text="e.g. 'mlflow', 'runs', 'logs', 'agent:gpu-node-17'.")
    kind = models.CharField(max_length=16, choices=CollectorKind.choices)
    cursor = models.JSONField(default=dict, blank=True, help_text="Where the next pass starts.")
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    items_last_run = models.PositiveIntegerField(default=0)
    items_total = models.BigIntegerField(default=0)
    # The agent path: rows refused because they named another team's run or had no valid key.
    refused_total = models.BigIntegerField(default=0)
    last_refusal = models.CharField(max_length=500, blank=True)
    last_refusal_at = models.DateTimeField(null=True, blank=True)
    expected_interval_seconds = models.PositiveIntegerField(default=300, help_text="Stale after twice this.")

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="collectorstate_name_unique"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_stale(self) -> bool:
        if self.last_success_at is None:
            return True
        return timezone.now() - self.last_success_at > timedelta(seconds=2 * self.expected_interval_seconds)

    @property
    def lag(self) -> timedelta | None:
        return None if self.last_success_at is None else timezone.now() - self.last_success_at


class MlflowRun(models.Model):
    """An MLflow run the collector has seen, linked to an Airboard run when it can be."""

    mlflow_run_id = models.CharField(max_length=64)
    experiment_id = models.CharField(max_length=64, blank=True)
    experiment_name = models.CharField(max_length=500, blank=True)
    run_name = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=32, blank=True)
    start_time = models.DateTimeField(null=True, blank=True)
    end_time = models.DateTimeField(null=True, blank=True)
    params = models.JSONField(default=dict, blank=True)
    tags = models.JSONField(default=dict, blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="mlflow_runs")
    # Per metric key, the last (timestamp ms, step) read: the next pass asks only for later points.
    metric_cursors = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["mlflow_run_id"], name="mlflowrun_id_unique"),
        ]
        indexes = [
            # The collectors page lists unlinked MLflow runs.
            models.Index(fields=["run"], name="mlflowrun_run_idx"),
        ]

    def __str__(self) -> str:
        return f"MLflow {self.mlflow_run_id} ({self.run_name})"


class JSONTextField(models.JSONField):
    """JSON kept as the text written, a `text` column on PostgreSQL (SQLite's JSONField is text already).

    For a column nothing queries inside: PostgreSQL stores the bytes as sent instead of parsing
    them into jsonb (~45 ms of its CPU for a 10,000-row telemetry batch, on the accept path),
    and hands them back as they were. Python reads and writes it as a JSONField.
    """

    def db_type(self, connection: Any) -> str | None:
        return "text" if connection.vendor == "postgresql" else super().db_type(connection)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor != "postgresql":
            return super().get_db_prep_value(value, connection, prepared)
        if not prepared:
            value = self.get_prep_value(value)
        return json.dumps(value, cls=self.encoder)


class IngestBatch(models.Model):
    """A telemetry batch as received: recorded before it is queued, so a lost message is re-sent."""

    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="ingest_batches")
    kind = models.CharField(max_length=16, choices=BatchKind.choices)
    content_hash = models.CharField(max_length=64, help_text="sha256 of the normalised rows.")
    # The JSON text that was hashed, as it was (nothing queries inside it); emptied once stored.
    rows = JSONTextField(help_text="Validated rows, run and node resolved to ids.")
    row_count = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=BatchStatus.choices, default=BatchStatus.PENDING)
    inserted = models.PositiveIntegerField(null=True, blank=True)
    duplicates = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # A resent batch (same rows) is recognised and reported as a duplicate.
            models.UniqueConstraint(fields=["team", "kind", "content_hash"], name="ingestbatch_content_unique"),
        ]
        indexes = [
            # The sweeper that re-queues batches a broker lost: pending ones, oldest first.
            models.Index(fields=["status", "received_at"], name="ingestbatch_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} batch {self.pk} ({self.row_count} rows, {self.status})"

    def answer(self, duplicate: bool) -> dict[str, Any]:
        """The batch as the API answers for it (BatchOut): the push's and the agent door's reply."""
        return {
            "id": self.pk, "kind": self.kind, "status": self.status, "rows": self.row_count, "duplicate": duplicate,
            "inserted": self.inserted, "duplicates": self.duplicates, "received_at": self.received_at,
            "processed_at": self.processed_at,
        }  # fmt: skip
