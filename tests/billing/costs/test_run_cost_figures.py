"""billing/costs/figures.py: the run list CSV's cost is the engine's, stored or not.

The rollup pass stores each settled run's figure (RunCostFigure); `RunFigures.of` must hand back
exactly what `run_costs` answers now (the runs table's cost), whether it used the stored figure
or not: after a price edit, a change to the run, an attempt running again, an egress or billed
usage record arriving, and for running runs and classic runs on a cluster (never stored).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from billing.costs import figures, rollups
from billing.engine import RunFigures, run_costs
from billing.models import AcceleratorPrice, BilledUsage, EgressRecord, RunCostFigure
from runs.choices import RunSource, RunStatus
from runs.models import Attempt, Cluster, Run
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
PASS = T0 + timedelta(days=2)
LATER = PASS + timedelta(hours=1)

pytestmark = pytest.mark.django_db


def table(runs: list[Run]) -> dict[int, tuple[Decimal, str, Decimal | None]]:
    """What the runs table shows (billing.engine.run_costs, priced now), never the stored figure."""
    answers = run_costs(Run.objects.filter(pk__in=[r.pk for r in runs]), now=LATER)
    return {
        pk: (a.estimate.usd, a.estimate.kind, a.billed_figure.usd if a.billed_figure else None)
        for pk, a in answers.items()
    }


def csv_figures(runs: list[Run]) -> dict[int, tuple[Decimal, str, Decimal | None]]:
    with time_machine.travel(LATER, tick=False):
        return RunFigures(LATER).of(r.pk for r in runs)


@pytest.fixture
def priced(world: World) -> list[Run]:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="2.50"
    )
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        runs = [
            make_run(world.vision, "a"),
            make_run(world.vision, "b", num_accelerators=16, status=RunStatus.FAILED),
            make_run(world.vision, "unpriced", region="sa-east-1"),  # no price there: a lower bound
        ]
    with time_machine.travel(PASS, tick=False):
        rollups.refresh_changed(PASS)
    return runs


def test_the_pass_stores_the_engines_figure_and_the_csv_reads_it(priced: list[Run]) -> None:
    expected = table(priced)
    # 1 h of 8 x $2.50 = $20; twice the GPUs, $40; no price in sa-east-1: $0, a lower bound.
    assert expected == {
        priced[0].pk: (Decimal("20.00"), "estimated", None),
        priced[1].pk: (Decimal("40.00"), "estimated", None),
        priced[2].pk: (Decimal("0"), "lower bound", None),
    }
    assert {f.run_id: (f.usd, f.kind) for f in RunCostFigure.objects.all()} == {
        pk: (usd, kind) for pk, (usd, kind, _) in expected.items()
    }
    assert csv_figures(priced) == expected
    # The stored copy is what the download reads: a figure tampered with shows (and only there).
    RunCostFigure.objects.filter(run=priced[0]).update(usd=Decimal("7"))
    assert csv_figures(priced)[priced[0].pk] == (Decimal("7"), "estimated", None)


def test_a_price_edit_and_a_changed_run_are_priced_anew(priced: list[Run]) -> None:
    AcceleratorPrice.objects.update(usd_per_hour="3.00")
    with time_machine.travel(PASS + timedelta(minutes=30), tick=False):
        run = priced[1]
        run.num_accelerators = 32
        run.save()
    got = csv_figures(priced)
    assert got == table(priced)
    assert got[priced[0].pk][0] == Decimal("24.00") and got[priced[1].pk][0] == Decimal("96.00")


def test_records_arriving_later_and_running_attempts_are_priced_now(world: World, priced: list[Run]) -> None:
    RunCostFigure.objects.update(usd=Decimal("999"))  # any stored figure still read would show
    EgressRecord.objects.create(
        run=priced[0], source_region="us-west-2", destination_region="us-east-1", bytes=10**12, ts=T0
    )
    BilledUsage.objects.create(
        record_id="r-1", sku_name="PREMIUM_SERVERLESS_GPU", usage_start_time=T0,
        usage_end_time=T0 + timedelta(hours=1), usage_date=T0.date(), usage_quantity=Decimal("8"),
        usage_unit="GPU_HOUR", billing_origin_product="AI_RUNTIME", job_run_id="5001", run=priced[1],
        price_per_unit=Decimal("2.40"), billed_usd=Decimal("19.20"), imported_at=T0,
    )  # fmt: skip
    Attempt.objects.filter(run=priced[2]).update(ended_at=None)
    got = csv_figures(priced)
    assert got == table(priced)
    assert got[priced[1].pk][2] == Decimal("19.20")  # the bill beside the estimate, as the table shows it
    assert all(usd != Decimal("999") for usd, _, _ in got.values())


def test_running_runs_and_classic_runs_on_a_cluster_are_never_stored(world: World, priced: list[Run]) -> None:
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-1", name="c-1", node_type_id="p4d.24xlarge", region="us-west-2",
        start_time=T0, terminated_time=T0 + timedelta(hours=3),
    )  # fmt: skip
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        classic = make_run(world.vision, "classic", source=RunSource.CLASSIC, cluster=cluster)
        running = make_run(world.vision, "running", status=RunStatus.RUNNING, ended_at=None)
    with time_machine.travel(PASS + timedelta(minutes=10), tick=False):
        rollups.refresh_changed(PASS + timedelta(minutes=10))
    assert not RunCostFigure.objects.filter(run__in=[classic, running], priced_version__isnull=False).exists()
    every = [classic, running, *priced]
    assert csv_figures(every) == table(every)


def test_backfill_stores_settled_runs_no_pass_priced(priced: list[Run]) -> None:
    RunCostFigure.objects.all().delete()
    with time_machine.travel(LATER, tick=False):
        assert figures.backfill(LATER, limit=1) == 1
        assert figures.backfill(LATER) == 2
        assert figures.backfill(LATER) == 0
    assert csv_figures(priced) == table(priced)
