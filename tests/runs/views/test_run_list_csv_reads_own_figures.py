"""The run list CSV reads the stored cost figures of the runs it writes, not every team's.

The figures' cells are read before the COPY (csv_export.Tail). They were read for every run
with a usable figure, whatever its team: nothing leaked (only the caller's rows are written),
but another team's runs added to each download's time.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.urls import reverse

from billing.costs import rollups
from billing.models import AcceleratorPrice, RunCostFigure
from runs.glance import CsvCells
from tests.conftest import T0, World, make_run

PASS = T0 + timedelta(days=2)
LATER = PASS + timedelta(hours=1)

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's"),
]


def test_a_download_reads_only_its_own_runs_figures(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="2.50"
    )
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        mine = [make_run(world.vision, f"vision-{i}") for i in range(2)]
        theirs = [make_run(world.nlp, f"nlp-{i}") for i in range(3)]
    with time_machine.travel(PASS, tick=False):
        rollups.refresh_changed(PASS)
    assert RunCostFigure.objects.count() == 5

    _, _, tail = CsvCells(LATER).sql([world.vision.pk])
    read = {int(pk) for pk, _ in tail.rows}
    assert read == {run.pk for run in mine}
    assert not read & {run.pk for run in theirs}

    # The download itself: every row of the caller's runs has its stored cost, no other team's row.
    with time_machine.travel(LATER, tick=False):
        response = world.client_for(world.alice).get(reverse("run_list"), {"format": "csv"})
        body = b"".join(response.streaming_content).decode()
    rows = {row["external_id"]: row for row in csv.DictReader(io.StringIO(body, newline=""))}
    assert set(rows) == {"vision-0", "vision-1"}
    figures = {f.run.external_id: f for f in RunCostFigure.objects.select_related("run")}
    for name, row in rows.items():
        assert Decimal(row["cost_usd"]) == figures[name].usd > 0 and row["cost_kind"] == figures[name].kind
