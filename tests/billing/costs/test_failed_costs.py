"""billing/costs/failed.py: the failures overview's failed-attempt cost is the engine's, stored or not.

The rollup pass stores each failed run's figure (FailedRunCost); `failed_attempts_cost` must
hand back exactly what the cost engine prices now, whether it used the stored figure or not:
after a price edit, a change to the run, an attempt still running, and for classic runs on a
cluster (never stored).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from billing.costs import failed, rollups
from billing.models import AcceleratorPrice, FailedRunCost
from runs.choices import RunSource, RunStatus
from runs.failures import stats
from runs.models import Attempt, Cluster, FailureAnalysis, Run
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
# Two days after the runs: they are settled when the pass prices them.
PASS = T0 + timedelta(days=2)

pytestmark = pytest.mark.django_db


def failed_run(world: World, name: str, **fields: object) -> Run:
    """A run that failed on attempt 1 (2 h) and timed out on attempt 2 (30 min)."""
    run = make_run(world.vision, name, status=RunStatus.FAILED, ended_at=T0 + timedelta(hours=2), **fields)
    Attempt.objects.filter(run=run).update(status=RunStatus.FAILED)
    Attempt.objects.create(
        run=run, number=2, status=RunStatus.TIMED_OUT, started_at=T0 + timedelta(hours=1, minutes=30),
        ended_at=T0 + timedelta(hours=2),
    )  # fmt: skip
    return run


def engine(runs: list[Run]) -> dict[int, Decimal]:
    """What the cost engine prices now, never the stored figure."""
    return failed.price(Run.objects.filter(pk__in=[r.pk for r in runs]), now=PASS + timedelta(hours=1))


def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("priced by the engine")

    monkeypatch.setattr(failed, "breakdowns_for_runs", refuse)


@pytest.fixture
def priced(world: World) -> list[Run]:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="2.50"
    )
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        runs = [failed_run(world, "a"), failed_run(world, "b", num_accelerators=16)]
        make_run(world.vision, "ok")  # succeeded: nothing to store
    with time_machine.travel(PASS, tick=False):
        rollups.refresh_changed(PASS)
    return runs


def test_the_pass_stores_the_engines_figure_and_it_is_used(priced: list[Run], monkeypatch) -> None:
    expected = engine(priced)
    # 2 h + 30 min of 8 x $2.50 = $50; twice the GPUs, $100.
    assert expected == {priced[0].pk: Decimal("50.00"), priced[1].pk: Decimal("100.00")}
    assert {r.run_id: r.compute for r in FailedRunCost.objects.all()} == expected
    no_engine(monkeypatch)
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        assert failed.failed_attempts_cost([r.pk for r in priced]) == expected


def test_a_price_edit_is_priced_anew(priced: list[Run], monkeypatch) -> None:
    # Edited in place, with no PriceChange written: the digest of the price book still differs.
    AcceleratorPrice.objects.update(usd_per_hour="3.00")
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        got = failed.failed_attempts_cost([r.pk for r in priced])
    assert got == engine(priced) == {priced[0].pk: Decimal("60.00"), priced[1].pk: Decimal("120.00")}
    # The next pass stores the new figures (the edit wrote no PriceChange: the backfill finds them).
    with time_machine.travel(PASS + timedelta(hours=2), tick=False):
        rollups.refresh_changed(PASS + timedelta(hours=2))
    no_engine(monkeypatch)
    with time_machine.travel(PASS + timedelta(hours=3), tick=False):
        assert failed.failed_attempts_cost([r.pk for r in priced]) == {
            priced[0].pk: Decimal("60.00"),
            priced[1].pk: Decimal("120.00"),
        }


def test_a_changed_run_is_priced_anew(priced: list[Run]) -> None:
    run = priced[0]
    with time_machine.travel(PASS + timedelta(minutes=30), tick=False):
        Attempt.objects.filter(run=run, number=2).update(ended_at=T0 + timedelta(hours=3))
        run.num_accelerators = 16
        run.save()  # updated_at after the pass: the stored $50 no longer holds
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        got = failed.failed_attempts_cost([r.pk for r in priced])
    assert got == engine(priced)
    assert got[run.pk] == Decimal("140.00")  # (2 h + 1.5 h) x 16 x $2.50


def test_an_attempt_still_running_is_priced_to_now(priced: list[Run]) -> None:
    Attempt.objects.filter(run=priced[0], number=2).update(ended_at=None)
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        got = failed.failed_attempts_cost([r.pk for r in priced])
        assert got == failed.price(priced)
    assert got[priced[0].pk] > Decimal("50.00")


def test_classic_runs_on_a_cluster_are_never_stored(world: World, priced: list[Run]) -> None:
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-1", name="c-1", node_type_id="p4d.24xlarge", region="us-west-2",
        start_time=T0, terminated_time=T0 + timedelta(hours=3),
    )  # fmt: skip
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        classic = failed_run(world, "classic", source=RunSource.CLASSIC, cluster=cluster)
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        rollups.refresh_changed(PASS + timedelta(hours=1))
    assert not FailedRunCost.objects.filter(run=classic).exists()
    with time_machine.travel(PASS + timedelta(hours=2), tick=False):
        assert failed.failed_attempts_cost([classic.pk, *(r.pk for r in priced)]) == engine([classic, *priced])


def test_backfill_stores_failed_runs_no_pass_priced(world: World, priced: list[Run]) -> None:
    FailedRunCost.objects.all().delete()
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        assert failed.backfill(PASS + timedelta(hours=1), limit=1) == 1
        assert failed.backfill(PASS + timedelta(hours=1)) == 1
        assert failed.backfill(PASS + timedelta(hours=1)) == 0
    assert {r.run_id: r.compute for r in FailedRunCost.objects.all()} == engine(priced)


def test_overview_total_is_the_engines(world: World, priced: list[Run]) -> None:
    """The failures overview, scoped to the user's teams, totals the engine's figures."""
    theirs = failed_run_of(world, "theirs")
    for run in [*priced, theirs]:
        FailureAnalysis.objects.create(run=run, class_id="cuda_oom", title="CUDA out of memory", failed_at=run.ended_at)
    with time_machine.travel(PASS + timedelta(hours=1), tick=False):
        result = stats.failure_stats(stats.failures_for(world.alice))
    assert result.total_failures == 2  # not the other team's
    assert result.total_cost == sum(engine(priced).values()) == Decimal("150.00")


def failed_run_of(world: World, name: str) -> Run:
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        return make_run(world.nlp, name, status=RunStatus.FAILED)
