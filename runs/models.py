"""Runs, their attempts and nodes, logs, MLflow metrics and GPU telemetry."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone

from runs.choices import (
    AcceleratorType,
    BatchKind,
    BatchStatus,
    CollectorKind,
    PostMortemStatus,
    RunEventKind,
    RunOrigin,
    RunSource,
    RunStatus,
    TelemetrySource,
)


class RunQuerySet(models.QuerySet):
    def for_user(self, user: User) -> RunQuerySet:
        """Runs the user may see: their teams' runs, or everything for staff."""
        if user.is_staff or user.is_superuser:
            return self
        return self.filter(team__in=user.groups.all())

    def active(self) -> RunQuerySet:
        return self.filter(status__in=RunStatus.active())


class Run(models.Model):
    """One training run as its source knows it, with the workload it was submitted as."""

    source = models.CharField(max_length=16, choices=RunSource.choices, default=RunSource.SERVERLESS)
    external_id = models.CharField(max_length=200, help_text="The source's own run id.")
    team = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="runs")
    origin = models.CharField(
        max_length=16,
        choices=RunOrigin.choices,
        default=RunOrigin.COLLECTOR,
        help_text="Who wrote the run first; nobody else may change it.",
    )
    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    creator = models.CharField(max_length=254, blank=True, help_text="Who submitted it, as the source names them.")
    experiment_name = models.CharField(max_length=500, blank=True)
    mlflow_run_id = models.CharField(max_length=64, blank=True)
    mlflow_url = models.URLField(max_length=1000, blank=True)
    run_page_url = models.URLField(max_length=1000, blank=True)
    accelerator_type = models.CharField(max_length=32, choices=AcceleratorType.choices, blank=True)
    instance_type = models.CharField(max_length=64, blank=True, help_text="Classic clusters: GPU worker type.")
    num_accelerators = models.PositiveIntegerField(default=1)
    gpus_per_node = models.PositiveIntegerField(default=1)
    region = models.CharField(max_length=32, blank=True, help_text="Region where the GPUs ran.")
    home_region = models.CharField(max_length=32, blank=True, help_text="The workspace's own region.")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    state_message = models.TextField(blank=True)
    submitted_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    timeout_minutes = models.PositiveIntegerField(null=True, blank=True)
    max_retries = models.PositiveIntegerField(default=0)
    usage_policy_name = models.CharField(max_length=200, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    workload_yaml = models.TextField(blank=True, help_text="As submitted; secrets only as scope/key references.")
    is_demo = models.BooleanField(default=False, help_text="Made by seed_demo.")
    cluster = models.ForeignKey(
        "Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs", help_text="Classic runs."
    )
    cancel_requested_at = models.DateTimeField(null=True, blank=True, help_text="Set by the dashboard; launchers stop.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        constraints = [
            # Upserts by a key or an operator look a run up within the writer's team: another
            # team's run with the same id is invisible to them (no existence oracle), so ids
            # are unique per team, not globally.
            models.UniqueConstraint(
                fields=["team", "source", "external_id"],
                name="run_team_source_external_id_unique",
                violation_error_message="Your team already has a run with this source and external id.",
            ),
            # The run source collector looks its runs up by (source, external id) alone: a
            # Databricks run id names one run, the one the collector wrote first.
            models.UniqueConstraint(
                fields=["source", "external_id"],
                condition=Q(origin=RunOrigin.COLLECTOR),
                name="run_collector_source_external_id_unique",
                violation_error_message="The run source already has a run with this source and external id.",
            ),
        ]
        indexes = [
            # Run list: a team's runs, newest first.
            models.Index(fields=["team", "-submitted_at"], name="run_team_submitted_idx"),
            # Run list default ordering and the date-range filter across teams (staff).
            models.Index(fields=["-submitted_at"], name="run_submitted_idx"),
            # Overview: runs active now, failures in the last 7 days.
            models.Index(fields=["status", "submitted_at"], name="run_status_submitted_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.external_id} ({self.experiment_name or 'no experiment'})"

    @property
    def is_active(self) -> bool:
        return self.status in RunStatus.active()

    @property
    def is_cross_region(self) -> bool:
        return bool(self.region and self.home_region and self.region != self.home_region)

    @property
    def duration(self) -> timedelta | None:
        if not self.started_at:
            return None
        end = self.ended_at or timezone.now()
        return max(end - self.started_at, timedelta(0))

    def mlflow_link(self) -> str:
        """The MLflow UI link: the recorded one, else one built from AIRBOARD_MLFLOW_UI_URL."""
        if self.mlflow_url:
            return self.mlflow_url
        template = settings.AIRBOARD_MLFLOW_UI_URL
        if template and self.mlflow_run_id:
            return template.replace("{run_id}", self.mlflow_run_id)
        return ""


class Attempt(models.Model):
    """One try of a run; each retry is a new attempt with its own MLflow run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField(help_text="1 for the first try.")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    state_message = models.TextField(blank=True)
    mlflow_run_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            # Upserts of a run's attempts key on the attempt number.
            models.UniqueConstraint(fields=["run", "number"], name="attempt_run_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.run.external_id} attempt {self.number}"

    def billed_seconds(self, now: datetime | None = None) -> float:
        """Seconds this attempt held its GPUs: start to end, or to now while running."""
        if not self.started_at:
            return 0.0
        end = self.ended_at or now or timezone.now()
        return max((end - self.started_at).total_seconds(), 0.0)


class Node(models.Model):
    """One machine within an attempt."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="nodes")
    index = models.PositiveIntegerField(help_text="0 for the first (driver) node.")
    host = models.CharField(max_length=255, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["attempt", "index"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "index"], name="node_attempt_index_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt} node {self.index}"


class LogChunk(models.Model):
    """An ordered piece of one node's log; a resend of the same (node, seq) is a no-op."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="log_chunks")
    seq = models.PositiveIntegerField(help_text="Order of the chunk within the node's log, from 0.")
    text = models.TextField()
    line_count = models.PositiveIntegerField(default=0)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["node", "seq"]
        constraints = [
            # Idempotent appends: the natural key of a chunk.
            models.UniqueConstraint(fields=["node", "seq"], name="logchunk_node_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.node} chunk {self.seq}"


class GpuSample(models.Model):
    """One GPU of one node at one instant. Units: percent, bytes, watts, Celsius, MHz."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_samples")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_samples")
    gpu_index = models.PositiveSmallIntegerField()
    ts = models.DateTimeField()
    # Missing (NULL) when the GPU does not report the field: never stored as zero.
    utilization_gpu = models.FloatField(null=True, blank=True)
    utilization_memory = models.FloatField(null=True, blank=True)
    memory_used_bytes = models.BigIntegerField(null=True, blank=True)
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    power_watts = models.FloatField(null=True, blank=True)
    power_limit_watts = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.FloatField(null=True, blank=True)
    mem_clock_mhz = models.FloatField(null=True, blank=True)
    # Hopper and newer (GPM): SM-active and tensor-pipe activity, percent. Tell real work from
    # a kernel that keeps "utilization" at 100% while stalled in a collective.
    sm_active = models.FloatField(null=True, blank=True)
    tensor_active = models.FloatField(null=True, blank=True)
    throttle_reasons = models.BigIntegerField(null=True, blank=True, help_text="NVML clocks-event reason bitmask.")
    ecc_corrected = models.BigIntegerField(null=True, blank=True, help_text="Volatile corrected ECC errors.")
    ecc_uncorrected = models.BigIntegerField(null=True, blank=True, help_text="Volatile uncorrected ECC errors.")
    pcie_tx_kbps = models.FloatField(null=True, blank=True)
    pcie_rx_kbps = models.FloatField(null=True, blank=True)
    # [{"pid": 123, "used_memory_bytes": 1024, "run": "ext-id"}]; None when not collected.
    processes = models.JSONField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=TelemetrySource.choices, default=TelemetrySource.API)

    class Meta:
        constraints = [
            # Idempotent ingest: a resent sample conflicts here and is skipped. Its index
            # (run first) also serves the run page's chart query by run and time.
            models.UniqueConstraint(fields=["run", "node", "gpu_index", "ts"], name="gpusample_natural_key"),
        ]
        indexes = [
            # Retention (runs/retention.py): the oldest samples before the cutoff, in batches.
            models.Index(fields=["ts"], name="gpusample_ts_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}@{self.ts.isoformat()}"


class GpuSampleBlock(models.Model):
    """One minute of one node's raw samples, every GPU, compacted: the cold part of the raw tier.

    GpuSample rows are the hot part (the last AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES); the
    compaction pass (runs/blocks.py) folds each older (run, node, minute, source) into one row
    here whose `data` holds the second-by-second values, column by column, compressed with
    pcodec: a GPU sample costs tens of bytes here instead of the ~260 of a row and its indexes.
    """

    # No index of its own: the natural key below leads with the run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_sample_blocks", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_sample_blocks")
    minute = models.DateTimeField(help_text="Start of the minute, UTC.")
    source = models.CharField(max_length=16, choices=TelemetrySource.choices, default=TelemetrySource.API)
    samples = models.PositiveIntegerField(help_text="Samples in `data`, all GPUs.")
    data = models.BinaryField(help_text="runs.blocks.encode_block: GPUs, offsets and columns, pcodec-compressed.")

    class Meta:
        constraints = [
            # Compaction upserts on it; run first, so a chart reads one run's blocks in time order.
            models.UniqueConstraint(fields=["run", "node", "minute", "source"], name="gpusampleblock_natural_key"),
        ]
        indexes = [
            # SQLite retention deletes blocks before the cutoff (PostgreSQL drops partitions).
            models.Index(fields=["minute"], name="gpusampleblock_minute_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}@{self.minute.isoformat()} x{self.samples}"


# Fields of GpuSample folded into the per-minute rollup as min / avg / max.
ROLLUP_FIELDS = (
    "utilization_gpu",
    "utilization_memory",
    "memory_used_bytes",
    "power_watts",
    "temperature_c",
    "sm_clock_mhz",
)


class GpuRollupStats(models.Model):
    """The min / avg / max of each ROLLUP_FIELDS field over a time bucket (abstract)."""

    samples = models.PositiveIntegerField(default=0)
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    power_limit_watts = models.FloatField(null=True, blank=True)
    utilization_gpu_min = models.FloatField(null=True, blank=True)
    utilization_gpu_avg = models.FloatField(null=True, blank=True)
    utilization_gpu_max = models.FloatField(null=True, blank=True)
    utilization_memory_min = models.FloatField(null=True, blank=True)
    utilization_memory_avg = models.FloatField(null=True, blank=True)
    utilization_memory_max = models.FloatField(null=True, blank=True)
    memory_used_bytes_min = models.FloatField(null=True, blank=True)
    memory_used_bytes_avg = models.FloatField(null=True, blank=True)
    memory_used_bytes_max = models.FloatField(null=True, blank=True)
    power_watts_min = models.FloatField(null=True, blank=True)
    power_watts_avg = models.FloatField(null=True, blank=True)
    power_watts_max = models.FloatField(null=True, blank=True)
    temperature_c_min = models.FloatField(null=True, blank=True)
    temperature_c_avg = models.FloatField(null=True, blank=True)
    temperature_c_max = models.FloatField(null=True, blank=True)
    sm_clock_mhz_min = models.FloatField(null=True, blank=True)
    sm_clock_mhz_avg = models.FloatField(null=True, blank=True)
    sm_clock_mhz_max = models.FloatField(null=True, blank=True)

    class Meta:
        abstract = True


# GPU-minutes under this utilization are in `gpuminute_idle_idx`; an idle threshold set above it
# (AIRBOARD_IDLE_UTILIZATION_PERCENT) still answers the same, only without the index.
IDLE_INDEX_BELOW = 50.0


class GpuMinute(GpuRollupStats):
    """Per-minute rollup of GpuSample (min / avg / max per field); long runs chart from it."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_minutes")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_minutes")
    gpu_index = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="Start of the minute, UTC.")

    class Meta:
        constraints = [
            # One row per GPU-minute; the rollup step upserts on it. Run first: the chart
            # query reads one run's minutes in time order.
            models.UniqueConstraint(fields=["run", "node", "gpu_index", "minute"], name="gpuminute_natural_key"),
        ]
        indexes = [
            # Fleet page: the last few minutes of every GPU, across all running runs.
            models.Index(fields=["minute"], name="gpuminute_minute_idx"),
            # The cost engine's idle GPU-minutes (utilization_gpu_max under
            # AIRBOARD_IDLE_UTILIZATION_PERCENT, 5 by default) of the runs it prices: only
            # minutes under IDLE_INDEX_BELOW are indexed, so busy minutes cost ingest nothing
            # more, and a running run's idle minutes are found without reading its busy ones.
            models.Index(
                fields=["run", "utilization_gpu_max"],
                name="gpuminute_idle_idx",
                condition=models.Q(utilization_gpu_max__lt=IDLE_INDEX_BELOW),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}@{self.minute.isoformat()}"


class GpuHour(GpuRollupStats):
    """Per-hour rollup of GpuMinute (same shape); the fleet page and very long ranges chart from it."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_hours")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_hours")
    gpu_index = models.PositiveSmallIntegerField()
    hour = models.DateTimeField(help_text="Start of the hour, UTC.")

    class Meta:
        constraints = [
            # One row per GPU-hour; refresh_hours upserts on it; run first for a run's chart.
            models.UniqueConstraint(fields=["run", "node", "gpu_index", "hour"], name="gpuhour_natural_key"),
        ]
        indexes = [
            # Fleet page: every run's hours in a time window, grouped by team / accelerator.
            models.Index(fields=["hour"], name="gpuhour_hour_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}@{self.hour.isoformat()}"


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


class RunEvent(models.Model):
    """Something that happened to a run: a GPU lost, an Xid, a cancel, a timeout."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    ts = models.DateTimeField()
    kind = models.CharField(max_length=32, choices=RunEventKind.choices)
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "ts"]
        constraints = [
            # A resent event (agent retry, launcher restart) is stored once.
            models.UniqueConstraint(fields=["run", "kind", "ts", "gpu_index"], name="runevent_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.kind} at {self.ts.isoformat()}"


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


class CollectorState(models.Model):
    """One collector's cursor and health: last success, lag, items ingested, last error."""

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


class IngestBatch(models.Model):
    """A telemetry batch as received: recorded before it is queued, so a lost message is re-sent."""

    team = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="ingest_batches")
    kind = models.CharField(max_length=16, choices=BatchKind.choices)
    content_hash = models.CharField(max_length=64, help_text="sha256 of the normalised rows.")
    rows = models.JSONField(help_text="Validated rows, run and node resolved to ids.")  # emptied once stored
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


class FailureAnalysis(models.Model):
    """The classifier's verdict on a failed run: its first causal error, where, and what to do."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="failure")
    # A class id of runs.classify_rules.CLASSES; not a choices field, so a new class in the
    # rules needs no migration.
    class_id = models.CharField(max_length=40)
    title = models.CharField(max_length=200)
    attempt_number = models.PositiveIntegerField(null=True, blank=True)
    node_index = models.PositiveIntegerField(null=True, blank=True)
    line = models.PositiveIntegerField(null=True, blank=True, help_text="1-based, within that node's log.")
    evidence = models.TextField(blank=True)
    # The evidence with numbers, hex ids and paths folded, so recurring causes group together.
    signature = models.CharField(max_length=200, blank=True)
    remedy = models.TextField(blank=True)
    note = models.TextField(blank=True, help_text="Timing remarks: timeout, runtime cap.")
    failed_at = models.DateTimeField(null=True, blank=True, help_text="When the failure happened, best known.")
    # 0..1: how much the verdict rests on (a cause named in the log, a symptom, an exit code,
    # telemetry), raised when the telemetry agrees and lowered when it contradicts the log.
    confidence = models.FloatField(null=True, blank=True)
    # Attempts before the one that ended the run: [{"attempt": 1, "class_id", "title", "evidence"}].
    earlier_attempts = models.JSONField(default=list, blank=True)
    # What the GPU telemetry showed before the end (runs.postmortem.TelemetrySignal.as_dict).
    telemetry = models.JSONField(default=dict, blank=True)
    classified_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # Similar failures and the failures overview: one class, newest first.
            models.Index(fields=["class_id", "-failed_at"], name="failure_class_failed_idx"),
            # Failures overview: a date range of failures across classes.
            models.Index(fields=["failed_at"], name="failure_failed_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.class_id}"


class PostMortem(models.Model):
    """A written post-mortem of a failed run: root cause, action items and a Markdown body."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="postmortems")
    title = models.CharField(max_length=200)
    summary = models.TextField(blank=True)
    owner = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="postmortems")
    status = models.CharField(max_length=16, choices=PostMortemStatus.choices, default=PostMortemStatus.DRAFT)
    root_cause = models.TextField(blank=True, help_text="Prefilled from the classifier.")
    # [{"text": "...", "owner": "alice", "done": false}]
    action_items = models.JSONField(default=list, blank=True)
    body = models.TextField(blank=True, help_text="Markdown; rendered sanitised.")
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The run's failure page lists its post-mortems, newest first.
            models.Index(fields=["run", "-created_at"], name="postmortem_run_created_idx"),
        ]

    def __str__(self) -> str:
        return self.title


def runs_visible_to(user: User) -> QuerySet[Run]:
    """Shorthand used by views and the API: the runs this user may see."""
    return Run.objects.for_user(user)


def team_filter(user: User, field: str = "team") -> Q:
    """A Q object limiting `field` to the user's teams (all for staff)."""
    if user.is_staff or user.is_superuser:
        return Q()
    return Q(**{f"{field}__in": user.groups.all()})
