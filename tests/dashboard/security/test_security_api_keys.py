"""API keys: hashed at rest, one indexed lookup per request, last use recorded, revocable."""

from __future__ import annotations

from datetime import timedelta

import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.models import ApiKey, ApiKeyRole, hash_key
from tests.conftest import T0, World


def test_the_raw_key_is_never_stored(world: World) -> None:
    key, raw = ApiKey.issue(world.vision, ApiKeyRole.INGEST)
    stored = ApiKey.objects.values().get(pk=key.pk)
    assert raw not in {str(v) for v in stored.values()}
    assert stored["key_hash"] == hash_key(raw)
    # The visible prefix tells keys apart without revealing enough to use one.
    assert raw.startswith(key.prefix) and len(key.prefix) <= 10 < len(raw)


def test_checking_a_key_is_one_lookup_by_its_unique_hash(world: World) -> None:
    _, raw = ApiKey.issue(world.vision, ApiKeyRole.INGEST)
    ApiKey.authenticate(raw)  # records last use now
    with CaptureQueriesContext(connection) as queries:
        assert ApiKey.authenticate(raw) is not None
    selects = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1
    assert '"key_hash" =' in selects[0]
    # The lookup column carries the unique index (apikey_hash_unique); no scan, whatever the key count.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, ApiKey._meta.db_table)
    assert any(c["columns"] == ["key_hash"] and c["unique"] for c in constraints.values())
    # Within the minute after a recorded use, the lookup is the only query: no last-used write.
    assert len(queries) == 1


def test_last_use_is_recorded_at_most_once_a_minute(world: World) -> None:
    key, raw = ApiKey.issue(world.vision, ApiKeyRole.READ)
    with time_machine.travel(T0, tick=False):
        ApiKey.authenticate(raw)
    key.refresh_from_db()
    assert key.last_used_at == T0
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        ApiKey.authenticate(raw)
    key.refresh_from_db()
    assert key.last_used_at == T0
    with time_machine.travel(T0 + timedelta(minutes=2), tick=False):
        ApiKey.authenticate(raw)
    key.refresh_from_db()
    assert key.last_used_at == T0 + timedelta(minutes=2)


def test_a_revoked_key_is_refused(world: World) -> None:
    key, raw = ApiKey.issue(world.vision, ApiKeyRole.READ)
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert ApiKey.authenticate(raw) is None
    assert Client(headers={"authorization": f"Bearer {raw}"}).get("/api/v1/runs").status_code == 401


def test_a_wrong_or_oversized_token_is_401_without_a_query(world: World, client) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/runs", headers={"authorization": "Bearer " + "a" * 5000})
    assert response.status_code == 401
    assert not [q for q in queries if "apikey" in q["sql"].lower()]
