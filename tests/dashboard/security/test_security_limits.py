"""Limits answer clearly: 429 with Retry-After past the ingest rate, 413 past the body cap."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from dashboard.kit import ratelimit
from dashboard.models import ApiKeyRole
from tests.conftest import World, make_run


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    # Counters live in the process-wide cache; each test starts from zero.
    cache.clear()


def _log(client: Client, seq: int):
    return client.post(
        "/api/v1/runs/run-1/logs", {"seq": seq, "text": f"line {seq}\n"}, content_type="application/json"
    )


def test_ingest_past_the_rate_is_429_with_retry_after(world: World, settings) -> None:
    settings.AIRBOARD_INGEST_RATE_PER_MINUTE = 3
    make_run(world.vision)
    client = world.api(world.vision)
    assert [_log(client, i).status_code for i in range(3)] == [201, 201, 201]
    refused = _log(client, 3)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "3 write requests a minute" in refused.json()["detail"]


def test_the_rate_is_per_key_and_reads_are_not_counted(world: World, settings) -> None:
    settings.AIRBOARD_INGEST_RATE_PER_MINUTE = 1
    make_run(world.vision)
    first, second = world.api(world.vision), world.api(world.vision)
    assert _log(first, 0).status_code == 201
    assert _log(first, 1).status_code == 429
    # Another key of the same team has its own allowance.
    assert _log(second, 1).status_code == 201
    # Reads by the throttled key still work.
    assert first.get("/api/v1/runs/run-1").status_code == 200


def test_fixed_window_counts_and_resets() -> None:
    limit = ratelimit.Limit(2, 60)
    assert [ratelimit.hit("t", "x", limit, now=120.0).allowed for _ in range(3)] == [True, True, False]
    assert ratelimit.hit("t", "x", limit, now=150.5).retry_after == 30
    # The next window starts from zero.
    assert ratelimit.hit("t", "x", limit, now=180.0).allowed
    assert ratelimit.peek("t", "x", limit, now=181.0).count == 1
    ratelimit.reset("t", "x", limit, now=181.0)
    assert ratelimit.peek("t", "x", limit, now=181.0).count == 0


def test_client_ip_trusts_only_the_configured_proxies(rf) -> None:
    request = rf.get("/", REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7")
    assert ratelimit.client_ip(request) == "10.0.0.9"
    # One proxy: the address it saw is the rightmost entry; the spoofable left part is ignored.
    assert ratelimit.client_ip(request, trusted_proxies=1) == "203.0.113.7"


def test_an_oversized_form_post_is_413_before_it_is_read(world: World, settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    client = world.client_for(world.sam)
    response = client.post("/costs/prices/upload/", {"note": "x" * 4096})
    assert response.status_code == 413
    assert b"too large" in response.content


def test_an_oversized_api_body_is_413_json(world: World, settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    make_run(world.vision)
    response = world.api(world.vision, ApiKeyRole.INGEST).post(
        "/api/v1/runs/run-1/logs", {"seq": 0, "text": "x" * 4096}, content_type="application/json"
    )
    assert response.status_code == 413
    assert "too large" in response.json()["detail"]


def test_a_cost_query_ending_in_year_one_is_a_422_not_a_500(world: World) -> None:
    # Found by tests/dashboard/api/test_api_fuzz.py: the default 90-day window ran below date.min.
    response = world.api(world.vision).get("/api/v1/costs", {"to": "0001-01-01"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "to"
