"""The overview costs the same queries, none on raw samples, however many raw samples the last hour holds."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.choices import RunStatus
from runs.models import GpuSample, Node, Run
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(hours=2)


def running(world: World, name: str) -> Run:
    return make_run(world.vision, name, status=RunStatus.RUNNING, started_at=NOW - timedelta(hours=2), ended_at=None)


def hung(run: Run, seconds: range) -> None:
    node = Node.objects.get(attempt__run=run)
    values = {"utilization_gpu": 100.0, "sm_active": 1.0, "power_watts": 100.0, "power_limit_watts": 700.0}
    store_gpu_samples(
        [
            GpuSample(run=run, node=node, gpu_index=g, ts=NOW - timedelta(seconds=s), **values)
            for g in range(8)
            for s in seconds
        ]
    )


def test_overview_queries_do_not_grow_with_raw_samples(world: World) -> None:
    runs = [running(world, f"live-{i}") for i in range(3)]
    for run in runs:
        hung(run, range(900, -1, -60))  # 15 samples a GPU
    client = world.client_for(world.alice)

    def overview() -> tuple[str, list[str]]:
        with CaptureQueriesContext(connection) as captured, time_machine.travel(NOW, tick=False):
            html = client.get("/").content.decode()
        return html, [q["sql"] for q in captured.captured_queries]

    sparse_html, sparse = overview()
    for run in runs:
        hung(run, range(3600, 900, -5))  # an hour at 0.2 Hz behind them: 540 samples a GPU more
    dense_html, dense = overview()
    assert len(dense) == len(sparse)
    assert not [sql for sql in dense if "runs_gpusample" in sql]  # neither raw table, hot or compacted
    assert 'id="stalls"' in sparse_html and 'id="stalls"' in dense_html
    assert dense_html.count("≥ 60") == 3  # the stall now spans the whole window it speaks for
