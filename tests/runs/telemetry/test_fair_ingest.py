"""Fair ingest (issue 33): per-request node limits, one row cap on every path, per-key rows a minute,
node and attempt lookups in bulk, so one key's heavy push does not hold the write path."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.choices import BatchKind
from runs.models import Attempt, IngestBatch, Node, Run
from tests.conftest import T0, World, make_run, serverless_api

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _during_the_runs() -> Iterator[None]:
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        yield


def rows_naming(pairs: list[tuple[int, int]], run: str = "r1") -> list[dict]:
    """One sample for each (attempt, node), as the API's shape has it."""
    return [{"run": run, "attempt": attempt, "node": node, "gpu": 0, "ts": (T0 + timedelta(seconds=1)).isoformat(),
             "utilization_gpu": 50} for attempt, node in pairs]  # fmt: skip


def push(world: World, samples: list[dict], team=None):
    api = serverless_api(world, team)  # make_run's runs are serverless; the rows name no source
    return api.post("/api/v1/gpu-samples", {"samples": samples}, content_type="application/json")


def test_more_distinct_nodes_than_the_limit_is_a_413_naming_it(world: World, settings) -> None:
    make_run(world.vision, "r1")
    pairs = [(attempt, node) for attempt in range(1, 11) for node in range(52)]  # 520 > 512

    response = push(world, rows_naming(pairs))

    assert response.status_code == 413, response.content
    assert response.json()["detail"].startswith("520 distinct (run, attempt, node) in one request; the limit is 512")
    assert not IngestBatch.objects.exists()
    assert Node.objects.count() == 1 and Attempt.objects.count() == 1  # make_run's own


def test_nodes_are_looked_up_in_bulk(world: World) -> None:
    """The queries of a push do not grow with the nodes it names (10,000 nodes took 25-47 s)."""
    make_run(world.vision, "r1")
    make_run(world.vision, "r2", started_at=T0, ended_at=None)

    def queries(pairs: list[tuple[int, int]], run: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert push(world, rows_naming(pairs, run)).status_code == 202
        return len(captured)

    few = queries([(1, 0), (2, 1)], "r1")
    many = queries([(attempt, node) for attempt in range(3, 11) for node in range(64)], "r1")  # 512 new nodes

    assert many <= few + 5, (few, many)  # a bulk insert may go in a few statements; one a node was 1,500
    assert Node.objects.filter(attempt__run__external_id="r1").count() == 1 + 1 + 512  # (1, 0) was make_run's
    # The latest attempt (no `attempt` in the row) and the host are as node_for gives them.
    latest = [{"run": "r2", "node": 3, "host": "10.0.0.9", "gpu": 0, "ts": (T0 + timedelta(seconds=1)).isoformat()}]
    assert push(world, latest).status_code == 202
    node = Node.objects.get(attempt__run__external_id="r2", index=3)
    assert (node.attempt.number, node.host) == (1, "10.0.0.9")


def test_a_telemetry_file_over_the_row_cap_is_a_413(world: World) -> None:
    """The same 10,000-row cap as every batch: a file of 172,800 rows went through in one batch."""
    make_run(world.vision, "r1")
    # nvidia-smi --query-gpu CSV, as tests/runs/telemetry/test_api_telemetry.py reads it.
    lines = ["timestamp, index, utilization.gpu [%], power.draw [W]"]
    for second in range(1, 1252):  # 1,251 s x 8 GPUs = 10,008 rows, inside the run's hour
        stamp = (T0 + timedelta(seconds=second)).strftime("%Y/%m/%d %H:%M:%S.000")
        lines += [f"{stamp}, {gpu}, 50 %, 300.00 W" for gpu in range(8)]
    api = world.api(world.vision)
    response = api.post("/api/v1/runs/r1/telemetry-file", {"text": "\n".join(lines) + "\n"},
                        content_type="application/json")  # fmt: skip
    assert response.status_code == 413, response.content[:300]
    assert "10008 samples in the file in one request; the limit is 10000" in response.json()["detail"]
    assert not IngestBatch.objects.exists()


def test_a_key_past_its_rows_a_minute_gets_a_429_and_another_team_does_not(world: World, settings) -> None:
    settings.AIRBOARD_INGEST_ROWS_PER_MINUTE = 100
    make_run(world.vision, "r1")
    make_run(world.nlp, "n1")
    sixty = [(1, 0)] * 60
    api = serverless_api(world)  # one key for both pushes

    def push_once(samples: list[dict]):
        return api.post("/api/v1/gpu-samples", {"samples": samples}, content_type="application/json")

    first = push_once([dict(s, gpu=i % 8, ts=(T0 + timedelta(seconds=i)).isoformat())
                         for i, s in enumerate(rows_naming(sixty))])  # fmt: skip
    second = push_once([dict(s, gpu=i % 8, ts=(T0 + timedelta(seconds=100 + i)).isoformat())
                          for i, s in enumerate(rows_naming(sixty))])  # fmt: skip
    theirs = push(world, rows_naming([(1, 0)], "n1"), team=world.nlp)

    assert first.status_code == 202
    assert second.status_code == 429
    assert "past 100 rows a minute" in second.json()["detail"]
    assert int(second["Retry-After"]) >= 1
    assert theirs.status_code == 202
    assert IngestBatch.objects.filter(kind=BatchKind.GPU_SAMPLES).count() == 2


def test_an_upsert_of_1000_attempts_by_4_nodes_takes_a_constant_number_of_queries(world: World) -> None:
    """17.8 s before: a get_or_create and a save for each attempt and each node."""
    api = world.api(world.vision)
    start = T0 - timedelta(hours=2)

    def upsert(external_id: str, attempts: int) -> int:
        body = {"external_id": external_id, "status": "failed", "started_at": start.isoformat(),
                "attempts": [{"number": n, "status": "failed",
                              "started_at": (start + timedelta(seconds=10 * n)).isoformat(),
                              "ended_at": (start + timedelta(seconds=10 * n + 5)).isoformat(),
                              "nodes": [{"index": i, "status": "failed"} for i in range(4)]}
                             for n in range(1, attempts + 1)]}  # fmt: skip
        with CaptureQueriesContext(connection) as captured:
            response = api.post("/api/v1/runs", body, content_type="application/json")
            assert response.status_code == 201, response.content[:300]
        return len(captured)

    few, many = upsert("few", 2), upsert("many", 1000)
    assert many <= few + 50, (few, many)  # inserts and updates in batches of 500 rows; before, ~4 queries a row
    run = Run.objects.get(external_id="many")
    assert Attempt.objects.filter(run=run).count() == 1000
    assert Node.objects.filter(attempt__run=run).count() == 4000
    # Sent again with a later status: updated in place, nothing doubled.
    again = api.post("/api/v1/runs", {"external_id": "few", "attempts": [{"number": 2, "exit_code": 3}]},
                     content_type="application/json")  # fmt: skip
    assert again.status_code == 200
    assert Attempt.objects.get(run__external_id="few", number=2).exit_code == 3
    assert Node.objects.filter(attempt__run__external_id="few").count() == 8


def test_an_agent_push_over_the_row_cap_is_a_413(world: World, settings) -> None:
    """The agent's door (?bad_rows=drop) has the same 10,000-row cap as every other path."""
    settings.AIRBOARD_MAX_SAMPLES_PER_BATCH = 10
    make_run(world.vision, "r1")
    samples = [{"run": "r1", "gpu": 0, "ts": (T0 + timedelta(seconds=i)).isoformat(), "utilization_gpu": 1}
               for i in range(11)]  # fmt: skip
    response = serverless_api(world).post(
        "/api/v1/gpu-samples?bad_rows=drop", {"samples": samples}, content_type="application/json"
    )
    assert response.status_code == 413
    assert "the limit is 10" in response.json()["detail"]
    assert not IngestBatch.objects.exists()
