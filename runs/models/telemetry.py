"""GPU telemetry: raw samples, compacted blocks, minute and hour rollups."""

from __future__ import annotations

from django.db import models

from runs.choices import (
    TelemetrySource,
)
from runs.models.record import Node, Run


class GpuSample(models.Model):
    """One GPU of one node at one instant. Units: percent, bytes, watts, Celsius, MHz."""

    # No single-column indexes on the keys: the natural key leads with the run, the (node, ts)
    # index below with the node. A bare run or node index is the planner's pick for the live
    # edge (as selective as any by its statistics, which count no dead rows, and smaller) and
    # walks every row compaction deleted until vacuum.
    #
    # No database foreign keys either (db_constraint=False), an integrity trade made for ingest
    # speed: PostgreSQL checked both keys of every inserted row at commit, ~70 ms of a 10,000-row
    # batch's ~250 ms in the database. The ids are resolved and team-checked when the batch is
    # accepted (runs/api.py, ingest.nodes_for); Django's CASCADE still deletes a run's or a node's
    # samples with it (in Python, as it always did). What the database no longer refuses is a
    # sample whose run or node went away between accept and the worker's insert: retention's
    # `prune_orphan_samples` deletes and counts those.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="gpu_samples", db_index=False, db_constraint=False
    )
    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, related_name="gpu_samples", db_index=False, db_constraint=False
    )
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
    # NVLink throughput, all links together, KB/s: GPM NVLINK_TOTAL_TX/RX_PER_SEC (Hopper+, MiB/s)
    # or DCGM_FI_PROF_NVLINK_TX/RX_BYTES (bytes/s). NULL on GPUs without NVLink or without GPM.
    nvlink_tx_kbps = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps = models.FloatField(null=True, blank=True)
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
            # Retention (runs/telemetry/retention.py): the oldest samples before the cutoff, in batches.
            models.Index(fields=["ts"], name="gpusample_ts_idx"),
            # The live edge of a run or node (runs/telemetry/envelope.py `_hot_rows`): an exact
            # index range over the minutes compaction has not folded, so the read never walks
            # the dead rows compaction left before vacuum (the natural key puts the GPU before ts).
            # Also the node foreign key's index (cascades).
            models.Index(fields=["node", "ts"], name="gpusample_node_ts_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}@{self.ts.isoformat()}"


class GpuSampleBlock(models.Model):
    """One minute of one node's raw samples, every GPU, compacted: the cold part of the raw tier.

    GpuSample rows are the hot part (the last AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES); the
    compaction pass (runs/telemetry/blocks.py) folds each older (run, node, minute, source) into one row
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
    # Optional signals, NULL where the GPU or importer has none: SM and tensor-pipe activity
    # (Hopper GPM, DCGM_FI_PROF_SM_ACTIVE / _PIPE_TENSOR_ACTIVE) and PCIe throughput (NVML
    # nvmlDeviceGetPcieThroughput, nvidia-smi dmon rxpci/txpci), KB/s, and NVLink throughput
    # (GPM, DCGM_FI_PROF_NVLINK_TX/RX_BYTES), KB/s.
    "sm_active",
    "tensor_active",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "nvlink_tx_kbps",
    "nvlink_rx_kbps",
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
    # min / avg / max like the others: the chart draws max (a one-second PCIe burst or a
    # tensor-core stall survives the fold), the stall rule reads averages.
    sm_active_min = models.FloatField(null=True, blank=True)
    sm_active_avg = models.FloatField(null=True, blank=True)
    sm_active_max = models.FloatField(null=True, blank=True)
    tensor_active_min = models.FloatField(null=True, blank=True)
    tensor_active_avg = models.FloatField(null=True, blank=True)
    tensor_active_max = models.FloatField(null=True, blank=True)
    pcie_tx_kbps_min = models.FloatField(null=True, blank=True)
    pcie_tx_kbps_avg = models.FloatField(null=True, blank=True)
    pcie_tx_kbps_max = models.FloatField(null=True, blank=True)
    pcie_rx_kbps_min = models.FloatField(null=True, blank=True)
    pcie_rx_kbps_avg = models.FloatField(null=True, blank=True)
    pcie_rx_kbps_max = models.FloatField(null=True, blank=True)
    nvlink_tx_kbps_min = models.FloatField(null=True, blank=True)
    nvlink_tx_kbps_avg = models.FloatField(null=True, blank=True)
    nvlink_tx_kbps_max = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps_min = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps_avg = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps_max = models.FloatField(null=True, blank=True)

    class Meta:
        abstract = True


# GPU-minutes under this utilization are in `gpuminute_idle_idx`; an idle threshold set above it
# (AIRBOARD_IDLE_UTILIZATION_PERCENT) still answers the same, only without the index.
IDLE_INDEX_BELOW = 50.0


class GpuMinute(GpuRollupStats):
    """Per-minute rollup of GpuSample (min / avg / max per field); long runs chart from it."""

    # No index of its own: the natural key starts with run (7-8 bytes a row saved).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_minutes", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_minutes")
    gpu_index = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="Start of the minute, UTC.")

    class Meta:
        constraints = [
            # One row per GPU-minute; the rollup step upserts on it. Run, then minute: the
            # pages read a run's last hour (runs.glance, 50 runs a page), its first and last
            # minute (charts) and a window before its end (post-mortems) as one index range,
            # where node before minute read every minute of the run (55 -> 35 ms for a page of
            # 50 running 8-GPU runs with two days of minutes each).
            models.UniqueConstraint(fields=["run", "minute", "node", "gpu_index"], name="gpuminute_natural_key"),
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

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_hours", db_index=False)  # as GpuMinute
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_hours")
    gpu_index = models.PositiveSmallIntegerField()
    hour = models.DateTimeField(help_text="Start of the hour, UTC.")

    class Meta:
        constraints = [
            # One row per GPU-hour; refresh_hours upserts on it; run, then hour, as GpuMinute.
            models.UniqueConstraint(fields=["run", "hour", "node", "gpu_index"], name="gpuhour_natural_key"),
        ]
        indexes = [
            # Fleet page: every run's hours in a time window, grouped by team / accelerator.
            models.Index(fields=["hour"], name="gpuhour_hour_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}@{self.hour.isoformat()}"


# A minute's mean GPU utilization as a whole number of millionths of a percent: integers add
# up the same in any order, so a run's sum kept by deltas equals one summed afresh.
UTILIZATION_SCALE = 1_000_000
# GpuLife.means: each hour's mean of every other rollup field as a whole number of thousandths of
# its unit (bytes, watts, degrees, MHz, KB/s, percent), for the same reason.
MEAN_SCALE = 1_000


class RunUtilization(models.Model):
    """A run's GPU-minutes that reported utilization, and the sum of their mean utilization.

    The mean utilization of a run (advice's low_util_multi_gpu) is `utilization_sum /
    UTILIZATION_SCALE / gpu_minutes`, the mean of its GpuMinute rows' `utilization_gpu_avg`
    without reading them. Kept equal to the aggregate of the run's stored GpuMinute rows by
    runs.telemetry.utilization: every rewrite of a minute rollup adds its change, every
    pruned minute is taken out.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="utilization")
    gpu_minutes = models.BigIntegerField(default=0)
    utilization_sum = models.BigIntegerField(default=0, help_text="Millionths of a percent (UTILIZATION_SCALE).")

    def __str__(self) -> str:
        return f"{self.run_id}: {self.gpu_minutes} GPU-minutes"

    @property
    def mean(self) -> float | None:
        """Mean per-GPU-minute utilization, percent; None without minutes."""
        return mean_utilization(self.gpu_minutes, self.utilization_sum)


def mean_utilization(gpu_minutes: int, utilization_sum: int) -> float | None:
    """A mean utilization, percent, from a count and a sum in millionths of a percent (a
    RunUtilization's two numbers, or a GpuLife's hours and means, or its weight and weighted sum);
    None when the count is 0."""
    return utilization_sum / UTILIZATION_SCALE / gpu_minutes if gpu_minutes else None


class GpuLife(models.Model):
    """One GPU's hour rollups over the run's life, summed: what the run page's frame and an ended
    run's under-use flag ask of every hour, read as one row a GPU.

    Kept equal to the sums of the GPU's stored GpuHour rows by runs.telemetry.gpu_life, as
    RunUtilization is to the minutes: `store.refresh_hours`, under the run's lock, adds what
    each hour rewrite changes. Utilization means enter as whole millionths of a percent
    (UTILIZATION_SCALE), so sums kept by differences equal sums taken afresh.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_lives", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_lives")
    gpu_index = models.PositiveSmallIntegerField()
    hours = models.BigIntegerField(default=0, help_text="GpuHour rows.")
    mean_hours = models.BigIntegerField(default=0, help_text="Hours with a utilization mean.")
    mean_sum = models.BigIntegerField(default=0, help_text="Sum of those hours' means, millionths of a percent.")
    weight = models.BigIntegerField(default=0, help_text="Samples of the hours with a utilization mean.")
    weighted_sum = models.BigIntegerField(default=0, help_text="Sum of mean x samples, millionths of a percent.")
    reported = models.JSONField(default=dict, help_text="Field -> hours in which the GPU reported it.")
    means = models.JSONField(
        default=dict,
        help_text="Field -> [hours with a mean, those means summed in thousandths of its unit (MEAN_SCALE)], "
        "every rollup field but utilization (mean_hours, mean_sum).",
    )
    power_limit_watts = models.FloatField(
        null=True, blank=True, help_text="The highest power limit its hours hold (NVML's enforced limit)."
    )

    class Meta:
        constraints = [
            # One row a GPU; led by run: the frame and the runs table read a run's rows.
            models.UniqueConstraint(fields=["run", "node", "gpu_index"], name="gpulife_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}: {self.hours} hours"


class GpuStreak(models.Model):
    """Where one GPU's stall streaks stand at its latest sample, kept by ingest (runs.telemetry.streaks).

    The overview's stall panel reads one row a GPU instead of the last hour of raw samples.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="gpu_streaks", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_streaks")
    gpu_index = models.PositiveSmallIntegerField()
    last_ts = models.DateTimeField(help_text="The GPU's latest sample.")
    hung_since = models.DateTimeField(
        null=True, blank=True, help_text="First sample of the hung streak that reaches last_ts; None when not hung."
    )
    no_process_since = models.DateTimeField(
        null=True, blank=True, help_text="First sample of the process-less streak that reaches last_ts, or None."
    )

    class Meta:
        constraints = [
            # One row a GPU, upserted by ingest; led by run: the stall panel reads the running runs' rows.
            models.UniqueConstraint(fields=["run", "node", "gpu_index"], name="gpustreak_natural_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/gpu{self.gpu_index}@{self.last_ts.isoformat()}"


class RunEnvelope(models.Model):
    """Every GPU of a run folded into one row per minute (or hour): the run page's envelope, kept on the write path.

    Per field: the lowest `_min` and highest `_max` of the GPUs' rollups of that minute (hour),
    the sum of their averages `_sum` and how many GPUs had one `_n` (the mean across GPUs is
    `_sum / _n`, and buckets of several rows add up exactly). Written by
    runs/telemetry/envelope_store.py from GpuMinute (`seconds` 60) and GpuHour (3600) each time
    those are, so a 64-GPU run's 24-hour panel reads 1,440 rows, not 92,160.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="envelopes", db_index=False)
    seconds = models.PositiveIntegerField(help_text="60: a minute of GpuMinute rows; 3600: an hour of GpuHour rows.")
    start = models.DateTimeField(help_text="Start of the minute or hour, UTC.")
    gpus = models.PositiveIntegerField(default=0, help_text="GPU rollup rows folded into this one.")
    utilization_gpu_min = models.FloatField(null=True, blank=True)
    utilization_gpu_max = models.FloatField(null=True, blank=True)
    utilization_gpu_sum = models.FloatField(null=True, blank=True)
    utilization_gpu_n = models.PositiveIntegerField(default=0)
    utilization_memory_min = models.FloatField(null=True, blank=True)
    utilization_memory_max = models.FloatField(null=True, blank=True)
    utilization_memory_sum = models.FloatField(null=True, blank=True)
    utilization_memory_n = models.PositiveIntegerField(default=0)
    memory_used_bytes_min = models.FloatField(null=True, blank=True)
    memory_used_bytes_max = models.FloatField(null=True, blank=True)
    memory_used_bytes_sum = models.FloatField(null=True, blank=True)
    memory_used_bytes_n = models.PositiveIntegerField(default=0)
    power_watts_min = models.FloatField(null=True, blank=True)
    power_watts_max = models.FloatField(null=True, blank=True)
    power_watts_sum = models.FloatField(null=True, blank=True)
    power_watts_n = models.PositiveIntegerField(default=0)
    temperature_c_min = models.FloatField(null=True, blank=True)
    temperature_c_max = models.FloatField(null=True, blank=True)
    temperature_c_sum = models.FloatField(null=True, blank=True)
    temperature_c_n = models.PositiveIntegerField(default=0)
    sm_clock_mhz_min = models.FloatField(null=True, blank=True)
    sm_clock_mhz_max = models.FloatField(null=True, blank=True)
    sm_clock_mhz_sum = models.FloatField(null=True, blank=True)
    sm_clock_mhz_n = models.PositiveIntegerField(default=0)
    sm_active_min = models.FloatField(null=True, blank=True)
    sm_active_max = models.FloatField(null=True, blank=True)
    sm_active_sum = models.FloatField(null=True, blank=True)
    sm_active_n = models.PositiveIntegerField(default=0)
    tensor_active_min = models.FloatField(null=True, blank=True)
    tensor_active_max = models.FloatField(null=True, blank=True)
    tensor_active_sum = models.FloatField(null=True, blank=True)
    tensor_active_n = models.PositiveIntegerField(default=0)
    pcie_tx_kbps_min = models.FloatField(null=True, blank=True)
    pcie_tx_kbps_max = models.FloatField(null=True, blank=True)
    pcie_tx_kbps_sum = models.FloatField(null=True, blank=True)
    pcie_tx_kbps_n = models.PositiveIntegerField(default=0)
    pcie_rx_kbps_min = models.FloatField(null=True, blank=True)
    pcie_rx_kbps_max = models.FloatField(null=True, blank=True)
    pcie_rx_kbps_sum = models.FloatField(null=True, blank=True)
    pcie_rx_kbps_n = models.PositiveIntegerField(default=0)
    nvlink_tx_kbps_min = models.FloatField(null=True, blank=True)
    nvlink_tx_kbps_max = models.FloatField(null=True, blank=True)
    nvlink_tx_kbps_sum = models.FloatField(null=True, blank=True)
    nvlink_tx_kbps_n = models.PositiveIntegerField(default=0)
    nvlink_rx_kbps_min = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps_max = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps_sum = models.FloatField(null=True, blank=True)
    nvlink_rx_kbps_n = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # One row per run, tier and bucket; envelope_store upserts on it, the page reads a range of it.
            models.UniqueConstraint(fields=["run", "seconds", "start"], name="runenvelope_natural_key"),
        ]
        indexes = [
            # Retention deletes the minute rows past AIRBOARD_TELEMETRY_MINUTE_DAYS, oldest first.
            models.Index(fields=["start"], name="runenvelope_start_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.seconds}s@{self.start.isoformat()}"
