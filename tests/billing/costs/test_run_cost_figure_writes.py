"""Every write a stored run cost figure rests on puts it out of date, whoever writes (issue 35).

The run list's CSV reads a settled run's stored figure (`RunCostFigure`) without testing, per
row, what it rests on: the database bumps the figure's version on each such write
(billing.costs.figure_triggers). Each test here has the rollup pass store the figures of two
runs, then makes one write through the code that makes it in production (the collectors' and
the push API's `upsert_run`, a bulk `update()`, reported egress, a usage import and the
reconcile's later linking, a price edit...) to run "a", and downloads the run list: "a" shows
what the engine answers now, and "b", untouched, still shows its stored figure (tampered with
beforehand, so a stored figure read anywhere shows). COPY writes the file on PostgreSQL, the
Python writer on SQLite.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.management.sql import emit_post_migrate_signal
from django.db import connection
from django.urls import reverse

from billing.costs import figure_triggers, figures, rollups
from billing.costs.egress import EgressRow, store_reported
from billing.costs.run_costs import breakdowns_for_runs
from billing.engine import run_costs
from billing.models import AcceleratorPrice, EgressRecord, RunCostFigure
from billing.reconcile import importing, linking
from dashboard.kit.csv_export import cell
from runs.choices import RunOrigin, RunSource, RunStatus
from runs.ingest import upsert_run
from runs.models import Attempt, Cluster, Run
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
PASS = T0 + timedelta(days=2)
LATER = PASS + timedelta(hours=1)
TAMPERED = Decimal("999")
USAGE_HEADER = (
    "record_id,usage_start_time,usage_end_time,usage_date,sku_name,usage_quantity,usage_unit,usage_metadata,custom_tags"
)
PRICES = (
    "sku_name,price_start_time,price_end_time,currency_code,usage_unit,pricing\n"
    'SERVERLESS_GPU,2026-01-01T00:00:00Z,,USD,DBU,"{""default"": ""0.70""}"\n'
)

pytestmark = pytest.mark.django_db


def price_pass() -> None:
    with time_machine.travel(PASS, tick=False):
        rollups.refresh_changed(PASS)


@pytest.fixture
def runs(world: World) -> dict[str, Run]:
    """Runs "a" and "b" (8 x H100 for an hour at $2.50: $20 each), their figures stored and tampered with."""
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="2.50"
    )
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        found = {name: make_run(world.vision, name) for name in ("a", "b")}
    price_pass()
    assert set(figures.stored_figures(r.pk for r in found.values())) == {r.pk for r in found.values()}
    RunCostFigure.objects.update(usd=TAMPERED)
    return found


def download(world: World) -> dict[str, tuple[str, str, str]]:
    """(cost_usd, cost_kind, billed_usd) per run of the run list's CSV, downloaded at LATER."""
    with time_machine.travel(LATER, tick=False):
        response = world.client_for(world.alice).get(reverse("run_list"), {"format": "csv"})
        body = b"".join(response.streaming_content).decode()
    rows = csv.DictReader(io.StringIO(body, newline=""))
    return {row["external_id"]: (row["cost_usd"], row["cost_kind"], row["billed_usd"]) for row in rows}


def engine(run: Run) -> tuple[str, str, str]:
    """What the runs table shows for `run` at LATER (billing.engine.run_costs), as the CSV writes it."""
    answer = run_costs(Run.objects.filter(pk=run.pk), now=LATER)[run.pk]
    billed = answer.billed_figure
    return str(cell(answer.estimate.usd)), answer.estimate.kind, str(cell(billed.usd if billed else None))


def assert_priced_anew(world: World, runs: dict[str, Run]) -> tuple[str, str, str]:
    """ "a" is no longer read from its stored figure, "b" still is; returns "a"'s row."""
    assert set(figures.stored_figures([runs["a"].pk, runs["b"].pk])) == {runs["b"].pk}
    rows = download(world)
    assert rows["a"] == engine(runs["a"])
    assert rows["b"] == (str(cell(TAMPERED)), "estimated", "")
    return rows["a"]


# --- The run's attempts --------------------------------------------------------------------------


def test_the_collector_moving_an_attempts_end(world: World, runs: dict[str, Run]) -> None:
    moved = {"number": 1, "ended_at": T0 + timedelta(hours=2)}
    data = {"source": RunSource.SERVERLESS, "external_id": "a", "attempts": [moved]}
    upsert_run(world.vision, data, origin=RunOrigin.COLLECTOR)
    assert assert_priced_anew(world, runs)[:2] == ("40", "estimated")


def test_the_collector_adding_a_retry(world: World, runs: dict[str, Run]) -> None:
    retry = {"number": 2, "started_at": T0 + timedelta(hours=2), "ended_at": T0 + timedelta(hours=2, minutes=30)}
    upsert_run(
        world.vision, {"source": RunSource.SERVERLESS, "external_id": "a", "attempts": [retry]}, RunOrigin.COLLECTOR
    )
    assert assert_priced_anew(world, runs)[:2] == ("30", "estimated")


def test_an_attempt_running_again_by_a_bulk_update(world: World, runs: dict[str, Run]) -> None:
    Attempt.objects.filter(run=runs["a"]).update(ended_at=None)  # no save, no run written
    usd, _, _ = assert_priced_anew(world, runs)
    assert Decimal(usd) > 20 * 24  # accrues up to LATER, two days on


def test_attempts_removed(world: World, runs: dict[str, Run]) -> None:
    Attempt.objects.filter(run=runs["a"]).delete()
    assert assert_priced_anew(world, runs)[0] == "0"


# --- The run's own row ---------------------------------------------------------------------------


def test_a_run_changed_by_a_bulk_update_that_stamps_nothing(world: World, runs: dict[str, Run]) -> None:
    before = Run.objects.get(pk=runs["a"].pk).updated_at
    Run.objects.filter(pk=runs["a"].pk).update(num_accelerators=16)
    assert Run.objects.get(pk=runs["a"].pk).updated_at == before
    assert assert_priced_anew(world, runs)[0] == "40"


def test_a_run_moved_onto_a_shared_cluster(world: World, runs: dict[str, Run]) -> None:
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-1", name="c-1", node_type_id="p4d.24xlarge", region="us-west-2",
        start_time=T0, terminated_time=T0 + timedelta(hours=3),
    )  # fmt: skip
    with time_machine.travel(PASS + timedelta(minutes=5), tick=False):
        make_run(world.vision, "classic", source=RunSource.CLASSIC, cluster=cluster)
    Run.objects.filter(pk=runs["a"].pk).update(source=RunSource.CLASSIC, cluster=cluster)
    assert_priced_anew(world, runs)


def test_saves_that_change_nothing_keep_the_figure(world: World, runs: dict[str, Run]) -> None:
    """A collector sending a settled run again as it was (a save, the attempts rewritten as they were)."""
    with time_machine.travel(LATER, tick=False):
        data = {"source": RunSource.SERVERLESS, "external_id": "a", "status": RunStatus.SUCCEEDED,
                "attempts": [{"number": 1, "started_at": T0, "ended_at": T0 + timedelta(hours=1)}]}  # fmt: skip
        upsert_run(world.vision, data, origin=RunOrigin.COLLECTOR)
    assert Run.objects.get(pk=runs["a"].pk).updated_at == LATER
    assert set(figures.stored_figures([runs["a"].pk, runs["b"].pk])) == {runs["a"].pk, runs["b"].pk}
    assert download(world)["a"][0] == str(cell(TAMPERED))


# --- Records of the run's own ------------------------------------------------------------------


def test_reported_egress(world: World, runs: dict[str, Run]) -> None:
    store_reported([EgressRow(runs["a"].pk, "us-west-2", "us-east-1", 10**12, T0 + timedelta(minutes=10))])
    assert_priced_anew(world, runs)


def test_egress_records_removed(world: World, runs: dict[str, Run]) -> None:
    """A run with egress is never stored; its records' removal is a write all the same (the
    derivation replaces its records so): a pass pricing the run then stores a stale figure."""
    record = EgressRecord.objects.create(
        run=runs["a"], source_region="us-west-2", destination_region="us-east-1", bytes=10**12, ts=T0
    )
    seen = figures.versions([runs["a"].pk])
    record.delete()
    assert figures.versions([runs["a"].pk])[runs["a"].pk] > seen[runs["a"].pk]


def usage_line(record_id: str, job_run_id: str, quantity: str) -> str:
    """A `system.billing.usage` row as tests/billing/reconcile/test_billed_everywhere.py writes them."""
    metadata = json.dumps({"job_run_id": job_run_id, "cluster_id": None}).replace('"', '""')
    start, end = T0, T0 + timedelta(hours=1)
    return (
        f"{record_id},{start:%Y-%m-%dT%H:%M:%SZ},{end:%Y-%m-%dT%H:%M:%SZ},{start:%Y-%m-%d},SERVERLESS_GPU,"
        f'{quantity},DBU,"{metadata}","{{}}"'
    )


def import_usage(*lines: str) -> importing.ImportResult:
    usage = io.StringIO("\n".join([USAGE_HEADER, *lines]) + "\n", newline="")
    return importing.import_usage(usage, io.StringIO(PRICES, newline=""))


def test_a_usage_import_linking_a_record(world: World, runs: dict[str, Run]) -> None:
    assert import_usage(usage_line("u1", "a", "10")).linked == 1
    assert assert_priced_anew(world, runs)[2] == "7"  # 10 DBU at $0.70, beside the estimate


def test_a_record_linked_when_its_run_arrives(world: World, runs: dict[str, Run]) -> None:
    RunCostFigure.objects.all().delete()
    Run.objects.filter(pk=runs["a"].pk).update(external_id="later")
    assert import_usage(usage_line("u1", "a", "10")).linked == 0  # no run "a" yet
    Run.objects.filter(pk=runs["a"].pk).update(external_id="a")
    price_pass()  # the record is not linked yet: "a" is stored
    RunCostFigure.objects.update(usd=TAMPERED)
    assert linking.refresh_links_and_prices() == (1, 0)  # the next import's (or beat's) linking
    assert assert_priced_anew(world, runs)[2] == "7"


# --- Prices, and a write racing the pass --------------------------------------------------------


def test_a_price_edit(world: World, runs: dict[str, Run]) -> None:
    AcceleratorPrice.objects.update(usd_per_hour="3.00")
    assert set(figures.stored_figures([runs["a"].pk, runs["b"].pk])) == set()
    rows = download(world)
    assert rows["a"] == engine(runs["a"]) == ("24", "estimated", "")


@pytest.mark.parametrize("had_row", [True, False])
def test_a_write_between_reading_and_storing(world: World, runs: dict[str, Run], had_row: bool) -> None:
    """The pass reads the versions, then prices; a write committed in between (here: after the
    pricing, before the store) leaves what it stores out of date, whether or not the run had a row."""
    if not had_row:
        RunCostFigure.objects.filter(run=runs["a"]).delete()
    seen = figures.versions([runs["a"].pk])
    breakdowns = breakdowns_for_runs(Run.objects.filter(pk=runs["a"].pk), now=PASS)
    Attempt.objects.filter(run=runs["a"]).update(ended_at=T0 + timedelta(hours=3))
    assert figures.cache(breakdowns, PASS, seen) == 1
    assert assert_priced_anew(world, runs)[0] == "60"
    # The next pass stores the new figure.
    figures.backfill(LATER)
    assert figures.stored_figures([runs["a"].pk])[runs["a"].pk] == (Decimal("60"), "estimated")


def test_a_run_deleted_takes_its_figure_with_it(world: World, runs: dict[str, Run]) -> None:
    runs["a"].delete()  # its attempts go first, bumping a figure whose run then goes
    assert list(RunCostFigure.objects.values_list("run__external_id", flat=True)) == ["b"]


# --- The triggers themselves ----------------------------------------------------------------------


def test_migrate_makes_the_triggers_again_where_missing(db: None) -> None:
    """Every trigger is installed; `migrate`'s post_migrate makes one again that a migration dropped
    (SQLite drops a table's triggers when it rebuilds the table to alter a column)."""
    names = {name for _, name in figure_triggers.trigger_names()}
    assert len(names) == 12 and figure_triggers.installed(connection) == names
    figure_triggers.uninstall(connection)
    assert figure_triggers.installed(connection) == set()
    emit_post_migrate_signal(verbosity=0, interactive=False, db=connection.alias)
    assert figure_triggers.installed(connection) == names
