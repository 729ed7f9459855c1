"""The collectors page and the overview's stale-collector warning."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
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
    # A member learns that it failed; the text (it may name other teams' runs) is staff's.
    assert "invalid token" not in html and "failed (the error is shown to staff)" in html
    assert html.count("badge-bad") == 1  # only the runs collector is stale
    assert "invalid token" in world.client_for(world.sam).get("/collectors/").content.decode()


def test_collector_errors_are_redacted_before_they_are_stored(world: World, settings) -> None:
    # A run source command whose failure quotes every kind of credential the issue found shown.
    settings.AIRBOARD_RUN_SOURCE_COMMAND = (
        "sh -c 'echo \"GET https://svc:hunter2@ws.example.com/api?access_token=tok123 --password=pw456 "
        "-H X-Api-Key: key789 run 1001\" >&2; exit 3'"
    )
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""
    with pytest.raises(CommandError):
        call_command("collect", "runs", "--once", stdout=StringIO(), stderr=StringIO())
    error = CollectorState.objects.get(name="runs").last_error
    assert "exited with 3" in error
    for secret in ("hunter2", "tok123", "pw456", "key789"):
        assert secret not in error
    staff = world.client_for(world.sam).get("/collectors/").content.decode()
    assert "svc" not in staff and "hunter2" not in staff and "--password=***" in staff
    member = world.client_for(world.charlie).get("/collectors/?format=csv").content.decode()
    assert "1001" not in member


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
