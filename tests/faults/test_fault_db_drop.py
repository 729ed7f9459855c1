"""PostgreSQL drops the request's connection mid-request: a clean 503, nothing half-written, then recovery.

The Django test client runs the view in this process, on this process's `connection`. An
execute wrapper waits for the upsert's first write to the attempts table, which comes after
the run's INSERT inside the same transaction, and at that moment terminates the connection's
backend from a second connection (`pg_terminate_backend`, as a failover or an admin would).
The request must answer 503 with Retry-After, the run's INSERT must have rolled back with
the connection, and the next request must succeed on a fresh connection.

Django's test client disconnects `close_old_connections` from request_started and
request_finished; a real WSGI/ASGI handler runs it at both. The tests call it where the
server would, so they see what production sees: the broken connection is closed at the end
of the failed request (errors_occurred), and a connection that died while idle is found by the
CONN_HEALTH_CHECKS check before the next request's first query.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import close_old_connections, connection

from runs.models import Attempt, Node, Run
from tests.conftest import World

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="pg_terminate_backend needs PostgreSQL; SQLite has no server connection to drop",
)

RUN = {
    "external_id": "dropped-1",
    "experiment_name": "/Workspace/Users/alice/llama-ft",
    "status": "running",
    "accelerator_type": "GPU_8xH100",
    "num_accelerators": 8,
    # An hour ago: a running run may not claim longer than the runtime cap, whatever today is.
    "started_at": (datetime.now(UTC) - timedelta(hours=1)).isoformat(),
    "attempts": [{"number": 1, "status": "running", "nodes": [{"index": 0, "host": "10.0.0.1", "status": "running"}]}],
}


def _terminate(pid: int) -> None:
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            # The timeout form waits until the backend is gone (PostgreSQL 14+).
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()


def _drop_before(table: str) -> Callable[..., Any]:
    fired: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if not fired and sql.lstrip().upper().startswith("INSERT") and f'"{table}"' in sql:
            fired.append(sql)
            _terminate(connection.connection.info.backend_pid)
        return execute(sql, params, many, context)

    wrapper.fired = fired  # type: ignore[attr-defined]
    return wrapper


@pytest.mark.django_db(transaction=True)
def test_connection_terminated_mid_upsert_answers_503_and_writes_nothing(world: World) -> None:
    api = world.api(world.vision)
    api.get("/api/v1/runs")  # the key's lookup has a connection open already
    wrapper = _drop_before(Attempt._meta.db_table)

    with connection.execute_wrapper(wrapper):
        response = api.post("/api/v1/runs", RUN, content_type="application/json")
    close_old_connections()  # request_finished, as the server sends it

    assert wrapper.fired, "the request never reached the attempts INSERT; the fault was not injected"
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "5"
    assert "nothing was stored" in response.json()["detail"]

    # The run's INSERT ran before the drop, in the same transaction: it must be gone with it.
    assert not Run.objects.filter(external_id="dropped-1").exists()
    assert not Attempt.objects.exists()
    assert not Node.objects.exists()

    # The next request reconnects and succeeds.
    close_old_connections()  # request_started
    response = api.post("/api/v1/runs", RUN, content_type="application/json")
    assert response.status_code == 201, response.content
    run = Run.objects.get(external_id="dropped-1")
    assert run.attempts.get().nodes.get().host == "10.0.0.1"


@pytest.mark.django_db(transaction=True)
def test_connection_killed_while_idle_is_replaced_before_the_next_request(world: World) -> None:
    """A connection that died between requests (failover, idle kill): the health check reconnects."""
    api = world.api(world.vision)
    assert api.get("/api/v1/runs").status_code == 200
    close_old_connections()  # request_finished: CONN_MAX_AGE keeps the connection open
    old_pid = connection.connection.info.backend_pid
    _terminate(old_pid)

    close_old_connections()  # request_started: marks the connection for a health check
    response = api.post("/api/v1/runs", RUN, content_type="application/json")
    assert response.status_code == 201, response.content
    assert connection.connection.info.backend_pid != old_pid
    assert Run.objects.filter(external_id="dropped-1").count() == 1
