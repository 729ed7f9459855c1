"""A settled run's row of the run list CSV is written whole by COPY (its stored cost figure, its
last sample from the minute tier): the last sample of a run whose minutes are older than the
table's window, and the empty cell of a run with none, are the Python writer's."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
import time_machine
from django.db import connection

from billing.costs import rollups
from billing.models import AcceleratorPrice, RunCostFigure
from runs.glance import CsvCells
from runs.models import GpuMinute, GpuSample, Run
from runs.telemetry.store import store_gpu_samples
from runs.views.lists import runs_csv
from tests.conftest import T0, World, make_run

PASS = T0 + timedelta(days=2)
LATER = PASS + timedelta(hours=1)

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's"),
]


def rows(by_database: bool) -> dict[str, dict[str, str]]:
    with time_machine.travel(LATER, tick=False):
        body = b"".join(
            runs_csv(
                Run.objects.order_by("external_id"), LATER, by_database=by_database, team_ids=None
            ).streaming_content
        )
    return {row["external_id"]: row for row in csv.DictReader(io.StringIO(body.decode(), newline=""))}


def test_a_settled_runs_old_minutes_give_its_last_sample_in_the_copy(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="2.50"
    )
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        sampled = make_run(world.vision, "sampled")
        make_run(world.vision, "silent")
        node = sampled.attempts.get().nodes.get()
        store_gpu_samples(
            [GpuSample(run=sampled, node=node, gpu_index=g, ts=T0 + timedelta(minutes=m, seconds=5),
                       utilization_gpu=50.0) for g in range(2) for m in (10, 41)]
        )  # fmt: skip
    assert GpuMinute.objects.filter(run=sampled).count() == 4
    with time_machine.travel(PASS, tick=False):
        rollups.refresh_changed(PASS)
    assert RunCostFigure.objects.count() == 2
    # Neither row's cells are replaced by Python's: COPY writes them whole.
    with time_machine.travel(LATER, tick=False):
        assert not any(Run.objects.filter(q).exists() for q in CsvCells(LATER).sql(None)[0])

    by_copy, by_python = rows(by_database=True), rows(by_database=False)
    assert by_copy["sampled"]["last_sample_at"] == "2026-11-02T09:42:00+00:00"  # the newest minute's end
    assert by_copy["silent"]["last_sample_at"] == ""
    assert by_copy["sampled"]["gpu_utilization_percent"] == ""  # nothing in the window
    for name in ("sampled", "silent"):
        assert by_copy[name] == by_python[name]
