"""runs/telemetry/envelope.py: the run page's panels folded across GPUs into at most one bucket per pixel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import GpuSample
from runs.telemetry import blocks, envelope
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def two_nodes(world: World, run_id: str = "run-1"):
    run = make_run(world.vision, run_id, num_accelerators=8, gpus_per_node=4)
    first = run.attempts.get().nodes.get()
    second = run.attempts.get().nodes.create(index=1, host="10.0.0.2")
    return run, [first, second]


def util(node_index: int, gpu: int, s: int) -> float:
    """Node 1's GPU 3 idles at 15 %; the others work at 78 %; one sample of node 0's GPU 2 spikes to 100."""
    if (node_index, gpu) == (1, 3):
        return 15.0
    if (node_index, gpu, s) == (0, 2, 5000):
        return 100.0
    return 78.0


def store(run, nodes, seconds) -> None:
    store_gpu_samples(
        [
            GpuSample(
                run=run,
                node=node,
                gpu_index=gpu,
                ts=T0 + timedelta(seconds=s),
                utilization_gpu=util(node.index, gpu, s),
                temperature_c=60.0 + gpu,
            )
            for node in nodes
            for gpu in range(4)
            for s in seconds
        ]
    )


def test_the_envelope_keeps_a_one_sample_spike_and_names_the_idle_gpu(world: World) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 3 * 3600, 10))  # three hours every 10 s, 8 GPUs
    found = envelope.read_envelopes(run, ["utilization_gpu", "temperature_c"], width=300)
    env = found["utilization_gpu"]
    assert env.tier == "minute" and len(env.x) <= 300
    assert max(env.high) == 100.0  # the single sample of one GPU, out of 8,640
    assert min(env.low) == 15.0
    # Every bucket's mean is the mean over the 8 GPUs: (7 x 78 + 15) / 8, the spike's bucket a bit higher.
    assert sorted(env.mean)[0] == pytest.approx((7 * 78 + 15) / 8)
    assert env.gpus == 8
    assert env.worst is not None and env.worst.name == "node 1 · GPU 3" and env.worst.low
    assert env.worst.mean == 15.0 and env.worst.others == pytest.approx(78.0, abs=0.01)
    # Temperature: the hottest GPU is the worst one.
    hot = found["temperature_c"].worst
    assert hot is not None and not hot.low and hot.name.endswith("GPU 3") and hot.mean == 63.0
    figure = envelope.envelope_figure(env)
    assert [trace["name"] for trace in figure["data"]] == ["min", "max", "mean"]
    # The times go once, in the first trace; charts.js shares them (meta.shared_x).
    assert len(figure["data"][0]["x"]) == len(env.x) and figure["layout"]["meta"]["shared_x"]
    assert "x" not in figure["data"][1] and "x" not in figure["data"][2]
    assert "lowest: node 1 · GPU 3 averaged 15 %; the others 78 %" in figure["layout"]["title"]["text"]
    assert figure["layout"]["meta"]["worst"]["name"] == "node 1 · GPU 3"


def test_one_node_is_its_own_envelope(world: World) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 1200, 10))
    env = envelope.read_envelopes(run, ["utilization_gpu"], node_ids=[nodes[0].pk], width=400)["utilization_gpu"]
    assert env.gpus == 4 and min(env.low) == 78.0  # node 1's idle GPU is not in it
    assert env.worst is not None and env.worst.name.startswith("node 0")


def test_the_raw_tier_merges_blocks_and_hot_rows_and_skips_the_hot_table_where_blocks_cover(
    world: World, settings
) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 1200))  # twenty minutes at 1 Hz
    # Fold the first fifteen minutes into blocks; the last five stay hot rows.
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 5
    blocks.compact_samples(now=T0 + timedelta(minutes=20))
    assert GpuSample.objects.filter(run=run).count() == 8 * 300
    whole = envelope.read_envelopes(run, ["utilization_gpu"], T0, T0 + timedelta(seconds=1199), width=1200)
    env = whole["utilization_gpu"]
    assert env.tier == "raw" and env.bucket_seconds == 1.0 and len(env.x) == 1200
    # Bucket by bucket, the same as the stored samples of both parts.
    rows = blocks.raw_rows(run.pk, T0, T0 + timedelta(seconds=1199), ["utilization_gpu"])
    by_second: dict[int, list[float]] = {}
    for _, _, ts, value in rows:
        by_second.setdefault(int((ts - T0).total_seconds()), []).append(value)
    assert env.high == [max(by_second[s]) for s in range(1200)]
    assert env.low == [min(by_second[s]) for s in range(1200)]
    assert env.mean == pytest.approx([sum(v) / len(v) for _, v in sorted(by_second.items())])
    # A window the blocks cover whole never reads the hot table: no wait on vacuum after compaction.
    with CaptureQueriesContext(connection) as queries:
        envelope.read_envelopes(run, ["utilization_gpu"], T0, T0 + timedelta(minutes=10), width=1000)
    assert not [q for q in queries.captured_queries if '"runs_gpusample"' in q["sql"]]
    # A window reaching into the hot minutes reads only those.
    with CaptureQueriesContext(connection) as queries:
        env = envelope.read_envelopes(run, ["utilization_gpu"], T0 + timedelta(minutes=10),
                                      T0 + timedelta(minutes=19), width=1000)["utilization_gpu"]  # fmt: skip
    hot = [q["sql"] for q in queries.captured_queries if '"runs_gpusample"' in q["sql"]]
    assert len(hot) == 1 and max(env.high) == 78.0 and len(env.x) == 541


def test_the_width_bounds_every_series_and_the_tier(world: World) -> None:
    assert envelope.pick_tier(900, 1000) == "raw"
    assert envelope.pick_tier(3600, 1000) == "minute"
    assert envelope.pick_tier(13 * 86400, 1000) == "hour"
    assert envelope.pick_tier(900, 300) == "minute"  # a narrow panel has no pixel for each second
    assert envelope.clamp_width(10) == envelope.MIN_WIDTH and envelope.clamp_width(10**6) == envelope.MAX_WIDTH
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 1800, 1))
    env = envelope.read_envelopes(run, ["utilization_gpu"], width=200)["utilization_gpu"]
    assert len(env.x) <= 200


def test_telemetry_json_answers_several_panels_and_refuses_bad_input(world: World) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 600, 10))
    client = world.client_for(world.alice)
    url = reverse("run_telemetry", args=[run.pk])
    body = client.get(url, {"fields": "utilization_gpu,temperature_c,memory_used_bytes", "width": "500"}).json()
    assert [p["field"] for p in body["panels"]] == ["utilization_gpu", "temperature_c", "memory_used_bytes"]
    assert body["panels"][0]["figure"]["layout"]["meta"]["view"] == "envelope"
    assert body["panels"][2]["figure"] is None  # no memory reported: the page shows its empty state
    one = client.get(url, {"fields": "utilization_gpu", "gpu_node": "1"}).json()["panels"][0]["figure"]
    assert one["layout"]["meta"]["node"] == 1 and one["layout"]["meta"]["gpus"] == 4
    for bad, word in (
        ({"fields": "utilization_gpu,nope"}, "fields"),
        ({"fields": ""}, "fields"),
        ({"fields": "utilization_gpu", "width": "wide"}, "width"),
        ({"fields": "utilization_gpu", "width": "9" * 40}, "width"),
        ({"fields": "utilization_gpu", "view": "3d"}, "view"),
        ({"fields": "utilization_gpu", "range": "2y"}, "range"),
    ):
        response = client.get(url, bad)
        assert response.status_code == 400 and word in response.json()["error"], bad
