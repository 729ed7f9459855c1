"""Read API for what a run page shows besides the run: its MLflow metrics and its failure analysis.

Scoped as the pages are (runs.api.visible_run): a key reads its team's runs, a user their teams';
anything else answers 404 as an unknown id would. Payloads are bounded: a metric with more points
than asked for comes back as each bucket's first, lowest, highest and last point, so a loss spike
survives the thinning.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from pydantic import Field

from dashboard.api import read_auth
from dashboard.schemas import ERRORS
from runs.api import visible_run
from runs.choices import RunSource
from runs.models import FailureAnalysis, MetricPoint

router = Router(tags=["runs"])

# The most points of one metric an answer carries, and the default.
MAX_POINTS = 10_000
DEFAULT_POINTS = 1_000
# The most metric keys one answer carries (a run logging thousands of keys asks by key).
MAX_KEYS = 200


class MetricsQuery(Schema):
    key: list[str] = Field(default_factory=list, description="Metric keys to read (repeat); all when empty.")
    max_points: int = Field(DEFAULT_POINTS, ge=4, le=MAX_POINTS, description="Most points per metric.")
    source: RunSource | None = None


class MetricPointOut(Schema):
    step: int
    ts: datetime
    value: float | None


class MetricSeriesOut(Schema):
    key: str
    points_stored: int
    points: list[MetricPointOut]


class MetricsOut(Schema):
    run: str
    metrics: list[MetricSeriesOut]


def thin(points: list[tuple[int, datetime, float | None]], most: int) -> list[tuple[int, datetime, float | None]]:
    """At most `most` points in step order: per bucket its first, lowest, highest and last point.

    Linear in the points; a spike (the bucket's min or max) is always kept, NaN-logged values
    (None) only where they are a bucket's first or last.
    """
    if len(points) <= most:
        return points
    buckets = max(1, most // 4)
    size = -(-len(points) // buckets)
    kept: list[tuple[int, datetime, float | None]] = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        valued = [i for i, p in enumerate(chunk) if p[2] is not None]
        picks = {0, len(chunk) - 1}
        if valued:
            picks.add(min(valued, key=lambda i: chunk[i][2]))  # type: ignore[arg-type,return-value]
            picks.add(max(valued, key=lambda i: chunk[i][2]))  # type: ignore[arg-type,return-value]
        kept.extend(chunk[i] for i in sorted(picks))
    return kept[:most]


@router.get(
    "/runs/{external_id}/metrics",
    response={200: MetricsOut, **ERRORS},
    auth=read_auth,
    summary="A run's MLflow metrics, thinned to max_points per metric",
)
def run_metrics(request: HttpRequest, external_id: str, query: Query[MetricsQuery]) -> dict[str, Any]:
    run = visible_run(request, external_id, query.source)
    keys = query.key or list(
        MetricPoint.objects.filter(run=run).order_by("key").values_list("key", flat=True).distinct()[: MAX_KEYS + 1]
    )
    if len(keys) > MAX_KEYS:
        raise HttpError(422, f"The run logs more than {MAX_KEYS} metric keys; name the ones to read with ?key=.")
    series = []
    for key in keys:
        points = list(
            MetricPoint.objects.filter(run=run, key=key).order_by("step", "ts").values_list("step", "ts", "value")
        )
        if not points:
            continue
        shown = thin(points, query.max_points)
        series.append(
            {"key": key, "points_stored": len(points),
             "points": [{"step": s, "ts": ts, "value": v} for s, ts, v in shown]}
        )  # fmt: skip
    return {"run": run.external_id, "metrics": series}


class FailureOut(Schema):
    run: str
    class_id: str
    title: str
    attempt_number: int | None
    node_index: int | None
    line: int | None
    evidence: str
    signature: str
    remedy: str
    note: str
    failed_at: datetime | None
    confidence: float | None
    earlier_attempts: list[dict[str, Any]]
    telemetry: dict[str, Any]
    classified_at: datetime
    url: str


@router.get(
    "/runs/{external_id}/failure",
    response={200: FailureOut, **ERRORS},
    auth=read_auth,
    summary="A failed run's failure analysis: class, root-cause line, remedy",
)
def run_failure(request: HttpRequest, external_id: str, source: RunSource | None = None) -> dict[str, Any]:
    run = visible_run(request, external_id, source)
    analysis = FailureAnalysis.objects.filter(run=run).first()
    if analysis is None:
        raise HttpError(
            404, f"Run {external_id!r} has no failure analysis (it has not failed, or is not classified yet)."
        )
    fields = ("class_id", "title", "attempt_number", "node_index", "line", "evidence", "signature", "remedy",
              "note", "failed_at", "confidence", "earlier_attempts", "telemetry", "classified_at")  # fmt: skip
    out = {name: getattr(analysis, name) for name in fields}
    return {"run": run.external_id, "url": reverse("failure_detail", args=[run.pk]), **out}
