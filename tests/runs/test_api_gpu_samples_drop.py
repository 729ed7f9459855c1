"""`POST /api/v1/gpu-samples?bad_rows=drop`: the node agent's door, bad rows dropped and counted, events stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from runs import ingest_process
from runs.choices import TelemetrySource
from runs.models import CollectorState, GpuSample, IngestBatch, RunEvent
from tests.conftest import World, make_run, serverless_api

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
URL = "/api/v1/gpu-samples?bad_rows=drop"


def _sample(run: str, gpu: int, ts: datetime, **values: Any) -> dict[str, Any]:
    return {"run": run, "run_source": "serverless", "node": 0, "host": "gpu-node-1", "gpu": gpu,
            "gpu_uuid": f"GPU-{gpu}", "ts": ts.isoformat(), "utilization_gpu": 97.0, "power_watts": 650.5,
            "ecc_corrected": None, **values}  # fmt: skip


def post(client: Client, body: Any, url: str = URL) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.mark.django_db
def test_bad_rows_are_dropped_and_counted_the_rest_stored_and_a_resend_is_a_no_op(world: World) -> None:
    run = make_run(world.vision, "run-1")
    make_run(world.nlp, "run-2")
    body = {"source": "nvml", "dropped_samples": 0,
            "samples": [_sample("run-1", 0, NOW), _sample("run-2", 1, NOW),  # run-2 is nlp's
                        _sample("run-1", 2, NOW, utilization_gpu=140.0),  # out of range
                        _sample("run-1", 3, NOW, power_watts=float("inf")),  # not finite
                        _sample("nope", 4, NOW), "not a row",
                        _sample("run-1", 5, datetime.now(UTC) + timedelta(days=1))],  # future
            "events": [{"kind": "xid", "run": "run-1", "gpu": 0, "ts": NOW.isoformat(), "message": "Xid 79",
                        "details": {"xid": 79}, "node": 0, "host": "gpu-node-1"},
                       {"kind": "made-up", "run": "run-1", "ts": NOW.isoformat()}]}  # fmt: skip
    client = serverless_api(world)  # the events name no run_source: the key's, serverless

    response = post(client, body)

    assert response.status_code == 202, response.content
    out = response.json()
    assert (out["rows"], out["dropped_rows"], out["events"], out["dropped_events"]) == (1, 6, 1, 1)
    problems = "\n".join(out["problems"])
    for expected in ("samples[1].run: no run 'run-2'", "samples[2].utilization_gpu", "samples[3].power_watts",
                     "samples[4].run: no run 'nope'", "samples[5]: Input should be a valid dictionary",
                     "samples[6].ts: is more than the allowed skew", "events[1].kind"):  # fmt: skip
        assert expected in problems
    batch = IngestBatch.objects.get(pk=out["batch"]["id"])
    assert batch.team == world.vision and batch.row_count == 1
    ingest_process.process_batch(batch.pk)
    stored = GpuSample.objects.get(run=run)
    assert (stored.source, stored.gpu_index, stored.power_watts) == (TelemetrySource.NVML, 0, 650.5)
    assert stored.node.attempt.run == run and stored.node.host == "10.0.0.1"
    assert (RunEvent.objects.get(run=run).details, RunEvent.objects.get(run=run).node.host) == ({"xid": 79}, "10.0.0.1")
    assert CollectorState.objects.get(name="agent").refused_total == 7

    again = post(client, body)

    assert again.status_code == 200 and again.json()["batch"]["duplicate"] is True
    assert GpuSample.objects.count() == 1 and RunEvent.objects.count() == 1


@pytest.mark.django_db
def test_events_alone_are_stored_without_a_batch(world: World) -> None:
    run = make_run(world.vision, "run-1")
    event = {"kind": "gpu_lost", "run": "run-1", "gpu": 3, "gpu_uuid": "GPU-3", "ts": NOW.isoformat(),
             "message": "GPU 3 fell off the bus", "node": 0}  # fmt: skip

    response = post(serverless_api(world), {"source": "nvml", "events": [event]})

    assert response.status_code == 200 and response.json()["batch"] is None
    stored = RunEvent.objects.get(run=run)
    assert (stored.kind, stored.gpu_index, stored.details) == ("gpu_lost", 3, {"gpu_uuid": "GPU-3"})


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("junk", "body"),
        ([1, 2], "body"),
        ({"samples": "many"}, "samples"),
        ({"samples": [], "events": []}, "samples"),
        ({"source": "made-up", "samples": [{}]}, "source"),
    ],
)
def test_a_body_that_is_not_a_push_is_a_422_naming_what_is_wrong(world: World, body: Any, field: str) -> None:
    response = post(serverless_api(world), body)
    assert response.status_code == 422
    assert field in {error["field"] for error in response.json()["errors"]}


@pytest.mark.django_db
def test_limits_and_the_option_itself_are_checked(world: World, settings) -> None:
    settings.AIRBOARD_MAX_SAMPLES_PER_BATCH = 2
    client = serverless_api(world)
    assert post(client, {"samples": [_sample("run-1", g, NOW) for g in range(3)]}).status_code == 413
    assert (
        post(client, {"samples": [_sample("run-1", 0, NOW)]}, "/api/v1/gpu-samples?bad_rows=maybe").status_code == 422
    )
    # Without the option a bad row still refuses the whole batch.
    make_run(world.vision, "run-1")
    plain = post(client, {"samples": [_sample("run-1", 0, NOW), _sample("run-1", 1, NOW, utilization_gpu=140.0)]},
                 "/api/v1/gpu-samples")  # fmt: skip
    assert plain.status_code == 422 and not IngestBatch.objects.exists()
    assert Client().post(URL, "{}", content_type="application/json").status_code == 401


@pytest.mark.django_db
def test_the_drop_door_keeps_the_strict_doors_node_limit(world: World, settings) -> None:
    settings.AIRBOARD_MAX_NODES_PER_BATCH = 2
    make_run(world.vision, "run-1")
    samples = [_sample("run-1", 0, NOW, node=node) for node in range(3)]
    response = post(world.api(world.vision), {"source": "nvml", "samples": samples})
    assert response.status_code == 413
    assert "3 distinct (run, attempt, node)" in response.json()["detail"]
    assert not IngestBatch.objects.exists()
