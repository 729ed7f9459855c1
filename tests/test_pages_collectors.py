"""The collectors page and the overview's stale-collector warning."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.choices import CollectorKind
from runs.models import CollectorState, MlflowRun
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db


def test_collectors_page_shows_health_and_errors(world: World) -> None:
    now = timezone.now()
    CollectorState.objects.create(
        name="mlflow", kind=CollectorKind.MLFLOW, last_success_at=now, items_last_run=12, items_total=3400
    )
    CollectorState.objects.create(
        name="runs",
        kind=CollectorKind.RUNS,
        last_success_at=now - timedelta(hours=3),
        last_error="CollectorError: databricks exited 1: Error: invalid token",
        last_error_at=now,
        expected_interval_seconds=60,
    )
    html = world.client_for(world.alice).get("/collectors/").content.decode()
    assert "mlflow" in html and "3,400" in html
    assert "invalid token" in html
    assert html.count("badge-bad") == 1  # only the runs collector is stale


def test_unlinked_mlflow_runs_are_listed_for_staff_only(world: World) -> None:
    run = make_run(world.vision, "r1")
    MlflowRun.objects.create(mlflow_run_id="a" * 32, run_name="orphan-sweep-7")
    MlflowRun.objects.create(mlflow_run_id="b" * 32, run_name="linked-one", run=run)
    staff = world.client_for(world.sam).get("/collectors/").content.decode()
    assert "orphan-sweep-7" in staff
    assert "linked-one" not in staff
    member = world.client_for(world.charlie).get("/collectors/").content.decode()
    assert "orphan-sweep-7" not in member


def test_overview_warns_when_a_collector_is_stale(world: World) -> None:
    client = world.client_for(world.alice)
    assert "Collectors behind" not in client.get("/").content.decode()
    CollectorState.objects.create(name="logs", kind=CollectorKind.LOGS, last_error="OSError: gone")
    html = client.get("/").content.decode()
    assert "Collectors behind" in html and "has never succeeded" in html


def test_anonymous_is_sent_to_login(client) -> None:
    response = client.get("/collectors/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
