"""Read API: a run's MLflow metrics (thinned, spikes kept) and its failure analysis, scoped as pages."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dashboard.models import ApiKeyRole
from runs.api import thin
from runs.choices import RunStatus
from runs.failures.classify_pass import classify_run
from runs.models import LogChunk, MetricPoint
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def _loss(run, n: int, spike_at: int | None = None) -> None:
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, key="loss", step=s, ts=T0 + timedelta(seconds=s),
                    value=50.0 if s == spike_at else 4.0 - s / n)
        for s in range(n)
    )  # fmt: skip


def test_thinning_keeps_each_buckets_extremes_and_the_ends() -> None:
    points = [(s, T0, float(s % 7)) for s in range(1000)]
    points[503] = (503, T0, 999.0)
    kept = thin(points, 40)
    assert len(kept) <= 40
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert (503, T0, 999.0) in kept
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)
    assert thin(points[:10], 40) == points[:10]


def test_metrics_come_back_thinned_with_the_spike_and_scoped_to_the_team(world: World) -> None:
    run = make_run(world.vision, "ft-1")
    _loss(run, 5000, spike_at=4321)
    MetricPoint.objects.create(run=run, key="lr", step=0, ts=T0, value=None)
    api = world.api(world.vision, ApiKeyRole.READ)
    body = api.get("/api/v1/runs/ft-1/metrics?max_points=100").json()
    assert body["run"] == "ft-1"
    series = {m["key"]: m for m in body["metrics"]}
    assert set(series) == {"loss", "lr"}
    loss = series["loss"]
    assert loss["points_stored"] == 5000 and len(loss["points"]) <= 100
    assert max(p["value"] for p in loss["points"]) == 50.0
    assert series["lr"]["points"] == [{"step": 0, "ts": "2026-11-02T09:00:00Z", "value": None}]
    only = api.get("/api/v1/runs/ft-1/metrics?key=lr").json()
    assert [m["key"] for m in only["metrics"]] == ["lr"]
    # Another team's key and user get what an unknown id gets.
    assert world.api(world.nlp, ApiKeyRole.READ).get("/api/v1/runs/ft-1/metrics").status_code == 404
    assert world.client_for(world.charlie).get("/api/v1/runs/ft-1/metrics").status_code == 404
    assert world.client_for(world.bob).get("/api/v1/runs/ft-1/metrics").status_code == 200


def test_a_bad_max_points_is_a_422_naming_it(world: World) -> None:
    make_run(world.vision, "ft-1")
    response = world.api(world.vision, ApiKeyRole.READ).get("/api/v1/runs/ft-1/metrics?max_points=1000000")
    assert response.status_code == 422
    assert "max_points" in response.content.decode()


def test_the_failure_analysis_reads_as_the_failure_page_shows_it(world: World) -> None:
    run = make_run(world.vision, "oom-1", status=RunStatus.FAILED)
    node = run.attempts.get().nodes.get()
    text = "step 1\nstep 2\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    LogChunk.objects.create(node=node, seq=0, text=text, line_count=3)
    classify_run(run)
    api = world.api(world.vision, ApiKeyRole.READ)
    body = api.get("/api/v1/runs/oom-1/failure").json()
    assert body["class_id"] == run.failure.class_id and body["line"] == run.failure.line
    assert "CUDA out of memory" in body["evidence"]
    assert body["url"] == f"/runs/{run.pk}/failure/"
    assert world.api(world.nlp, ApiKeyRole.READ).get("/api/v1/runs/oom-1/failure").status_code == 404
    make_run(world.vision, "ok-1")
    missing = api.get("/api/v1/runs/ok-1/failure")
    assert missing.status_code == 404 and "no failure analysis" in missing.json()["detail"]
