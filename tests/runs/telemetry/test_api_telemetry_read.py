"""GET /api/v1/runs/{id}/telemetry: the run page's charts as numbers, at a chosen resolution, scoped as pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from django.urls import reverse

from dashboard.models import ApiKeyRole
from runs.models import ROLLUP_FIELDS, GpuMinute, GpuSample
from runs.telemetry import api as telemetry_api
from runs.telemetry import charts, envelope, tier_reads
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

URL = "/api/v1/runs/run-1/telemetry"


def two_nodes(world: World):
    run = make_run(world.vision, "run-1", num_accelerators=8, gpus_per_node=4)
    first = run.attempts.get().nodes.get()
    second = run.attempts.get().nodes.create(index=1, host="10.0.0.2")
    return run, [first, second]


def util(node_index: int, gpu: int, s: int) -> float:
    """Node 1's GPU 3 idles at 15 %; the others work at 70-79 %; one sample of node 0's GPU 2 spikes to 100."""
    if (node_index, gpu) == (1, 3):
        return 15.0
    if (node_index, gpu, s) == (0, 2, 5000):
        return 100.0
    return 70.0 + (s // 60 + gpu) % 10


def store(run, nodes, seconds) -> None:
    store_gpu_samples(
        [
            GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s),
                      utilization_gpu=util(node.index, gpu, s), temperature_c=60.0 + gpu,
                      memory_used_bytes=(40 + gpu) * 10**9)
            for node in nodes
            for gpu in range(4)
            for s in seconds
        ]
    )  # fmt: skip


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_envelope_is_the_charts_fold_and_the_panels_numbers(world: World) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 3 * 3600, 10))  # three hours every 10 s, 8 GPUs
    api = world.api(world.vision, ApiKeyRole.READ)
    body = api.get(URL, {"field": ["utilization_gpu", "memory_used_bytes"], "points": 300}).json()
    assert body["run"] == "run-1" and body["view"] == "envelope" and body["node"] is None
    extent = tier_reads.extent(run)
    assert (moment(body["start"]), moment(body["end"])) == extent  # the whole run: the charts' "all"
    util_out, memory_out = body["fields"]
    assert util_out["field"] == "utilization_gpu" and util_out["unit"] == "%" and memory_out["unit"] == "bytes"
    # One number: what read_envelopes folds for a 300-pixel panel over the same window, bucket for bucket.
    env = envelope.read_envelopes(run, ["utilization_gpu"], *extent, 300)["utilization_gpu"]
    assert util_out["tier"] == env.tier == "minute" and util_out["bucket_seconds"] == env.bucket_seconds
    assert [moment(p["t"]) for p in util_out["points"]] == [datetime.fromtimestamp(x / 1000, UTC) for x in env.x]
    assert [p["mean"] for p in util_out["points"]] == env.mean
    assert [p["min"] for p in util_out["points"]] == env.low and [p["max"] for p in util_out["points"]] == env.high
    assert max(p["max"] for p in util_out["points"]) == 100.0  # one sample of one GPU, out of 8,640
    assert util_out["gpus"] == 8
    assert util_out["worst"] == {"name": "node 1 · GPU 3", "mean": 15.0, "others": env.worst.others,
                                 "lowest_is_worst": True}  # fmt: skip
    assert memory_out["points"][0]["mean"] == pytest.approx(41.5e9)  # stored bytes; the chart draws GB
    # And the panel the run page draws for the same window and width shows these means.
    page = world.client_for(world.alice).get(
        reverse("run_telemetry", args=[run.pk]),
        {"fields": "utilization_gpu", "width": 300, "from": body["start"], "to": body["end"]},
    )
    trace = page.json()["panels"][0]["figure"]["data"][2]
    assert [v for v in trace["y"] if v is not None] == [round(p["mean"]) for p in util_out["points"]]


def test_points_and_step_set_the_resolution_and_bound_the_answer(world: World) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 6 * 3600, 30))  # six hours
    api = world.api(world.vision, ApiKeyRole.READ)
    coarse = api.get(URL, {"points": 12}).json()["fields"][0]
    # 12 buckets of 30 minutes: never finer than the tier read, hours.
    assert coarse["tier"] == "hour" and coarse["bucket_seconds"] == 3600.0 and len(coarse["points"]) == 6
    stepped = api.get(URL, {"step": 300}).json()["fields"][0]
    assert stepped["tier"] == "minute" and stepped["bucket_seconds"] == 300.0
    times = [moment(p["t"]) for p in stepped["points"]]
    assert times[0] == T0 and all(b - a == timedelta(minutes=5) for a, b in pairwise(times))
    assert len(times) == 72
    first = [util(node, gpu, s) for node in (0, 1) for gpu in range(4) for s in range(0, 300, 30)]
    assert stepped["points"][0]["min"] == min(first) and stepped["points"][0]["max"] == max(first)
    assert stepped["points"][0]["mean"] == pytest.approx(sum(first) / len(first))
    # A 10-minute window at 30 s a bucket reads the raw samples (the widest panel would), and
    # a minute's buckets of it the minute rollups.
    window = {"start": T0.isoformat(), "end": (T0 + timedelta(minutes=10)).isoformat()}
    raw = api.get(URL, window | {"step": 30}).json()["fields"][0]
    assert raw["tier"] == "raw" and raw["bucket_seconds"] == 30.0
    assert [moment(p["t"]) for p in raw["points"]] == [T0 + timedelta(seconds=s) for s in range(0, 601, 30)]
    minutes = api.get(URL, window | {"step": 60}).json()["fields"][0]
    assert minutes["tier"] == "minute" and minutes["bucket_seconds"] == 60.0 and len(minutes["points"]) == 11
    # A month asked is the run's six hours read: at 10 s a bucket over the bound, at hours the hour rollups.
    month = {"start": T0.isoformat(), "end": (T0 + timedelta(days=30)).isoformat()}
    too_fine = api.get(URL, month | {"step": 10}).json()
    assert too_fine["errors"][0]["field"] == "step" and "step=11 or more" in too_fine["errors"][0]["message"]
    hours = api.get(URL, month | {"step": 3600}).json()["fields"][0]
    assert hours["tier"] == "hour" and len(hours["points"]) == 6
    # The default: at most DEFAULT_POINTS (+1) buckets; centuries of window read the run's six hours only.
    wide = api.get(URL, {"start": "1970-01-01T00:00:00Z", "end": "2199-12-31T00:00:00Z", "points": 2000}).json()
    assert moment(wide["start"]) == T0 and moment(wide["end"]) == tier_reads.extent(run)[1]
    assert len(wide["fields"][0]["points"]) <= 2001


def test_each_gpu_is_the_charts_per_gpu_series_within_the_answers_bound(world: World, monkeypatch) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 3600, 10))
    api = world.api(world.vision, ApiKeyRole.READ)
    body = api.get(URL, {"view": "gpus", "points": 40, "field": ["utilization_gpu", "temperature_c"]}).json()
    util_out, temperature = body["fields"]
    assert util_out["gpus"] == 8 and util_out["points_per_series"] == 40
    expected = charts.gpu_series(run, "utilization_gpu", *tier_reads.extent(run), 40)
    assert [s["name"] for s in util_out["series"]] == [s.name for s in expected]
    assert [p["value"] for p in util_out["series"][0]["points"]] == [y for y in expected[0].y if y is not None]
    assert all(len(s["points"]) <= 40 for s in util_out["series"])
    assert {p["value"] for p in temperature["series"][7]["points"]} == {63.0}  # node 1 · GPU 3
    one_node = api.get(URL, {"view": "gpus", "node": 1}).json()["fields"][0]
    assert [s["name"] for s in one_node["series"]] == [f"node 1 · GPU {g}" for g in range(4)]
    # Many GPUs thin each series so that the answer stays within MAX_ANSWER_POINTS ...
    monkeypatch.setattr(telemetry_api, "MAX_ANSWER_POINTS", 160)
    thinned = api.get(URL, {"view": "gpus", "field": ["utilization_gpu", "temperature_c"]}).json()["fields"]
    assert thinned[0]["points_per_series"] == 10
    assert sum(len(s["points"]) for f in thinned for s in f["series"]) <= 160
    # ... and too many series for it is a 422 that says to ask one node.
    monkeypatch.setattr(telemetry_api, "MAX_ANSWER_POINTS", 20)
    refused = api.get(URL, {"view": "gpus", "field": ["utilization_gpu", "temperature_c"]})
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "node"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"field": "utilization"}, "field[0]"),
        ({"field": ROLLUP_FIELDS * 2}, "field"),
        ({"points": 0}, "points"),
        ({"points": 2001}, "points"),
        ({"points": "many"}, "points"),
        ({"step": 0}, "step"),
        ({"step": 10**12}, "step"),
        ({"points": 100, "step": 60}, "step"),
        ({"start": "2026-13-01T00:00:00Z"}, "start"),
        ({"start": "9999-01-01T00:00:00Z"}, "start"),
        ({"start": "2026-11-02T10:00:00Z", "end": "2026-11-02T09:00:00Z"}, "end"),
        ({"view": "3d"}, "view"),
        ({"node": 7}, "node"),
        ({"node": -1}, "node"),
        ({"step": 1}, "step"),  # an hour at 1 s a bucket: 3,600 buckets, over the bound
        ({"source": "mainframe"}, "source"),
    ],
)
def test_a_bad_parameter_is_a_422_naming_it(world: World, query: dict, named: str) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 3600, 60))
    response = world.api(world.vision, ApiKeyRole.READ).get(URL, query)
    assert response.status_code == 422, response.content
    assert [e["field"] for e in response.json()["errors"]] == [named]


def test_another_teams_run_is_a_404_and_a_run_without_telemetry_an_empty_answer(world: World) -> None:
    run, nodes = two_nodes(world)
    store(run, nodes, range(0, 600, 10))
    assert world.api(world.nlp, ApiKeyRole.READ).get(URL).status_code == 404
    assert world.client_for(world.charlie).get(URL).status_code == 404
    assert world.client_for(world.bob).get(URL).status_code == 200
    assert world.api(world.vision, ApiKeyRole.INGEST).get(URL).status_code == 200
    assert world.client_for(world.alice).get("/api/v1/runs/nope/telemetry").status_code == 404
    from django.test import Client

    assert Client().get(URL).status_code == 401
    make_run(world.vision, "quiet")
    quiet = world.api(world.vision, ApiKeyRole.READ).get("/api/v1/runs/quiet/telemetry").json()
    assert quiet["start"] is None and quiet["fields"][0]["points"] == [] and quiet["fields"][0]["tier"] is None
    # A window beside the run's telemetry reads nothing.
    before = world.api(world.vision, ApiKeyRole.READ).get(URL, {"end": "2026-11-01T00:00:00Z"}).json()
    assert before["start"] is None and before["fields"][0]["points"] == []


def test_the_endpoint_is_in_the_openapi_document_with_its_parameters(world: World) -> None:
    schema = world.client_for(world.alice).get("/api/v1/openapi.json").json()
    operation = schema["paths"]["/api/v1/runs/{external_id}/telemetry"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert {"field", "start", "end", "points", "step", "view", "node", "source"} <= names
    assert set(telemetry_api.UNITS) == set(ROLLUP_FIELDS)


def test_rollups_with_a_mean_and_no_band_still_answer(world: World) -> None:
    """Minute rollups loaded without their min and max (by hand, as bench/pages.py writes power) answer, not 500."""
    run, nodes = two_nodes(world)
    GpuMinute.objects.bulk_create(
        GpuMinute(run=run, node=nodes[0], gpu_index=g, minute=T0 + timedelta(minutes=m), samples=60,
                  power_watts_avg=600.0 + g)
        for g in range(2) for m in range(90)
    )  # fmt: skip
    body = world.api(world.vision, ApiKeyRole.READ).get(URL, {"field": "power_watts"}).json()
    points = body["fields"][0]["points"]
    mean = (600.0 + 601.0) / 2  # a bucket's rows grouped: the mean of both GPUs stands for its band
    assert len(points) == 90 and {(p["mean"], p["min"], p["max"]) for p in points} == {(mean, mean, mean)}
