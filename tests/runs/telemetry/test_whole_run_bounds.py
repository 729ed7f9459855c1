"""The run page's panels cost the same queries and bytes whatever the run's GPUs and samples (issue 30).

A whole-run chart and a zoom of an 8-GPU run against those of a 64-GPU run with four times the
samples a GPU: the same number of queries, the same payload size within a few percent (the panel
is as wide as before, so it holds as many buckets), and the one-sample spike kept in both.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import GpuSample, Node, Run
from runs.telemetry import blocks
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

WIDTH = 100


def build(world: World, name: str, nodes: int, minutes: int, every: int) -> Run:
    """A run of `nodes` x 8 GPUs reporting every `every` s for `minutes`; one sample of the last GPU spikes."""
    run = make_run(world.vision, name, num_accelerators=8 * nodes, ended_at=T0 + timedelta(minutes=minutes))
    attempt = run.attempts.get()
    made = [attempt.nodes.get(), *(Node.objects.create(attempt=attempt, index=i) for i in range(1, nodes))]
    seconds = range(0, minutes * 60, every)
    spike = (made[-1].pk, 7, seconds[len(seconds) // 2])
    store_gpu_samples([
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s),
                  utilization_gpu=100.0 if (node.pk, gpu, s) == spike else 50.0 + (s // every + gpu) % 20,
                  memory_used_bytes=60_000_000_000 + gpu)
        for node in made for gpu in range(8) for s in seconds
    ])  # fmt: skip
    return run


def read(world: World, run: Run, **params: str) -> tuple[int, int, dict]:
    """(queries, bytes, answer) of the run page's first two panels, as charts.js asks for them."""
    client = world.client_for(world.alice)
    url = reverse("run_telemetry", args=[run.pk])
    query = {"fields": "utilization_gpu,memory_used_bytes", "width": str(WIDTH), **params}
    client.get(url, query)  # the session and the content types, read once
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, query)
    assert response.status_code == 200
    return len(queries), len(response.content), response.json()


def highest(answer: dict) -> float:
    util = next(panel for panel in answer["panels"] if panel["field"] == "utilization_gpu")
    return max(v for v in util["figure"]["data"][1]["y"] if v is not None)


def longest_trace(answer: dict) -> int:
    return max(len(trace.get("x", trace.get("y", []))) for p in answer["panels"] for trace in p["figure"]["data"])


def test_the_whole_run_chart_costs_the_same_for_8_gpus_and_for_64_with_4x_the_samples(world: World) -> None:
    small = build(world, "gpus-8", nodes=1, minutes=120, every=60)  # 960 samples
    big = build(world, "gpus-64", nodes=8, minutes=120, every=15)  # 4x a GPU's, 8x the GPUs: 30,720
    small_queries, small_bytes, small_answer = read(world, small, range="all")
    big_queries, big_bytes, big_answer = read(world, big, range="all")
    assert GpuSample.objects.filter(run=big).count() == 32 * GpuSample.objects.filter(run=small).count()
    assert big_queries == small_queries
    assert abs(big_bytes - small_bytes) <= 0.05 * small_bytes, (small_bytes, big_bytes)
    # At most one bucket per pixel (and one gap point between two), every GPU folded into each.
    assert longest_trace(big_answer) <= 2 * WIDTH and longest_trace(small_answer) <= 2 * WIDTH
    assert highest(small_answer) == highest(big_answer) == 100.0  # the single sample survives the fold


def test_a_zoom_on_compacted_minutes_costs_the_same_for_8_and_64_gpus_and_skips_the_hot_table(
    world: World, settings
) -> None:
    small = build(world, "gpus-8", nodes=1, minutes=30, every=10)
    big = build(world, "gpus-64", nodes=8, minutes=30, every=5)
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 10
    while blocks.compact_samples(now=T0 + timedelta(minutes=50)).minutes:
        pass
    assert not GpuSample.objects.exists()
    # 15 minutes on a 1,000 px panel: the raw tier.
    window = {"from": (T0 + timedelta(minutes=5)).isoformat(), "to": (T0 + timedelta(minutes=20)).isoformat(),
              "width": "1000"}  # fmt: skip
    costs = {}
    for run in (small, big):
        with CaptureQueriesContext(connection) as queries:
            costs[run.external_id] = read(world, run, **window)
        hot = [q["sql"] for q in queries.captured_queries if 'FROM "runs_gpusample" ' in q["sql"]]
        assert not hot, hot  # compacted minutes come from their blocks alone: no wait on vacuum
        answer = costs[run.external_id][2]
        assert {panel["tier"] for panel in answer["panels"]} == {"raw"}
    assert costs["gpus-8"][0] == costs["gpus-64"][0]
    assert highest(costs["gpus-64"][2]) == 100.0


def test_per_gpu_raw_reads_skip_the_hot_table_where_blocks_cover_and_read_it_where_not(world: World, settings) -> None:
    run = build(world, "gpus-16", nodes=2, minutes=20, every=2)
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 5
    blocks.compact_samples(now=T0 + timedelta(minutes=20))  # minutes 0-14 folded, 15-19 hot
    assert GpuSample.objects.filter(run=run).count() == 16 * 150
    end = T0 + timedelta(seconds=1199)
    with CaptureQueriesContext(connection) as queries:
        covered = blocks.raw_rows(run.pk, T0, T0 + timedelta(minutes=10), ["utilization_gpu"])
    assert not [q for q in queries.captured_queries if 'FROM "runs_gpusample" ' in q["sql"]]
    assert len(covered) == 16 * 301
    with CaptureQueriesContext(connection) as queries:
        both = blocks.raw_rows(run.pk, T0, end, ["utilization_gpu"])
    hot = [q["sql"] for q in queries.captured_queries if 'FROM "runs_gpusample" ' in q["sql"]]
    assert len(hot) == 1 and len(both) == 16 * 600
    # In series and time order, as before: node, GPU, then time.
    assert both == sorted(both, key=lambda row: (row[0], row[1], row[2]))
