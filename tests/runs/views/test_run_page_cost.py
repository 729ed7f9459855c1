"""The run page's cost does not grow with GPUs x seconds: same queries, bounded bytes, 1 GPU or 64.

Each run gets minute and hour rollups for six hours and compacted raw blocks (1 Hz, every GPU)
for its last twenty minutes, in the stored formats (blocks.encode_block); the page's frame and
its panels' data (telemetry.json, as charts.js asks it) are fetched for the "15m" range (raw
tier) and the whole run (minute tier).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import GpuHour, GpuMinute, GpuSampleBlock, Node
from runs.telemetry import blocks
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

HOURS = 6
RAW_MINUTES = 20
PANEL_WIDTH = 1000
# What the page asks first: the two panels above the fold, in one request.
FIRST = "utilization_gpu,memory_used_bytes"


def build(world: World, name: str, nodes: int, gpus: int, hours: int = HOURS):
    run = make_run(world.vision, name, num_accelerators=nodes * gpus, gpus_per_node=gpus,
                   ended_at=T0 + timedelta(hours=hours))  # fmt: skip
    attempt = run.attempts.get()
    node_rows = [attempt.nodes.get()] + [attempt.nodes.create(index=i, host=f"10.0.0.{i}") for i in range(1, nodes)]
    minutes, hours_rows, block_rows = [], [], []
    for node in node_rows:
        for gpu in range(gpus):
            busy = 20.0 if (node.index, gpu) == (nodes - 1, gpus - 1) else 80.0
            stats = {"samples": 60, "utilization_gpu_min": busy - 5, "utilization_gpu_avg": busy,
                     "utilization_gpu_max": busy + 5, "memory_used_bytes_min": 6e10, "memory_used_bytes_avg": 6.5e10,
                     "memory_used_bytes_max": 7e10, "power_limit_watts": 700.0}  # fmt: skip
            for m in range(hours * 60):
                minutes.append(GpuMinute(run=run, node=node, gpu_index=gpu, minute=T0 + timedelta(minutes=m), **stats))
            for h in range(hours):
                hours_rows.append(GpuHour(run=run, node=node, gpu_index=gpu, hour=T0 + timedelta(hours=h), **stats))
        for m in range(hours * 60 - RAW_MINUTES, hours * 60):
            count = gpus * 60
            columns = {"utilization_gpu": [80.0 + (i % 7) for i in range(count)],
                       "memory_used_bytes": [65 * 10**9 + i for i in range(count)]}  # fmt: skip
            data = blocks.encode_block(
                [g for g in range(gpus) for _ in range(60)], [s * 10**6 for _ in range(gpus) for s in range(60)],
                columns, [None] * count,
            )  # fmt: skip
            block_rows.append(GpuSampleBlock(run=run, node=node, minute=T0 + timedelta(minutes=m), samples=count,
                                             data=data))  # fmt: skip
    GpuMinute.objects.bulk_create(minutes, batch_size=2000)
    GpuHour.objects.bulk_create(hours_rows)
    GpuSampleBlock.objects.bulk_create(block_rows)
    assert Node.objects.filter(attempt__run=run).count() == nodes
    return run


def measure(client, run, **params: str) -> dict[str, tuple[int, int]]:
    """(queries, bytes) of the page's frame, then of its first panels' data."""
    out = {}
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("run_detail", args=[run.pk]), params)
    assert page.status_code == 200
    out["frame"] = (len(queries.captured_queries), len(page.content))
    asked = {"fields": FIRST, "width": str(PANEL_WIDTH), **params}
    with CaptureQueriesContext(connection) as queries:
        data = client.get(reverse("run_telemetry", args=[run.pk]), asked)
    assert data.status_code == 200 and all(p["figure"] for p in data.json()["panels"])
    out["panels"] = (len(queries.captured_queries), len(data.content))
    return out


def test_a_64_gpu_page_costs_what_a_1_gpu_page_costs(world: World) -> None:
    small = build(world, "one-gpu", nodes=1, gpus=1)
    big = build(world, "sixty-four", nodes=8, gpus=8)
    client = world.client_for(world.alice)
    for picked in ("15m", "all"):
        one, many = measure(client, small, range=picked), measure(client, big, range=picked)
        assert one["panels"][0] == many["panels"][0], picked  # the same queries, whatever the GPUs
        # Bytes: the same buckets; the 64-GPU figures name their worst GPU and the node selector has 8 options.
        assert many["panels"][1] <= one["panels"][1] * 1.15 + 400, (picked, one, many)
        assert many["panels"][1] < 120_000, picked  # two panels of <= 1,000 buckets each
        # The frame lists each node (attempts, skew table, selector, timeline): ~1 KB a node, no samples.
        assert many["frame"][1] <= one["frame"][1] + 8 * 1_000, picked
        # The frame's queries do not grow with GPUs either (the node selector and skew table add a fixed few).
        assert many["frame"][0] <= one["frame"][0] + 2, (picked, one, many)
    worst = client.get(reverse("run_telemetry", args=[big.pk]), {"fields": "utilization_gpu"}).json()
    assert worst["panels"][0]["figure"]["layout"]["meta"]["worst"]["name"] == "node 7 · GPU 7"


def test_more_samples_cost_the_same_queries_and_bytes(world: World) -> None:
    short = build(world, "short", nodes=2, gpus=8, hours=2)
    long = build(world, "long", nodes=2, gpus=8, hours=6)
    client = world.client_for(world.alice)
    for picked in ("15m", "all"):
        a, b = measure(client, short, range=picked), measure(client, long, range=picked)
        assert a["panels"][0] == b["panels"][0], picked
        # At most one bucket a pixel: three times the minutes is not three times the bytes.
        assert b["panels"][1] <= max(a["panels"][1] * 1.5, 120_000), (picked, a, b)
        assert a["frame"][0] == b["frame"][0] and abs(a["frame"][1] - b["frame"][1]) < 200, (picked, a, b)
