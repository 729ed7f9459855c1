"""Classic GPU clusters and their lifecycle events."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models


class Cluster(models.Model):
    """A classic GPU cluster on an ML runtime, billed by uptime (driver + workers), busy or idle."""

    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="clusters")
    cluster_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200, blank=True)
    creator = models.CharField(max_length=254, blank=True)
    spark_version = models.CharField(max_length=100, blank=True, help_text="e.g. 15.4.x-gpu-ml-scala2.12")
    node_type_id = models.CharField(max_length=64, blank=True, help_text="GPU worker instance type.")
    driver_node_type_id = models.CharField(max_length=64, blank=True)
    num_workers = models.PositiveIntegerField(default=0)
    autoscale_min_workers = models.PositiveIntegerField(null=True, blank=True)
    autoscale_max_workers = models.PositiveIntegerField(null=True, blank=True)
    single_node = models.BooleanField(default=False)
    data_security_mode = models.CharField(max_length=64, blank=True, help_text="Access mode (SINGLE_USER, ...).")
    single_user_name = models.CharField(max_length=254, blank=True)
    runtime_engine = models.CharField(max_length=32, blank=True, help_text="PHOTON or STANDARD.")
    docker_image = models.CharField(max_length=500, blank=True)
    region = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=32, blank=True)
    start_time = models.DateTimeField(
        null=True, blank=True, help_text="When the creation request was received (Clusters API): never an uptime start."
    )
    last_restarted_time = models.DateTimeField(
        null=True, blank=True, help_text="When the cluster was last started or restarted: the current stretch's start."
    )
    terminated_time = models.DateTimeField(null=True, blank=True)
    raw = models.JSONField(default=dict, blank=True, help_text="The source's record, as received.")
    is_demo = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The run source upserts clusters by the workspace's cluster id.
            models.UniqueConstraint(fields=["cluster_id"], name="cluster_id_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name or self.cluster_id} ({self.spark_version})"


class ClusterEvent(models.Model):
    """A cluster's lifecycle event (STARTING, RUNNING, RESIZING, TERMINATING, ...)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="events")
    ts = models.DateTimeField()
    kind = models.CharField(max_length=64)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["cluster", "ts"]
        constraints = [
            # Events are re-read on every pass of the run source; each is stored once.
            models.UniqueConstraint(fields=["cluster", "ts", "kind"], name="clusterevent_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.kind} at {self.ts.isoformat()}"
