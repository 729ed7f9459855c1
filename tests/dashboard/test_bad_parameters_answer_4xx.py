"""Bad input answers a clear 4xx naming what is wrong, never a 500 (times, numbers, text, sizes)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client

from dashboard.models import ApiKeyRole
from tests.conftest import T0, World, make_run
from tests.mlflow_server import MlflowServer, mlflow_server  # noqa: F401 (fixture)


def _quiet(client: Client) -> Client:
    """Answer as a server would (a 500 page), not by raising into the test."""
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize(
    "value",
    [
        "2024-13-01T00:00",  # well formed, no such month: parse_datetime raises ValueError
        "0001-01-01T00:00+05:00",  # before date.min once in UTC: OverflowError in the query
        "9999-12-31T23:59-05:00",  # after date.max once in UTC
    ],
)
def test_the_run_lists_submitted_after_answers_422_for_a_time_it_cannot_use(world: World, value: str) -> None:
    client = _quiet(world.api(world.vision, ApiKeyRole.READ))
    response = client.get("/api/v1/runs", {"submitted_after": value})
    assert response.status_code == 422, response.content[:200]
    assert "submitted_after" in json.dumps(response.json()["errors"])


@pytest.mark.parametrize("value", ["2026-11-02T08:00:00Z", "2026-11-02T08:00", "2026-11-02 08:00", "2026-11-02"])
def test_the_run_lists_submitted_after_still_takes_the_iso_times_it_took(world: World, value: str) -> None:
    make_run(world.vision, "new", submitted_at=T0)
    make_run(world.vision, "old", submitted_at=T0 - timedelta(days=2))
    response = world.api(world.vision, ApiKeyRole.READ).get("/api/v1/runs", {"submitted_after": value})
    assert [r["external_id"] for r in response.json()["results"]] == ["new"]


def test_the_telemetry_endpoint_answers_400_for_times_at_year_one(world: World) -> None:
    run = make_run(world.vision, "a-1")
    client = _quiet(world.client_for(world.alice))
    response = client.get(f"/runs/{run.pk}/telemetry.json", {"from": "0001-01-01T00:00", "to": "0001-01-01T00:01"})
    assert response.status_code == 400, response.content[:200]


@pytest.mark.parametrize(
    "url",
    [
        "/runs/?submitted_to=9999-12-31",
        "/runs/?format=csv&submitted_to=9999-12-31",
        "/runs/failures/?end=9999-12-31",
        "/runs/failures/?format=csv&end=9999-12-31",
        "/costs/?end=9999-12-31",
        "/costs/?start=0001-01-01&end=9999-12-31",
        "/costs/?format=csv&table=egress&end=9999-12-31",
    ],
)
def test_date_filters_at_the_calendar_edges_are_form_errors_not_500s(world: World, url: str) -> None:
    make_run(world.vision, "a-1")
    response = _quiet(world.client_for(world.alice)).get(url)
    assert response.status_code == 200, url


def test_a_lone_surrogate_in_parameters_is_a_422_not_a_run_page_that_500s(world: World) -> None:
    """JSON's "\\ud800" decodes to a str UTF-8 cannot encode: stored, it made the run page a 500 for good."""
    client = _quiet(world.api(world.vision))
    for external_id, parameters in (("s-1", {"k": "\ud800"}), ("s-2", {"\udcff": 1})):
        body = json.dumps({"external_id": external_id, "parameters": parameters})
        response = client.post("/api/v1/runs", body, content_type="application/json")
        assert response.status_code == 422, response.content[:200]
        assert response.json()["errors"][0]["field"].startswith("parameters")
    assert not world.vision.runs.exists()


def test_a_run_upsert_with_tens_of_thousands_of_nodes_is_a_422_not_a_minute_of_a_worker(world: World) -> None:
    """10 attempts x 4,096 nodes (700 KB, under the 8 MB body limit) took ~50 s in one transaction."""
    attempts = [{"number": a + 1, "nodes": [{"index": i} for i in range(4096)]} for a in range(10)]
    client = _quiet(world.api(world.vision))
    response = client.post(
        "/api/v1/runs", json.dumps({"external_id": "wide", "attempts": attempts}), content_type="application/json"
    )
    assert response.status_code == 422, response.content[:200]
    # Refused by the schema, before any query (timing is left out: this machine is shared).
    assert "nodes" in response.json()["errors"][0]["message"]
    assert not world.vision.runs.exists()


@pytest.mark.parametrize(
    "query",
    [
        {"attempt": "\u00b2", "node": "0"},  # '²'.isdigit() is true, int('²') raises
        {"attempt": "1", "node": "0", "after": "\u00b2"},
        {"attempt": "1", "node": "0", "after": "9" * 5000},  # int() refuses more than 4,300 digits
    ],
)
def test_the_log_tail_answers_4xx_for_numbers_it_cannot_read(world: World, query: dict[str, str]) -> None:
    run = make_run(world.vision, "a-1")
    response = _quiet(world.client_for(world.alice)).get(f"/runs/{run.pk}/log/tail.json", query)
    assert response.status_code in (400, 404), response.status_code
    assert "error" in response.json()


def test_a_policy_threshold_that_only_looks_like_a_digit_is_a_form_error(world: World) -> None:
    """'²'.isdigit() is true and int('²') raises: the policy form answered 500 to a policy admin."""
    response = _quiet(world.client_for(world.sam)).post(
        "/costs/policies/new/", {"name": "p", "alert_thresholds": "50, \u00b2"}
    )
    assert response.status_code == 200
    assert "is not a whole percent" in response.content.decode()
