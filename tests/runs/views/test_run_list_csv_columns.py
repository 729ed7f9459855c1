"""The run list's CSV has every column the table shows, with the table's own numbers (issue 35).

GPU utilization (the last minute of the hour), the last sample and the cost (estimate, its kind,
the bill beside it) come from what the table reads (runs.glance, billing.engine), on the Python
writer (SQLite) and on COPY (PostgreSQL), filters applied the same way, before and after the
rollup pass has stored the settled runs' cost figures.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing.costs import rollups
from billing.models import AcceleratorPrice, BilledUsage, RunCostFigure
from billing.templatetags.billing_tags import usd
from dashboard.kit.csv_export import cell as write_cell
from runs import glance
from runs.choices import RunStatus
from runs.models import GpuSample, Run
from runs.telemetry.store import store_gpu_samples
from runs.views.lists import COLUMNS, CSV_HEADER
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(days=2)
# The table's column titles and the CSV column that carries each.
TABLE_TO_CSV = {
    "Run": "external_id", "Status": "status", "GPU utilization (1 h)": "gpu_utilization_percent", "Cost": "cost_usd",
    "Experiment": "experiment_name", "Team": "team", "Creator": "creator", "Accelerator": "accelerator_type",
    "Region": "region", "Submitted": "submitted_at", "Started": "started_at", "Duration": "duration_seconds",
}  # fmt: skip


def samples(run: Run, minutes_ago: range, util: float) -> None:
    node = run.attempts.get().nodes.get()
    store_gpu_samples(
        [
            GpuSample(run=run, node=node, gpu_index=gpu, ts=NOW - timedelta(minutes=m, seconds=s),
                      utilization_gpu=util + gpu * 3.25)
            for m in minutes_ago
            for s in (5, 35)
            for gpu in (0, 1)
        ]
    )  # fmt: skip


def workspace(world: World) -> list[Run]:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="2.50"
    )
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        running = make_run(world.vision, "running", status=RunStatus.RUNNING, ended_at=None,
                           started_at=NOW - timedelta(hours=3))  # fmt: skip
        done = make_run(world.vision, "done", status=RunStatus.SUCCEEDED)
        failed = make_run(world.vision, "failed", status=RunStatus.FAILED, region="sa-east-1")  # unpriced
        billed = make_run(world.vision, "billed", num_accelerators=16)
        make_run(world.nlp, "theirs")
    samples(running, range(1, 20), 61.5)
    samples(done, range(60 * 30, 60 * 30 + 5), 90.0)  # 30 hours ago: a last sample, no utilization this hour
    BilledUsage.objects.create(
        record_id="r-1", sku_name="PREMIUM_SERVERLESS_GPU", usage_start_time=T0,
        usage_end_time=T0 + timedelta(hours=1), usage_date=T0.date(), usage_quantity=Decimal("16"),
        usage_unit="GPU_HOUR", billing_origin_product="AI_RUNTIME", job_run_id="5001", run=billed,
        price_per_unit=Decimal("2.40"), billed_usd=Decimal("38.40"), imported_at=T0,
    )  # fmt: skip
    return [running, done, failed, billed]


def download(world: World, query: dict | None = None) -> dict[str, dict[str, str]]:
    with time_machine.travel(NOW, tick=False):
        response = world.client_for(world.alice).get(reverse("run_list"), {"format": "csv", **(query or {})})
        body = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body, newline="")))
    assert rows and list(rows[0]) == CSV_HEADER
    return {row["external_id"]: row for row in rows}


def cell(value: object) -> str:
    """A glance value as the CSV writes it (the one writer's rule, dashboard.kit.csv_export.cell)."""
    return str(write_cell(value))


def assert_the_tables_numbers(runs: list[Run], rows: dict[str, dict[str, str]]) -> None:
    found = glance.glances(Run.objects.filter(pk__in=[r.pk for r in runs]), now=NOW)
    for run in runs:
        row, shown = rows[run.external_id], found[run.pk]
        billed = shown.cost.billed_figure
        assert row["gpu_utilization_percent"] == cell(shown.last_utilization), run.external_id
        assert row["last_sample_at"] == cell(shown.last_sample_at), run.external_id
        assert row["cost_usd"] == cell(shown.cost.estimate.usd), run.external_id
        assert row["cost_kind"] == shown.cost.estimate.kind, run.external_id
        assert row["billed_usd"] == cell(billed.usd if billed else None), run.external_id


def test_every_table_column_is_in_the_csv() -> None:
    assert set(TABLE_TO_CSV) == {title for title, _ in COLUMNS}
    assert set(TABLE_TO_CSV.values()) <= set(CSV_HEADER)
    assert {"last_sample_at", "cost_kind", "billed_usd"} <= set(CSV_HEADER)


def test_the_csv_carries_the_tables_utilization_and_cost(world: World) -> None:
    runs = workspace(world)
    rows = download(world)
    assert set(rows) == {"running", "done", "failed", "billed"}  # the team's runs only
    assert_the_tables_numbers(runs, rows)
    # The numbers are real ones: the two GPUs' last minute, 3 h of 8 x $2.50 so far, a lower bound, the bill.
    assert float(rows["running"]["gpu_utilization_percent"]) == pytest.approx(61.5 + 3.25 / 2)
    assert rows["running"]["cost_usd"] == "60" and rows["failed"]["cost_kind"] == "lower bound"
    assert rows["done"]["gpu_utilization_percent"] == "" and rows["done"]["last_sample_at"]
    assert rows["billed"]["billed_usd"] == "38.4" and rows["done"]["billed_usd"] == ""
    # And the page prints the same money and utilization.
    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.alice).get(reverse("run_list")).content.decode()
    for row in rows.values():
        assert usd(Decimal(row["cost_usd"])) in html
    assert f"{float(rows['running']['gpu_utilization_percent']):.0f}%" in html


def test_filters_select_the_same_runs_with_the_same_cells(world: World) -> None:
    runs = workspace(world)
    everything = download(world)
    failed = download(world, {"status": RunStatus.FAILED})
    assert list(failed) == ["failed"] and failed["failed"] == everything["failed"]
    searched = download(world, {"q": "run", "sort": "experiment"})
    assert list(searched) == ["running"] and searched["running"] == everything["running"]
    assert_the_tables_numbers(runs[:1], searched)


def test_stored_cost_figures_give_the_same_file(world: World) -> None:
    runs = workspace(world)
    before = download(world)
    with time_machine.travel(NOW - timedelta(hours=1), tick=False):
        rollups.refresh_changed(NOW - timedelta(hours=1))
    # The settled runs without records of their own (done, failed) are read from the stored figure.
    stored = RunCostFigure.objects.filter(run__team=world.vision, priced_version__isnull=False)
    stored = stored.values_list("run__external_id", flat=True)
    assert set(stored) == {"done", "failed"}
    after = download(world)
    assert {k: [(c, v, after[k][c]) for c, v in row.items() if after[k][c] != v] for k, row in before.items()} == {
        k: [] for k in before
    }
    assert_the_tables_numbers(runs, before)
    # The stored copy is what the download reads for them (COPY's SQL, or the Python writer's chunks).
    RunCostFigure.objects.filter(run__external_id="done").update(usd=Decimal("12.5"))
    assert download(world)["done"]["cost_usd"] == "12.5"
