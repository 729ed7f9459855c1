"""Request and response shapes of the runs API (pydantic, via django-ninja).

Telemetry rows are plain pydantic models, not ninja Schemas: ninja's Schema runs a Python
root validator per object (to read ORM attributes), which made a 10,000-sample batch spend
most of its second in validation.

Every bound is checked here so that a bad field or row is named in a 422 before anything is
written. Units follow NVML: percent, bytes, watts, Celsius, MHz.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from dashboard.kit.schemas import (
    ExternalId,
    RegionName,
    Timestamp,
    refuse_nul,
)
from runs.choices import AcceleratorType, RunSource, RunStatus, TelemetrySource, accelerator_count_problem


def _metric_value(value: Any) -> Any:
    """MLflow logs NaN and infinities; JSON carries them as the strings MLflow's REST API uses."""
    if isinstance(value, str) and value.strip().lower() in {"nan", "inf", "infinity", "-inf", "-infinity"}:
        return None
    return value


def bounds(low: float, high: float) -> Any:
    """An optional reading's bounds, as the metadata of `Annotated[float | None, bounds(low, high)]`."""
    # allow_inf_nan=False: pydantic-core refuses NaN and infinities itself, not a Python
    # validator called for every value of every row (11 fields x 10,000 rows a batch).
    return Field(default=None, ge=low, le=high, allow_inf_nan=False)


# Nodes one run upsert may carry across all its attempts (the most one attempt may index).
MAX_NODES_PER_RUN_REQUEST = 4096


class NodeIn(Schema):
    _no_nul = field_validator("*", mode="before")(refuse_nul)
    index: int = Field(ge=0, le=4096)
    host: str = Field(default="", max_length=255)
    status: RunStatus | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    exit_code: int | None = Field(default=None, ge=-255, le=255)


class AttemptIn(Schema):
    _no_nul = field_validator("*", mode="before")(refuse_nul)
    number: int = Field(ge=1, le=1000)
    status: RunStatus | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    exit_code: int | None = Field(default=None, ge=-255, le=255)
    state_message: str = Field(default="", max_length=10_000)
    mlflow_run_id: str = Field(default="", max_length=64)
    nodes: list[NodeIn] = Field(default_factory=list, max_length=4096)

    @model_validator(mode="after")
    def _ordered(self) -> AttemptIn:
        if self.started_at and self.ended_at and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        indexes = [n.index for n in self.nodes]
        if len(indexes) != len(set(indexes)):
            raise ValueError("node indexes must be unique within an attempt")
        return self


class RunIn(Schema):
    """A run as its source reports it. Fields left out keep their stored value."""

    _no_nul = field_validator("*", mode="before")(refuse_nul)

    source: RunSource | None = Field(
        default=None, description="Left out: the key's own source (`local` unless the key was granted another)."
    )
    external_id: ExternalId
    experiment_name: str = Field(default="", max_length=500)
    creator: str = Field(default="", max_length=254)
    status: RunStatus | None = None
    state_message: str = Field(default="", max_length=10_000)
    accelerator_type: AcceleratorType | None = None
    instance_type: str = Field(default="", max_length=64)
    num_accelerators: int | None = Field(default=None, ge=1, le=100_000)
    gpus_per_node: int | None = Field(default=None, ge=1, le=64)
    region: RegionName = ""
    home_region: RegionName = ""
    submitted_at: Timestamp | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    timeout_minutes: int | None = Field(default=None, ge=1, le=60 * 24 * 30)
    max_retries: int | None = Field(default=None, ge=0, le=100)
    usage_policy_name: str = Field(default="", max_length=200)
    parameters: dict[str, Any] = Field(default_factory=dict)
    workload_yaml: str = Field(default="", max_length=200_000)
    mlflow_run_id: str = Field(default="", max_length=64)
    mlflow_url: str = Field(default="", max_length=1000, pattern=r"^(https?://\S+)?$")
    run_page_url: str = Field(default="", max_length=1000, pattern=r"^(https?://\S+)?$")
    attempts: list[AttemptIn] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _consistent(self) -> RunIn:
        if self.started_at and self.ended_at and self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        numbers = [a.number for a in self.attempts]
        if len(numbers) != len(set(numbers)):
            raise ValueError("attempt numbers must be unique")
        # Each node is a few queries in one transaction: 10 attempts of 4,096 nodes (700 KB)
        # held a web worker and the write lock for ~50 s. A run's attempts have far fewer.
        nodes = sum(len(a.nodes) for a in self.attempts)
        if nodes > MAX_NODES_PER_RUN_REQUEST:
            raise ValueError(f"{nodes} nodes across the attempts; at most {MAX_NODES_PER_RUN_REQUEST} in one request")
        if self.accelerator_type and self.num_accelerators:
            problem = accelerator_count_problem(self.accelerator_type, self.num_accelerators)
            if problem:
                raise ValueError(problem)
        return self


class LogChunkIn(Schema):
    attempt: int = Field(default=1, ge=1, le=1000)
    node: int = Field(default=0, ge=0, le=4096)
    host: str = Field(default="", max_length=255)
    seq: int = Field(ge=0, le=10_000_000)
    text: str


class GpuProcessIn(BaseModel):
    _no_nul = field_validator("*", mode="before")(refuse_nul)
    pid: int = Field(ge=0, le=2**31)
    used_memory_bytes: int | None = Field(default=None, ge=0, le=2**50)
    run: str = Field(default="", max_length=200, description="AIRBOARD_RUN_ID found in the process environment.")


class GpuSampleIn(BaseModel):
    # The two free-text fields only: a NUL anywhere else already fails its number, time or
    # enum parsing (with the field named), and a validator on "*" was called 80,000 times
    # for a 10,000-row batch, a third of its validation time.
    _no_nul = field_validator("run", "host", mode="before")(refuse_nul)
    run: ExternalId
    run_source: RunSource | None = Field(
        default=None, description="Left out: the key's own source (`local` unless the key was granted another)."
    )
    attempt: int | None = Field(default=None, ge=1, le=1000, description="Default: the run's latest attempt.")
    node: int = Field(default=0, ge=0, le=4096)
    host: str = Field(default="", max_length=255)
    gpu: int = Field(ge=0, le=255)
    ts: Timestamp
    utilization_gpu: Annotated[float | None, bounds(0, 100)]
    utilization_memory: Annotated[float | None, bounds(0, 100)]
    memory_used_bytes: Annotated[int | None, Field(default=None, ge=0, le=2**50)]
    memory_total_bytes: Annotated[int | None, Field(default=None, ge=0, le=2**50)]
    power_watts: Annotated[float | None, bounds(0, 10_000)]
    power_limit_watts: Annotated[float | None, bounds(0, 10_000)]
    temperature_c: Annotated[float | None, bounds(-50, 200)]
    sm_clock_mhz: Annotated[float | None, bounds(0, 100_000)]
    mem_clock_mhz: Annotated[float | None, bounds(0, 100_000)]
    sm_active: Annotated[float | None, bounds(0, 100)]
    tensor_active: Annotated[float | None, bounds(0, 100)]
    throttle_reasons: Annotated[int | None, Field(default=None, ge=0, le=2**63 - 1)]
    ecc_corrected: Annotated[int | None, Field(default=None, ge=0, le=2**63 - 1)]
    ecc_uncorrected: Annotated[int | None, Field(default=None, ge=0, le=2**63 - 1)]
    pcie_tx_kbps: Annotated[float | None, bounds(0, 1e9)]
    pcie_rx_kbps: Annotated[float | None, bounds(0, 1e9)]
    processes: list[GpuProcessIn] | None = Field(default=None, max_length=1000)
    # NVLink, all links, KB/s (GPM NVLINK_TOTAL_*_PER_SEC x 1024); a B200's NVLink 5 tops out
    # near 900 GB/s each way, under 1e9 KB/s, so the bound is the PCIe fields' with headroom.
    nvlink_tx_kbps: Annotated[float | None, bounds(0, 1e10)]
    nvlink_rx_kbps: Annotated[float | None, bounds(0, 1e10)]


# The push's body. The HTTP push reads it with msgspec first (runs/telemetry/sample_structs.py: the same
# values for a strict subset of what this accepts); this model decides the rest and words every 422.
class GpuSampleBatchIn(BaseModel):
    source: TelemetrySource = TelemetrySource.API
    samples: list[GpuSampleIn] = Field(min_length=1)


class MetricPointIn(BaseModel):
    _no_nul = field_validator("*", mode="before")(refuse_nul)
    run: ExternalId
    run_source: RunSource | None = Field(
        default=None, description="Left out: the key's own source (`local` unless the key was granted another)."
    )
    key: str = Field(min_length=1, max_length=250)
    step: int = Field(default=0, ge=-(2**63), le=2**63 - 1)
    ts: Timestamp
    value: Annotated[float | None, BeforeValidator(_metric_value)]

    @field_validator("value")
    @classmethod
    def _nan_is_missing(cls, value: float | None) -> float | None:
        # Stored as NULL: SQLite cannot hold NaN, and a chart gap is the honest picture.
        if value is not None and not math.isfinite(value):
            return None
        return value


class MetricBatchIn(BaseModel):
    points: list[MetricPointIn] = Field(min_length=1)


class NodeOut(Schema):
    index: int
    host: str
    status: str
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None


class AttemptOut(Schema):
    number: int
    status: str
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    state_message: str
    mlflow_run_id: str
    nodes: list[NodeOut]


class RunBilledOut(Schema):
    """What the provider's usage records linked to the run billed, at list price."""

    usd: str
    kind: Literal["billed"]
    as_of: datetime
    unpriced: list[str] = Field(description="Usage records without a list price, when any.")
    records: int = Field(description="Usage records linked to the run (a reserved pool's share included).")


class RunCostOut(Schema):
    """The run's cost as its page shows it (`billing.engine.run_costs`): the estimate, and the bill when known."""

    usd: str = Field(description="The estimate from the price book, an exact decimal.")
    kind: Literal["estimated", "lower bound"] = Field(
        description="'lower bound' when something had no price or was counted at its least (see `reasons`)."
    )
    reasons: list[str] = Field(description="Why the estimate is a lower bound; empty when it is not.")
    as_of: datetime
    running: bool = Field(description="True while the run still accrues: the figure is so far.")
    billed: RunBilledOut | None = Field(description="Null until usage records linked to the run are imported.")


class RunOut(Schema):
    id: int
    source: str
    external_id: str
    team: str
    creator: str
    experiment_name: str
    status: str
    accelerator_type: str
    instance_type: str
    num_accelerators: int
    gpus_per_node: int
    region: str
    home_region: str
    submitted_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    timeout_minutes: int | None
    max_retries: int
    usage_policy_name: str
    mlflow_run_id: str
    mlflow_url: str
    url: str
    cost: RunCostOut | None = Field(
        None, description="The run's cost (GET endpoints); null in a write's answer: GET the run for it."
    )


class RunDetailOut(RunOut):
    parameters: dict[str, Any]
    state_message: str
    attempts: list[AttemptOut]


class UpsertOut(Schema):
    created: bool
    ignored: list[str] = Field(description="Fields not applied, with why (for example a stale status).")
    run: RunDetailOut


class LogChunkOut(Schema):
    status: str = Field(description="'stored' or 'duplicate'.")
    attempt: int
    node: int
    seq: int
    lines: int


class BatchOut(Schema):
    id: int
    kind: str
    status: str
    rows: int
    duplicate: bool = Field(description="True when this exact batch was received before.")
    inserted: int | None
    duplicates: int | None
    received_at: datetime
    processed_at: datetime | None


# The most JSON text an event's details may hold: an XID number and a few words, not a dump.
MAX_EVENT_DETAILS_CHARS = 4000


class RunEventIn(BaseModel):
    """A GPU event the node agent saw (`events` of a push): a GPU that fell off the bus, or an Xid."""

    _no_nul = field_validator("run", "host", "gpu_uuid", "message", mode="before")(refuse_nul)
    kind: Literal["gpu_lost", "xid"]
    run: ExternalId
    run_source: RunSource | None = Field(
        default=None, description="Left out: the key's own source (`local` unless the key was granted another)."
    )
    attempt: int | None = Field(default=None, ge=1, le=1000)
    node: int = Field(default=0, ge=0, le=4096)
    host: str = Field(default="", max_length=255)
    gpu: int | None = Field(default=None, ge=0, le=255)
    gpu_uuid: str = Field(default="", max_length=100)
    ts: Timestamp
    message: str = Field(default="", max_length=2000)
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("details")
    @classmethod
    def _storable(cls, details: dict[str, Any]) -> dict[str, Any]:
        # A JSON column holds neither NaN, a NUL nor a lone surrogate; and details stay small.
        try:
            text = json.dumps(details, allow_nan=False, ensure_ascii=False)
            text.encode("utf-8")
        except (ValueError, UnicodeEncodeError):
            raise ValueError("must be JSON without NaN, infinities or lone surrogates") from None
        if "\\u0000" in text:
            raise ValueError("contains a NUL (U+0000) character")
        if len(text) > MAX_EVENT_DETAILS_CHARS:
            raise ValueError(f"is longer than {MAX_EVENT_DETAILS_CHARS} characters of JSON")
        return details


class GpuSamplesDroppedOut(Schema):
    """The answer to a push with `bad_rows=drop`: the batch of the usable rows, and what was dropped."""

    batch: BatchOut | None = Field(description="None when no row was usable.")
    rows: int
    dropped_rows: int
    events: int
    dropped_events: int
    problems: list[str] = Field(description="The first problems, one per dropped row or event.")


class TelemetryFileIn(Schema):
    """A telemetry file a team already has: nvidia-smi CSV, nvidia-smi dmon, dcgmi dmon or DCGM exporter text."""

    text: str = Field(min_length=1)
    format: str = Field(default="auto", pattern=r"^(auto|nvidia-smi-csv|dmon|dcgmi-dmon|dcgm)$")
    attempt: int | None = Field(default=None, ge=1, le=1000)
    node: int = Field(default=0, ge=0, le=4096)
    start: Timestamp | None = Field(default=None, description="Time of the first sample when the file has none.")
    fields: list[str] | None = Field(
        default=None, max_length=200, description="The --query-gpu list of a noheader CSV."
    )
    tz: str | None = Field(
        default=None,
        max_length=64,
        description="IANA zone of the file's local timestamps (UTC if absent).",
    )


class LineProblemOut(Schema):
    line: int
    message: str


class TelemetryFileOut(BatchOut):
    format: str
    skipped: list[LineProblemOut]
