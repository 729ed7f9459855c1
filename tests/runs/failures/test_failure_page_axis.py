"""The failure page: one panel per MLflow metric, and the log's evidence line on the charts' time axis."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from runs.failures.logtime import line_time
from runs.models import MetricPoint
from tests.conftest import T0, World
from tests.runs.failures.test_failures_page import oom_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2026-11-02T09:40:00Z torch.OutOfMemoryError", datetime(2026, 11, 2, 9, 40, tzinfo=UTC)),
        ("2026-11-02 09:40:01,512 ERROR x", datetime(2026, 11, 2, 9, 40, 1, 512000, tzinfo=UTC)),
        ("[2026-11-02 11:40:00+02:00] rank 3", datetime(2026, 11, 2, 9, 40, tzinfo=UTC)),
        ("2026-11-02T09:40:00.123456789 UTC x", datetime(2026, 11, 2, 9, 40, 0, 123456, tzinfo=UTC)),
        ("step 12 loss 2.1", None),
        ("2026-13-02 09:40:00 not a date", None),
        ("x" * 100_000, None),
    ],
)
def test_a_line_states_its_time_or_has_none(line: str, expected: datetime | None) -> None:
    assert line_time(line) == expected


def _figures(html: str) -> dict[str, dict]:
    scripts = re.findall(r'<script id="(fig-pm-[\w-]+)" type="application/json">(.*?)</script>', html, re.S)
    return {fig_id: json.loads(body) for fig_id, body in scripts}


def test_each_metric_has_its_own_titled_panel_on_the_gpu_panels_time_axis(world: World) -> None:
    run = oom_run(world)
    for key, scale in (("loss", 2.0), ("lr", 1e-4), ("system/gpu_0_utilization_percentage", 90.0)):
        MetricPoint.objects.bulk_create(
            MetricPoint(run=run, key=key, step=m, ts=T0 + timedelta(minutes=m), value=scale * (1 + m / 100))
            for m in range(25, 41)
        )
    html = world.client_for(world.alice).get(f"/runs/{run.pk}/failure/").content.decode()
    figures = _figures(html)
    metric_panels = [f for fig_id, f in figures.items() if fig_id.startswith("fig-pm-metric-")]
    # Training signals first, system metrics last, each alone on its axis with its key as title.
    assert [f["layout"]["title"]["text"] for f in metric_panels] == [
        "loss", "lr", "system/gpu_0_utilization_percentage"
    ]  # fmt: skip
    assert all(len(f["data"]) == 1 for f in metric_panels)
    # Every panel, GPU and metric, spans the same window: the failure sits at one x on all of them.
    ranges = {json.dumps(f["layout"]["xaxis"]["range"]) for f in figures.values()}
    assert len(ranges) == 1, ranges
    assert all(any(a["text"] == "failure" for a in f["layout"]["annotations"]) for f in figures.values())


def test_the_evidence_lines_own_time_is_marked_and_shown_in_the_log(world: World) -> None:
    run = oom_run(world)
    run.failure.failed_at = run.ended_at  # the source's end, 20 minutes after the OOM line
    run.failure.save()
    MetricPoint.objects.create(run=run, key="loss", step=1, ts=T0 + timedelta(minutes=50), value=1.0)
    html = world.client_for(world.alice).get(f"/runs/{run.pk}/failure/").content.decode()
    loss = _figures(html)["fig-pm-metric-0"]
    marks = {a["text"]: a["x"] for a in loss["layout"]["annotations"]}
    assert set(marks) == {"failure", f"log line {run.failure.line}"}
    assert marks[f"log line {run.failure.line}"].startswith("2026-11-02 09:40:00")
    assert '<time class="lt" data-format="clock" datetime="2026-11-02T09:40:00+00:00"' in html
