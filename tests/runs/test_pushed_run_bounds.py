"""A pushed run's money is bounded as stored, after its update is merged (issue 33, runs.models.plausible).

The attacks, each with an ordinary ingest key: (a) a 512-GPU run started an hour ago, then
an end in 2199 in a second request; (b) 1,000 overlapping attempts, each within 14 days.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client

from billing.engine import run_cost
from billing.models import AcceleratorPrice, CostDaily
from dashboard.models import ApiKey, ApiKeyRole
from runs.models import Attempt, Node, Run
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(hours=1)
PRICE = Decimal("10")  # per accelerator-hour of GPU_8xH100


@pytest.fixture(autouse=True)
def _now() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def client(world: World) -> Client:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=PRICE,
    )  # fmt: skip
    raw = ApiKey.issue(world.nlp, ApiKeyRole.INGEST, name="t", source="serverless")[1]
    return Client(headers={"authorization": f"Bearer {raw}"})


def push(client: Client, **body: object) -> tuple[int, dict]:
    payload = {"external_id": "big", "source": "serverless", "accelerator_type": "GPU_8xH100",
               "num_accelerators": 512, "region": "us-west-2", **body}  # fmt: skip
    response = client.post("/api/v1/runs", payload, content_type="application/json")
    return response.status_code, response.json()


def test_an_end_in_2199_sent_after_the_start_is_refused_and_nothing_changes(client: Client) -> None:
    start = (NOW - timedelta(hours=1)).isoformat()
    status, _ = push(client, status="running", started_at=start,
                     attempts=[{"number": 1, "status": "running", "started_at": start}])  # fmt: skip
    assert status == 201

    status, body = push(client, ended_at="2199-01-01T00:00:00Z",
                        attempts=[{"number": 1, "ended_at": "2199-01-01T00:00:00Z"}])  # fmt: skip

    assert status == 422, body
    assert body["errors"][0]["field"] == "ended_at"
    assert "future" in body["errors"][0]["message"]
    run = Run.objects.get()
    assert run.ended_at is None and Attempt.objects.get().ended_at is None  # the whole update rolled back
    # The attempt alone, or the run alone, is refused the same way.
    assert push(client, attempts=[{"number": 1, "ended_at": "2199-01-01T00:00:00Z"}])[1]["errors"][0]["field"] == (
        "attempts[1].ended_at"
    )
    assert push(client, ended_at="2199-01-01T00:00:00Z")[0] == 422
    # A refresh writes the hour it ran, not 63,305 days of rows.
    call_command("refresh_costs", stdout=StringIO())
    assert set(CostDaily.objects.values_list("day", flat=True)) == {NOW.date()}
    assert run_cost(run, now=NOW).estimate.usd == 512 * PRICE


def test_an_end_within_the_clock_skew_is_kept(client: Client) -> None:
    start = (NOW - timedelta(hours=1)).isoformat()
    assert push(client, status="running", started_at=start)[0] == 201
    end = (NOW + timedelta(seconds=60)).isoformat()
    status, body = push(client, status="succeeded", ended_at=end)
    assert status == 200, body
    assert Run.objects.get().ended_at == NOW + timedelta(seconds=60)


def test_a_start_moved_back_past_the_runtime_cap_is_refused(client: Client) -> None:
    assert push(client, status="succeeded", ended_at=NOW.isoformat())[0] == 201
    status, body = push(client, started_at=(NOW - timedelta(days=15)).isoformat())
    assert status == 422
    assert body["errors"] == [{"field": "started_at", "message": "the run would have held its GPUs longer than "
                               "the 14-day runtime cap"}]  # fmt: skip


def test_a_thousand_overlapping_attempts_are_refused(client: Client) -> None:
    """Each within 14 days, together 14,000 days of 512 GPUs: $153 M before; refused now."""
    start, end = (NOW - timedelta(days=13)).isoformat(), NOW.isoformat()
    attempts = [{"number": n, "status": "failed", "started_at": start, "ended_at": end} for n in range(1, 1001)]
    status, body = push(client, status="failed", started_at=start, ended_at=end, attempts=attempts)

    assert status == 422, body
    assert body["errors"][0]["field"] == "attempts"
    assert "attempts of a run follow one another" in body["errors"][0]["message"]
    assert not Run.objects.exists() and not Attempt.objects.exists()


def test_overlapping_attempts_sent_one_request_at_a_time_are_refused_too(client: Client) -> None:
    start, end = (NOW - timedelta(days=13)).isoformat(), NOW.isoformat()
    one = {"status": "failed", "started_at": start, "ended_at": end}
    assert push(client, status="failed", started_at=start, ended_at=end, attempts=[{"number": 1, **one}])[0] == 201
    status, body = push(client, attempts=[{"number": 2, **one}])
    assert status == 422
    assert body["errors"][0]["field"] == "attempts"
    assert Attempt.objects.count() == 1
    cost = run_cost(Run.objects.get(), now=NOW).estimate.usd
    assert cost == 512 * PRICE * 13 * 24


def test_retries_that_follow_one_another_are_kept(client: Client) -> None:
    t = NOW - timedelta(days=3)
    attempts = [
        {"number": n, "status": "failed", "started_at": (t + timedelta(hours=10 * n)).isoformat(),
         "ended_at": (t + timedelta(hours=10 * n + 9)).isoformat(), "nodes": [{"index": i} for i in range(4)]}
        for n in range(1, 6)
    ]  # fmt: skip
    status, body = push(client, status="failed", started_at=t.isoformat(), attempts=attempts)
    assert status == 201, body
    assert Attempt.objects.count() == 5 and Node.objects.count() == 20
    assert run_cost(Run.objects.get(), now=NOW).estimate.usd == 512 * PRICE * 9 * 5


def test_a_classic_run_claims_no_fewer_gpus_a_node_than_its_instance_holds(world: World) -> None:
    """512 GPUs at one a node on a3-highgpu-8g would be billed as 512 eight-GPU instances."""
    raw = ApiKey.issue(world.nlp, ApiKeyRole.INGEST, name="c", source="classic")[1]
    classic = Client(headers={"authorization": f"Bearer {raw}"})
    start = (NOW - timedelta(hours=1)).isoformat()
    body = {"external_id": "c1", "source": "classic", "instance_type": "a3-highgpu-8g", "num_accelerators": 512,
            "region": "us-west-2", "status": "running", "started_at": start}  # fmt: skip
    response = classic.post("/api/v1/runs", body | {"gpus_per_node": 1}, content_type="application/json")
    assert response.status_code == 422, response.content
    assert response.json()["errors"] == [
        {"field": "gpus_per_node", "message": "is 1, but a3-highgpu-8g holds 8 GPUs a node"}
    ]
    assert classic.post("/api/v1/runs", body | {"gpus_per_node": 8}, content_type="application/json").status_code == 201
    # Left out, it is the instance type's.
    response = classic.post("/api/v1/runs", body | {"external_id": "c2"}, content_type="application/json")
    assert response.status_code == 201 and response.json()["run"]["gpus_per_node"] == 8


def test_a_pushed_run_left_running_stops_accruing_at_the_runtime_cap(client: Client, world: World) -> None:
    """Written within the bounds, then never ended: it must not spend a budget for ever."""
    start = (NOW - timedelta(days=13)).isoformat()
    attempts = [{"number": 1, "status": "running", "started_at": start}]
    assert push(client, status="running", started_at=start, attempts=attempts)[0] == 201
    run = Run.objects.get()

    later = run_cost(run, now=NOW + timedelta(days=30))

    assert later.estimate.usd == 512 * PRICE * 14 * 24
    assert later.breakdown.intervals[0].end == NOW - timedelta(days=13) + timedelta(days=14)
    # A collector's run is the collector's to end: it accrues as before.
    theirs = make_run(world.vision, "collected", status="running", ended_at=None, started_at=NOW - timedelta(days=13))
    assert run_cost(theirs, now=NOW + timedelta(days=30)).estimate.usd == 8 * PRICE * 43 * 24
