"""The run page's frame reads its GPUs' life sums once, no hour rollup: panels, coverage and node skew share it.

The three answers (which signals were reported, which nodes reported, each node's mean
utilization) each scanned every hour rollup of the run: ~26 ms for a 13-day 64-GPU run
(bench/run_page.py), the whole of the frame's difference from a 1-GPU run's. One scan (~9 ms)
still grew with GPUs x hours; the GpuLife rows (runs/telemetry/gpu_life.py) are one a GPU.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs import glance
from runs.choices import RunStatus
from runs.models import GpuHour, GpuMinute
from runs.telemetry import charts, gpu_life, life
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def _rollups(run, node, gpu: int, util: float, hours: int = 3, **fields: float) -> None:
    for h in range(hours):
        stats = {"samples": 3600, "utilization_gpu_avg": util, "utilization_gpu_max": util + 5, **fields}
        GpuHour.objects.create(run=run, node=node, gpu_index=gpu, hour=T0 + timedelta(hours=h), **stats)
        GpuMinute.objects.create(run=run, node=node, gpu_index=gpu, minute=T0 + timedelta(hours=h), **stats)


def test_the_frame_reads_one_row_a_gpu_once_and_no_hour_rollup(world: World) -> None:
    # Running: its under-use flag reads the last 30 minutes' minutes. (An ended run's flag reads
    # its GPUs' sample-weighted means over the hours, runs/telemetry/underuse.py: a second scan.)
    run = make_run(world.vision, num_accelerators=16, status=RunStatus.RUNNING, ended_at=None)
    attempt = run.attempts.get()
    first, second = attempt.nodes.get(), attempt.nodes.create(index=1, host="10.0.0.2")
    for gpu in range(8):
        _rollups(run, first, gpu, 90.0)
        _rollups(run, second, gpu, 50.0, power_watts_max=300.0)
    gpu_life.rebuild([run.pk])  # the hours were written here, not by the ingest path
    client = world.client_for(world.alice)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("run_detail", args=[run.pk]))
    assert page.status_code == 200
    hour_reads = [q["sql"] for q in queries.captured_queries if '"runs_gpuhour"' in q["sql"]]
    assert not hour_reads, hour_reads
    life_reads = [q["sql"] for q in queries.captured_queries if 'FROM "runs_gpulife"' in q["sql"]]
    assert len(life_reads) == 1, life_reads
    # The three answers read from it are the ones each gave alone.
    assert page.context["coverage"].nodes_reporting == 2
    assert {n.index: round(n.skew, 1) for n in page.context["node_skew"]} == {0: 20.0, 1: -20.0}
    assert {"utilization_gpu", "power_watts"} <= page.context["signals"].signals
    # One node picked: only its signals (node 0 never reported power).
    picked = client.get(reverse("run_detail", args=[run.pk]), {"gpu_node": "0"})
    assert "power_watts" not in picked.context["signals"].signals


def test_a_node_with_minutes_but_no_hours_still_answers(world: World) -> None:
    run = make_run(world.vision, num_accelerators=16)
    attempt = run.attempts.get()
    first, second = attempt.nodes.get(), attempt.nodes.create(index=1, host="10.0.0.2")
    _rollups(run, first, 0, 80.0)
    gpu_life.rebuild([run.pk])
    # The other node's minutes only (its hour not rolled up): the page still lists its signal.
    GpuMinute.objects.create(run=run, node=second, gpu_index=0, minute=T0, samples=60, sm_active_max=40.0)
    found = life.life(run)
    assert set(found.nodes) == {first.pk}
    assert charts.signals_present(run, [second.pk], found) == {"sm_active"}
    assert charts.signals_present(run, None, found) == {"utilization_gpu"}
    assert glance.node_skew(run, found) == []  # one node with hours: no skew to show
