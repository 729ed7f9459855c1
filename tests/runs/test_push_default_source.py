"""A pushed row that names no `run_source` names a run of the key's own source (issue 31).

A team may hold a `local` run and a `serverless` run under one external id; a local key's row
without `run_source` reaches the local one, a serverless key's the serverless one, and a row
naming its source reaches that run whatever the key.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine

from billing.models import EgressRecord
from runs.choices import RunSource
from runs.models import IngestBatch, Run, RunEvent
from tests.conftest import T0, World, make_run

SAMPLE = {"run": "r1", "gpu": 0, "ts": (T0 + timedelta(minutes=5)).isoformat(), "utilization_gpu": 50}


@pytest.fixture
def twins(world: World) -> dict[str, Run]:
    return {source: make_run(world.vision, "r1", source=source) for source in (RunSource.LOCAL, RunSource.SERVERLESS)}


def _rows(batch_id: int) -> set[int]:
    """The run ids a recorded batch's rows point at."""
    return {row[0] for row in IngestBatch.objects.get(pk=batch_id).rows["rows"]}


@time_machine.travel(T0 + timedelta(hours=2), tick=False)
@pytest.mark.parametrize("source", [RunSource.LOCAL, RunSource.SERVERLESS])
def test_samples_metrics_and_egress_default_to_the_keys_source(world: World, twins: dict[str, Run], source) -> None:
    api = world.api(world.vision, source=source)
    run = twins[source]
    samples = api.post("/api/v1/gpu-samples", {"samples": [SAMPLE]}, content_type="application/json")
    assert samples.status_code == 202, samples.content
    assert _rows(samples.json()["id"]) == {run.pk}
    point = {"run": "r1", "key": "loss", "ts": SAMPLE["ts"], "value": 1.0}
    metrics = api.post("/api/v1/metrics", {"points": [point]}, content_type="application/json")
    assert metrics.status_code == 202 and _rows(metrics.json()["id"]) == {run.pk}
    record = {"run": "r1", "source_region": "us-west-2", "destination_region": "us-east-1", "bytes": 10,
              "ts": SAMPLE["ts"]}  # fmt: skip
    assert api.post("/api/v1/egress", {"records": [record]}, content_type="application/json").status_code == 201
    assert list(EgressRecord.objects.values_list("run_id", flat=True)) == [run.pk]
    event = {"kind": "xid", "run": "r1", "ts": SAMPLE["ts"], "message": "Xid 79"}
    body = json.dumps({"samples": [SAMPLE], "events": [event]})
    pushed = api.post("/api/v1/gpu-samples?bad_rows=drop", body, content_type="application/json")
    assert pushed.status_code in (200, 202) and pushed.json()["dropped_events"] == 0, pushed.content
    assert list(RunEvent.objects.values_list("run_id", flat=True)) == [run.pk]


@time_machine.travel(T0 + timedelta(hours=2), tick=False)
def test_a_row_naming_its_source_keeps_it(world: World, twins: dict[str, Run]) -> None:
    api = world.api(world.vision)  # local
    body = {"samples": [SAMPLE | {"run_source": "serverless"}]}
    response = api.post("/api/v1/gpu-samples", body, content_type="application/json")
    assert response.status_code == 202 and _rows(response.json()["id"]) == {twins[RunSource.SERVERLESS].pk}
