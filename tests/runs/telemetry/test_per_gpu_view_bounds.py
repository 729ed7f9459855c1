"""The per-GPU view ("show each GPU", the node selector) costs what the panel's pixels allow (issue 30).

A panel shares charts.PANEL_POINTS among its GPUs: the 30 minutes of a 64-GPU run read the
minute rollups (30 points a GPU) instead of 115,200 raw samples, raw samples come back once the
window is short enough for the budget, and neither the queries nor the bytes grow with the
GPUs or the samples.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import GpuSample, Node, Run
from runs.telemetry import charts
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

MINUTES = 30


def build(world: World, name: str, nodes: int, every: int, minutes: int = MINUTES) -> Run:
    """A run of `nodes` x 8 GPUs reporting every `every` s for `minutes`; one sample of the last GPU spikes."""
    run = make_run(world.vision, name, num_accelerators=8 * nodes, ended_at=T0 + timedelta(minutes=minutes))
    attempt = run.attempts.get()
    made = [attempt.nodes.get(), *(Node.objects.create(attempt=attempt, index=i) for i in range(1, nodes))]
    seconds = range(0, minutes * 60, every)
    spike = (made[-1].pk, 7, seconds[len(seconds) // 2])
    store_gpu_samples([
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s),
                  utilization_gpu=100.0 if (node.pk, gpu, s) == spike else 40.0 + (s // every + gpu) % 20)
        for node in made for gpu in range(8) for s in seconds
    ])  # fmt: skip
    return run


def each_gpu(world: World, run: Run, start_minute: int, end_minute: int, **params: str) -> tuple[int, int, dict]:
    """(queries, bytes, panel) of the utilization panel drawn one trace per GPU, as charts.js asks for it."""
    client = world.client_for(world.alice)
    url = reverse("run_telemetry", args=[run.pk])
    query = {"fields": "utilization_gpu", "view": "gpus", "width": "1000",
             "from": (T0 + timedelta(minutes=start_minute)).isoformat(),
             "to": (T0 + timedelta(minutes=end_minute)).isoformat(), **params}  # fmt: skip
    client.get(url, query)  # the session and the content types, read once
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, query)
    assert response.status_code == 200, response.content[:200]
    (panel,) = response.json()["panels"]
    return len(queries), len(response.content), panel


def points(panel: dict) -> int:
    return sum(len(trace["y"]) for trace in panel["figure"]["data"] if trace.get("y"))


def highest(panel: dict) -> float:
    return max(v for trace in panel["figure"]["data"] for v in trace.get("y") or [] if v is not None)


def test_thirty_minutes_of_64_gpus_send_no_more_than_8_gpus_and_keep_the_spike(world: World) -> None:
    small = build(world, "gpus-8", nodes=1, every=1)
    big = build(world, "gpus-64", nodes=8, every=5)  # 8x the GPUs, 1.6x the samples in all
    small_queries, small_bytes, small_panel = each_gpu(world, small, 0, MINUTES)
    big_queries, big_bytes, big_panel = each_gpu(world, big, 0, MINUTES)
    assert 5 * GpuSample.objects.filter(run=big).count() == 8 * GpuSample.objects.filter(run=small).count()
    assert small_panel["tier"] == "raw"  # 8 GPUs x 1,800 samples fit the budget
    assert big_panel["tier"] == "minute"  # 64 x 360 do not: the minute rollups, 31 rows a GPU
    assert len([t for t in big_panel["figure"]["data"] if t.get("y")]) == 64
    assert big_queries <= small_queries  # the minute tier reads one table, the raw tier two
    assert points(big_panel) <= charts.PANEL_POINTS
    assert big_bytes <= small_bytes, (small_bytes, big_bytes)
    assert highest(big_panel) == highest(small_panel) == 100.0  # a one-second spike survives the rollup's max


def test_the_per_gpu_view_costs_the_same_with_3x_the_samples(world: World) -> None:
    sparse = build(world, "sparse", nodes=8, every=15)
    dense = build(world, "dense", nodes=8, every=5)
    sparse_queries, sparse_bytes, _ = each_gpu(world, sparse, 0, MINUTES)
    dense_queries, dense_bytes, _ = each_gpu(world, dense, 0, MINUTES)
    assert dense_queries == sparse_queries
    assert abs(dense_bytes - sparse_bytes) <= 0.05 * sparse_bytes, (sparse_bytes, dense_bytes)
    # One node's GPUs share the same budget: 8 series, so a node's 30 minutes are raw again.
    _, _, node_panel = each_gpu(world, dense, 0, MINUTES, gpu_node="7")
    assert node_panel["tier"] == "raw" and points(node_panel) <= charts.PANEL_POINTS
    assert highest(node_panel) == 100.0


def test_a_short_window_of_64_gpus_reads_raw_samples_within_the_budget(world: World) -> None:
    run = build(world, "gpus-64", nodes=8, every=1, minutes=6)
    # 3 minutes: 181 samples a GPU, under the 250 points each of 64 GPUs may send.
    _, _, panel = each_gpu(world, run, 2, 5)
    assert panel["tier"] == "raw"
    assert points(panel) <= charts.PANEL_POINTS
    assert max(len(trace["y"]) for trace in panel["figure"]["data"] if trace.get("y")) <= 250
    assert highest(panel) == 100.0  # the spike at minute 3


def test_the_budget_shares_points_among_the_gpus_in_scope(world: World) -> None:
    run = build(world, "gpus-16", nodes=2, every=60)
    assert charts.gpus_in_scope(run, T0 + timedelta(minutes=10)) == 16
    assert charts.gpus_in_scope(run, T0 - timedelta(minutes=10)) == 16  # before the data: its first minutes
    one = list(Node.objects.filter(attempt__run=run, index=1).values_list("pk", flat=True))
    assert charts.gpus_in_scope(run, None, one) == 8
    assert charts.points_per_series(16_000, 64, 2_000) == 250
    assert charts.points_per_series(16_000, 4, 2_000) == 2_000
    assert charts.points_per_series(16_000, 100_000, 2_000) == 2
