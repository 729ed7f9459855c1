"""Runs, their attempts and nodes, logs, MLflow metrics and GPU telemetry.

One module per concern; every model is importable from here, as before."""

from __future__ import annotations

from runs.models.clusters import Cluster, ClusterEvent
from runs.models.collection import CollectorState, IngestBatch, MetricPoint, MlflowRun
from runs.models.failures import FailureAnalysis, PostMortem
from runs.models.record import (
    CLI_RUNTIME_CAP,
    MAX_RUNTIME,
    NOTEBOOK_RUNTIME_CAP,
    Attempt,
    LogChunk,
    LogPhrase,
    Node,
    Run,
    RunEvent,
    RunQuerySet,
)
from runs.models.telemetry import (
    MEAN_SCALE,
    ROLLUP_FIELDS,
    UTILIZATION_SCALE,
    GpuHour,
    GpuLife,
    GpuMinute,
    GpuRollupStats,
    GpuSample,
    GpuSampleBlock,
    GpuStreak,
    RunEnvelope,
    RunUtilization,
    mean_utilization,
)

__all__ = [
    "CLI_RUNTIME_CAP",
    "MAX_RUNTIME",
    "MEAN_SCALE",
    "NOTEBOOK_RUNTIME_CAP",
    "ROLLUP_FIELDS",
    "UTILIZATION_SCALE",
    "Attempt",
    "Cluster",
    "ClusterEvent",
    "CollectorState",
    "FailureAnalysis",
    "GpuHour",
    "GpuLife",
    "GpuMinute",
    "GpuRollupStats",
    "GpuSample",
    "GpuSampleBlock",
    "GpuStreak",
    "IngestBatch",
    "LogChunk",
    "LogPhrase",
    "MetricPoint",
    "MlflowRun",
    "Node",
    "PostMortem",
    "Run",
    "RunEnvelope",
    "RunEvent",
    "RunQuerySet",
    "RunUtilization",
    "mean_utilization",
]
