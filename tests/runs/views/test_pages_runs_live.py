"""The run status endpoint live.js polls, the run list's CSV, and the live-update hooks in the pages."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from runs.choices import RunStatus
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db


def test_status_json(world: World) -> None:
    run = make_run(world.vision, "r1", status=RunStatus.RUNNING, ended_at=None)
    response = world.client_for(world.alice).get(reverse("run_status", args=[run.pk]))
    assert response.status_code == 200
    assert response["Cache-Control"] == "private, no-cache"
    body = response.json()
    assert body["status"] == "running" and body["status_label"] == "Running" and body["active"] is True
    assert body["ended_at"] is None and body["external_id"] == "r1"


def test_status_json_is_scoped(world: World) -> None:
    run = make_run(world.vision, "r1")
    assert world.client_for(world.charlie).get(reverse("run_status", args=[run.pk])).status_code == 404


def test_only_active_runs_poll(world: World) -> None:
    active = make_run(world.vision, "active-1", status=RunStatus.RUNNING, ended_at=None)
    done = make_run(world.vision, "done-1")
    client = world.client_for(world.alice)
    listing = client.get(reverse("run_list")).content.decode()
    assert listing.count("data-live-run=") == 1
    assert f'data-live-run="{reverse("run_status", args=[active.pk])}"' in listing
    page = client.get(reverse("run_detail", args=[active.pk])).content.decode()
    assert "data-live-telemetry" in page and page.count("data-live-run=") == 2
    finished = client.get(reverse("run_detail", args=[done.pk])).content.decode()
    assert "data-live-run=" not in finished and "data-live-telemetry" not in finished
    assert '<script src="/static/js/localtime.js" defer>' in finished


def test_run_list_csv_has_every_filtered_run(world: World, settings) -> None:
    settings.AIRBOARD_RUNS_PER_PAGE = 1
    for i in range(3):
        make_run(world.vision, f"failed-{i}", status=RunStatus.FAILED)
    make_run(world.vision, "ok-1")
    make_run(world.nlp, "nlp-failed", status=RunStatus.FAILED)
    client = world.client_for(world.alice)
    assert "format=csv" in client.get(reverse("run_list"), {"status": "failed"}).content.decode()
    response = client.get(reverse("run_list"), {"status": "failed", "format": "csv"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="runs-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert sorted(r["external_id"] for r in rows) == ["failed-0", "failed-1", "failed-2"]
    assert rows[0]["duration_seconds"] == "3600" and rows[0]["started_at"].endswith("+00:00")
