"""Read API of a run's GPU telemetry at a chosen resolution: `GET /api/v1/runs/{external_id}/telemetry`.

The numbers are the run page's charts', read by the same code:

- `view=envelope` (the default): `envelope.read_envelopes`, every GPU in scope (the run, or one
  `node`) folded into time buckets, each with the mean over GPUs and time and the lowest and
  highest value any GPU reported in it; the GPU whose mean over the window sits furthest out
  is named (`worst`), as on the panel.
- `view=gpus`: `charts.gpu_series`, one series per GPU (the page's "Show: each GPU"): raw
  samples, or each minute's or hour's highest value, thinned to `points` per series keeping
  every bucket's lowest and highest point.

Resolution: `points` buckets across the window (a panel that many pixels wide), or `step`
seconds a bucket; never finer than the tier read (1 s raw, 60 s minute rollups, 3,600 s hour
rollups), which the window and the resolution pick as for the charts (`envelope.pick_tier`).
The answer is bounded whatever the window: at most MAX_POINTS (+1) buckets a field, and at
most MAX_ANSWER_POINTS points in a per-GPU answer (fewer per series for many GPUs). The
window is cut to the run's telemetry (`tier_reads.extent`), so a window of centuries reads what
a run has and no more; the answer names the window it read.

Scoped as the pages are (`dashboard.api.core.find_run`): another team's run answers 404, as an
unknown id does. Values are in their stored units (`UNITS`). For users: docs/run-telemetry-api.md.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Literal

from django.db.models import Count
from django.http import HttpRequest
from ninja import Query, Router, Schema
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import Field

from dashboard.api.core import find_run, read_auth
from dashboard.kit.schemas import ERRORS, Timestamp
from runs.choices import RunSource
from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, Run
from runs.telemetry import charts, envelope, tier_reads

router = Router(tags=["runs"])

# Buckets a field's answer holds at most (a panel's widest), and when neither points nor step is asked.
MAX_POINTS = envelope.MAX_WIDTH
DEFAULT_POINTS = envelope.DEFAULT_WIDTH
# Points a per-GPU answer holds at most, all fields and GPUs together (~4.5 MB of JSON).
MAX_ANSWER_POINTS = 100_000
# The largest step accepted: a century, past any window a run has.
MAX_STEP_SECONDS = 100 * 366 * 86_400
# Node indexes as the run page accepts them.
MAX_NODE_INDEX = 1_000_000

# Each field's stored unit (runs.models.GpuSample): the API gives values as stored; the charts
# scale some of them for display (memory in GB, PCIe in MB/s, NVLink in GB/s).
UNITS = {
    "utilization_gpu": "%",
    "utilization_memory": "%",
    "memory_used_bytes": "bytes",
    "power_watts": "W",
    "temperature_c": "°C",
    "sm_clock_mhz": "MHz",
    "sm_active": "%",
    "tensor_active": "%",
    "pcie_tx_kbps": "KB/s",
    "pcie_rx_kbps": "KB/s",
    "nvlink_tx_kbps": "KB/s",
    "nvlink_rx_kbps": "KB/s",
}

TelemetryField = Literal[ROLLUP_FIELDS]  # type: ignore[valid-type]


class TelemetryQuery(Schema):
    field: list[TelemetryField] = Field(
        default_factory=lambda: ["utilization_gpu"],
        max_length=len(ROLLUP_FIELDS),
        description="Telemetry fields to read (repeat the parameter); utilization_gpu when left out.",
    )
    start: Timestamp | None = Field(None, description="ISO 8601 time; the run's first sample when left out.")
    end: Timestamp | None = Field(None, description="ISO 8601 time; the run's last sample when left out.")
    points: int | None = Field(
        None, ge=1, le=MAX_POINTS, description=f"Buckets across the window (default {DEFAULT_POINTS}); or give step."
    )
    step: int | None = Field(None, ge=1, le=MAX_STEP_SECONDS, description="Seconds a bucket; or give points.")
    view: Literal["envelope", "gpus"] = Field(
        "envelope", description="envelope: every GPU folded into mean, min and max; gpus: one series per GPU."
    )
    node: int | None = Field(
        None, ge=0, le=MAX_NODE_INDEX, description="One node's GPUs (its index); all when left out."
    )
    source: RunSource | None = None


class EnvelopePointOut(Schema):
    t: datetime = Field(description="The bucket's start.")
    mean: float
    min: float
    max: float


class GpuPointOut(Schema):
    t: datetime
    value: float


class GpuSeriesOut(Schema):
    name: str
    points: list[GpuPointOut]


class WorstOut(Schema):
    name: str
    mean: float
    others: float
    lowest_is_worst: bool


class FieldOut(Schema):
    field: str
    unit: str
    tier: Literal["raw", "minute", "hour"] | None = Field(description="The data read; null when there is none.")
    bucket_seconds: float | None = Field(description="envelope: each bucket's width.")
    gpus: int = Field(description="GPUs in scope that reported.")
    worst: WorstOut | None = Field(description="envelope: the GPU whose mean over the window sits furthest out.")
    points: list[EnvelopePointOut] = Field(description="envelope: the buckets that hold data, in time order.")
    series: list[GpuSeriesOut] = Field(description="gpus: one series per GPU, in attempt, node and GPU order.")
    points_per_series: int | None = Field(description="gpus: the most points each series was thinned to.")


class TelemetryOut(Schema):
    run: str
    source: str
    view: str
    node: int | None
    start: datetime | None = Field(description="The window read (cut to the run's telemetry); null when it has none.")
    end: datetime | None
    fields: list[FieldOut]


def _refuse(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise NinjaValidationError([{"loc": ("query", name), "msg": message} for name, message in problems])


def _window(run: Run, start: datetime | None, end: datetime | None) -> tuple[datetime, datetime] | None:
    """[start, end] cut to the run's telemetry; None when the run has none there."""
    found = tier_reads.extent(run)
    if found is None:
        return None
    start = max(start, found[0]) if start is not None else found[0]
    end = min(end, found[1]) if end is not None else found[1]
    return (start, end) if start <= end else None


def gpus_in_scope(run: Run, node_ids: list[int] | None) -> int:
    """GPUs of the run (or of `node_ids`) that reported: from the hour rollups, else the minutes."""
    for model in (GpuHour, GpuMinute):
        rows = model.objects.filter(run=run)
        if node_ids is not None:
            rows = rows.filter(node_id__in=node_ids)
        count = rows.values("node_id", "gpu_index").distinct().aggregate(n=Count("*"))["n"]
        if count:
            return count
    return max(run.gpus_per_node, 1)


def _empty(field: str) -> dict[str, Any]:
    return {"field": field, "unit": UNITS[field], "tier": None, "bucket_seconds": None, "gpus": 0, "worst": None,
            "points": [], "series": [], "points_per_series": None}  # fmt: skip


def _envelope_fields(run: Run, fields: list[str], start: datetime, end: datetime, query: TelemetryQuery,
                     node_ids: list[int] | None, names: dict) -> list[dict[str, Any]]:  # fmt: skip
    found = envelope.read_envelopes(
        run, fields, start, end, query.points or DEFAULT_POINTS, node_ids=node_ids, names=names,
        bucket_seconds=query.step,
    )  # fmt: skip
    out = []
    for field in fields:
        env = found.get(field)
        if env is None or not env.has_values:
            out.append(_empty(field))
            continue
        worst = env.worst
        out.append(
            _empty(field) | {
                "tier": env.tier, "bucket_seconds": env.bucket_seconds, "gpus": env.gpus,
                "worst": None if worst is None else
                {"name": worst.name, "mean": worst.mean, "others": worst.others, "lowest_is_worst": worst.low},
                "points": [
                    {"t": datetime.fromtimestamp(x / 1000, UTC), "mean": mean, "min": low, "max": high}
                    for x, mean, low, high in zip(env.x, env.mean, env.low, env.high, strict=True)
                ],
            }
        )  # fmt: skip
    return out


def _gpu_fields(run: Run, fields: list[str], start: datetime, end: datetime, query: TelemetryQuery,
                node_ids: list[int] | None, names: dict) -> list[dict[str, Any]]:  # fmt: skip
    span = max((end - start).total_seconds(), 1.0)
    # Two points a bucket (its lowest and highest), as the charts' per-GPU view thins.
    wanted = query.points or (2 * math.ceil(span / query.step) if query.step else DEFAULT_POINTS)
    gpus = gpus_in_scope(run, node_ids)
    per_series = min(wanted, MAX_ANSWER_POINTS // (len(fields) * gpus))
    if per_series < 2:
        _refuse([("node", f"the run has {gpus} GPUs in scope: too many series for one per-GPU answer of "
                          f"{len(fields)} field(s); ask one node, or fewer fields")])  # fmt: skip
    out = []
    for field in fields:
        found = charts.gpu_series(run, field, start, end, per_series, node_ids=node_ids, names=names)
        series = [
            {"name": s.name, "points": [
                {"t": datetime.fromisoformat(x).replace(tzinfo=UTC), "value": y}
                for x, y in zip(s.x, s.y, strict=True) if y is not None  # a gap is no point
            ]}
            for s in found if s.has_values
        ]  # fmt: skip
        if not series:
            out.append(_empty(field))
            continue
        out.append(_empty(field) | {"tier": found[0].tier, "gpus": len(series), "series": series,
                                    "points_per_series": per_series})  # fmt: skip
    return out


@router.get(
    "/runs/{external_id}/telemetry",
    response={200: TelemetryOut, **ERRORS},
    auth=read_auth,
    summary="A run's GPU telemetry at a chosen resolution: the run page's charts as numbers",
)
def run_telemetry(request: HttpRequest, external_id: str, query: Query[TelemetryQuery]) -> dict[str, Any]:
    """GPU telemetry of a run over [start, end], at `points` buckets or `step` seconds a bucket.

    `view=envelope` (default): per bucket the mean over the GPUs in scope and the lowest and
    highest value any of them reported, as the run page's panels draw it; `view=gpus`: one
    series per GPU (raw samples, or each minute's or hour's highest value), at most `points`
    each. `node` keeps one node's GPUs. The window is cut to the run's telemetry and the tier
    (raw, minute, hour) follows the window and resolution as the charts' does; the answer
    names both. Bounded whatever the window: at most 2,000 (+1) buckets a field, 100,000
    points in a per-GPU answer. Values in their stored units (`unit`).
    """
    run = find_run(request, external_id, query.source)
    fields = list(dict.fromkeys(query.field))
    problems = []
    if query.points is not None and query.step is not None:
        problems.append(("step", "give points or step, not both"))
    if query.start is not None and query.end is not None and query.end <= query.start:
        problems.append(("end", "must be after start"))
    names = charts.series_names(run)
    node_ids = charts.node_pks(names, query.node)
    if node_ids == []:
        indexes = ", ".join(str(i) for i in sorted({index for _, index, _ in names.values()}))
        problems.append(("node", f"must be one of this run's node indexes ({indexes or 'none yet'})"))
    _refuse(problems)
    window = _window(run, query.start, query.end)
    answer: dict[str, Any] = {"run": run.external_id, "source": run.source, "view": query.view, "node": query.node,
                              "start": None, "end": None}  # fmt: skip
    if window is None:
        return answer | {"fields": [_empty(field) for field in fields]}
    start, end = window
    if query.step is not None:
        span = max((end - start).total_seconds(), 1.0)
        if span / query.step > MAX_POINTS:
            fewest = math.ceil(span / MAX_POINTS)
            _refuse([("step", f"{query.step} s over this {span:,.0f} s window is more than {MAX_POINTS} buckets; "
                              f"ask step={fewest} or more, or a shorter window")])  # fmt: skip
    read = _envelope_fields if query.view == "envelope" else _gpu_fields
    return answer | {"start": start, "end": end, "fields": read(run, fields, start, end, query, node_ids, names)}
