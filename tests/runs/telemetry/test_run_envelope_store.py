"""runs/telemetry/envelope_store.py: every GPU of a run folded per minute and hour on the write path.

The run page's run-wide panels read these folded rows, one per bucket, so their cost and size
do not grow with the number of GPUs; what they show is what folding every GPU's rollups gives.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import GpuHour, GpuMinute, GpuSample, RunEnvelope
from runs.telemetry import envelope, envelope_store
from runs.telemetry.retention import prune_raw_samples
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

FIELDS = ["utilization_gpu", "temperature_c"]


def gpus_run(world: World, nodes: int, gpus: int, run_id: str):
    run = make_run(world.vision, run_id, num_accelerators=nodes * gpus, gpus_per_node=gpus)
    attempt = run.attempts.get()
    made = [attempt.nodes.get()] + [attempt.nodes.create(index=i, host=f"10.0.0.{i + 1}") for i in range(1, nodes)]
    return run, made


def util(node_index: int, gpu: int, s: int) -> float:
    """GPU 1 of the last node idles at 12 %; one sample of node 0's GPU 0 spikes to 100; the rest vary."""
    if (node_index, gpu) == (1, 1):
        return 12.0
    if (node_index, gpu, s) == (0, 0, 3 * 3600 + 30):
        return 100.0
    return 60.0 + (gpu * 7 + s // 60) % 25


def samples(run, nodes, gpus: int, seconds) -> list[GpuSample]:
    return [
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s),
                  utilization_gpu=util(node.index, gpu, s), temperature_c=50.0 + gpu + node.index)
        for node in nodes for gpu in range(gpus) for s in seconds
    ]  # fmt: skip


def same(a: envelope.Envelope, b: envelope.Envelope) -> None:
    assert a.x == b.x and a.tier == b.tier and a.gpus == b.gpus
    assert a.low == b.low and a.high == b.high
    assert a.mean == pytest.approx(b.mean)
    assert a.worst == b.worst


def test_the_write_path_folds_every_gpu_and_the_page_reads_what_the_gpu_rows_give(world: World) -> None:
    run, nodes = gpus_run(world, 2, 2, "run-fold")
    store_gpu_samples(samples(run, nodes, 2, range(0, 8 * 3600, 30)))  # eight hours, 4 GPUs
    minutes = RunEnvelope.objects.filter(run=run, seconds=envelope_store.MINUTE)
    assert minutes.count() == 480 and set(minutes.values_list("gpus", flat=True)) == {4}
    assert RunEnvelope.objects.filter(run=run, seconds=envelope_store.HOUR).count() == 8
    # One minute, by hand: the four GPUs' minute rollups folded.
    at = T0 + timedelta(hours=3)
    row = minutes.get(start=at)
    gpu_rows = GpuMinute.objects.filter(run=run, minute=at)
    assert row.utilization_gpu_max == 100.0 == max(r.utilization_gpu_max for r in gpu_rows)
    assert row.utilization_gpu_min == 12.0 == min(r.utilization_gpu_min for r in gpu_rows)
    assert row.utilization_gpu_sum == pytest.approx(sum(r.utilization_gpu_avg for r in gpu_rows))
    assert row.utilization_gpu_n == 4 and row.sm_active_n == 0 and row.sm_active_max is None
    # The page at the minute tier (and the hour tier) reads the folded rows...
    windows = [(T0, T0 + timedelta(hours=4), 300, "minute"), (T0, T0 + timedelta(hours=8), 100, "hour")]
    folded = {}
    for start, end, width, tier in windows:
        with CaptureQueriesContext(connection) as queries:
            found = envelope.read_envelopes(run, FIELDS, start, end, width)
        assert found["utilization_gpu"].tier == tier
        assert max(found["utilization_gpu"].high) == 100.0  # one sample of one GPU, kept
        grouped = [q["sql"] for q in queries.captured_queries if "GROUP BY" in q["sql"]]
        assert any('"runs_runenvelope"' in sql for sql in grouped)
        assert not any(f'"runs_gpu{tier}"."{tier}"' in sql and "FLOOR" in sql for sql in grouped)
        folded[tier] = found
    # ...and shows exactly what folding every GPU's rollups on the spot shows (one fold, two places).
    RunEnvelope.objects.filter(run=run).delete()
    for start, end, width, tier in windows:
        direct = envelope.read_envelopes(run, FIELDS, start, end, width)
        for f in FIELDS:
            same(folded[tier][f], direct[f])
    # Rollups written outside the ingest path are folded by `rebuild` into the same rows.
    assert envelope_store.rebuild([run.pk]) == 488
    for start, end, width, tier in windows:
        again = envelope.read_envelopes(run, FIELDS, start, end, width)
        for f in FIELDS:
            same(folded[tier][f], again[f])


def test_a_resent_or_late_sample_is_refolded_never_counted_twice(world: World) -> None:
    run, nodes = gpus_run(world, 1, 2, "run-resend")
    batch = samples(run, nodes, 2, range(0, 600, 10))
    store_gpu_samples(batch)
    before = list(RunEnvelope.objects.filter(run=run).order_by("seconds", "start").values())
    store_gpu_samples(samples(run, nodes, 2, range(0, 600, 10)))  # the same batch again
    assert list(RunEnvelope.objects.filter(run=run).order_by("seconds", "start").values()) == before
    # A third GPU's sample arriving late for minute 2: that minute now folds three GPUs.
    store_gpu_samples([GpuSample(run=run, node=nodes[0], gpu_index=2, ts=T0 + timedelta(minutes=2, seconds=5),
                                 utilization_gpu=3.0)])  # fmt: skip
    row = RunEnvelope.objects.get(run=run, seconds=envelope_store.MINUTE, start=T0 + timedelta(minutes=2))
    assert row.gpus == 3 and row.utilization_gpu_n == 3 and row.utilization_gpu_min == 3.0
    hour = RunEnvelope.objects.get(run=run, seconds=envelope_store.HOUR, start=T0)
    assert hour.gpus == GpuHour.objects.filter(run=run, hour=T0).count() == 3


def test_the_run_wide_panel_costs_the_same_queries_and_bytes_for_2_or_32_gpus(world: World) -> None:
    client = world.client_for(world.alice)
    measured = {}
    for nodes, gpus in ((1, 2), (4, 8)):
        run, made = gpus_run(world, nodes, gpus, f"run-{nodes * gpus}")
        store_gpu_samples(samples(run, made, gpus, range(0, 8 * 3600, 60)))
        url = reverse("run_telemetry", args=[run.pk])
        asked = {"fields": ",".join(FIELDS), "width": "400", "from": T0.isoformat(),
                 "to": (T0 + timedelta(hours=8)).isoformat()}  # fmt: skip
        client.get(url, asked)  # warm: the session, the user
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url, asked)
        assert response.status_code == 200
        body = response.json()
        assert body["panels"][0]["figure"]["layout"]["meta"]["gpus"] == nodes * gpus
        # No query reads one row per GPU-minute: the panel folds one row a minute, the worst GPU
        # comes from GPU-hours (8 a GPU here).
        assert not [q for q in queries.captured_queries if '"runs_gpuminute"' in q["sql"] and "GROUP BY" in q["sql"]]
        measured[nodes * gpus] = (len(queries.captured_queries), len(response.content))
    (q2, b2), (q32, b32) = measured[2], measured[32]
    assert q32 == q2
    # The same buckets either way: the bytes differ only by the worst GPU's name and mean.
    assert abs(b32 - b2) < 200, measured


def test_retention_drops_the_folded_minutes_with_the_minutes_and_keeps_the_hours(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_MINUTE_DAYS = 30
    run, nodes = gpus_run(world, 1, 2, "run-old")
    store_gpu_samples(samples(run, nodes, 2, range(0, 7200, 30)))
    prune_raw_samples(now=T0 + timedelta(days=30, minutes=90))  # minute cutoff: T0 + 90 minutes
    minutes = RunEnvelope.objects.filter(run=run, seconds=envelope_store.MINUTE)
    assert minutes.count() == 30 == GpuMinute.objects.filter(run=run).values("minute").distinct().count()
    assert not minutes.filter(start__lt=T0 + timedelta(minutes=90)).exists()
    assert RunEnvelope.objects.filter(run=run, seconds=envelope_store.HOUR).count() == 2
    # The two hours at the minute tier: what is left of the minutes, from T0 + 90 minutes on, as
    # reading the GPUs' own minute rows gives.
    env = envelope.read_envelopes(run, ["utilization_gpu"], T0, T0 + timedelta(hours=2), width=100)["utilization_gpu"]
    assert env.tier == "minute" and env.x[0] == (T0 + timedelta(minutes=90)).timestamp() * 1000
    RunEnvelope.objects.filter(run=run).delete()
    same(
        env,
        envelope.read_envelopes(run, ["utilization_gpu"], T0, T0 + timedelta(hours=2), width=100)["utilization_gpu"],
    )
