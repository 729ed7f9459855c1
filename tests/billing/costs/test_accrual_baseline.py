"""The accrual baseline: what the last rollup pass stored for each running run, read back instead
of pricing every running run a second time at the pass's instant on each view.

A team's month between passes is the rollups plus (running runs now, less what the rollups hold
for them). The baseline is what the rollups hold, so the month equals the engine's figure now
even after a late correction to a running run's earlier hours, which a baseline recomputed
from today's data at the pass's time does not see in the rollups.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.costs import rollups, spend
from billing.costs.run_costs import breakdowns_for_runs
from billing.models import AcceleratorPrice, AccrualBaseline, InstancePrice, RollupState
from billing.prices.money import exact_sum
from runs.choices import RunSource, RunStatus
from runs.models import Attempt, Cluster, ClusterEvent, Run
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
PASS = T0 + timedelta(hours=3)  # the last rollup pass
NOW = T0 + timedelta(hours=5)
USD_PER_GPU_HOUR = Decimal("2.00")  # 8 GPUs: $16 an hour


@pytest.fixture
def live(world: World) -> Run:
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour=USD_PER_GPU_HOUR)  # fmt: skip
    make_run(world.vision, "done")  # T0 to T0 + 1 h: $16, finished before the pass
    run = make_run(world.vision, "live", status=RunStatus.RUNNING, ended_at=None)
    assert rollups.refresh_changed(now=PASS).claimed
    return run


def month_usd(world: World) -> Decimal:
    (month,) = spend.team_month([world.vision.pk], now=NOW)
    return month.usd


def engine_usd() -> Decimal:
    """Every run priced by the engine at NOW: what the month must say."""
    return exact_sum(b.total for b in breakdowns_for_runs(list(Run.objects.all()), now=NOW).values())


def test_the_pass_stores_what_it_rolled_up_for_running_runs_only(world: World, live: Run) -> None:
    rows = list(AccrualBaseline.objects.values_list("run_id", "day", "as_of", "compute_usd", "gpu_hours"))
    assert rows == [(live.pk, T0.date(), PASS, Decimal("48"), Decimal("24"))]  # 3 h x 8 GPUs x $2
    # The next pass replaces them: the run still runs, three more hours.
    rollups.refresh_changed(now=PASS + timedelta(hours=3))
    assert list(AccrualBaseline.objects.values_list("as_of", "compute_usd")) == [
        (PASS + timedelta(hours=3), Decimal("96"))
    ]


def test_the_month_is_the_rollups_plus_two_hours_accrued_priced_once(world: World, live: Run, monkeypatch) -> None:
    passes: list[datetime] = []

    def counted(runs, now):
        passes.append(now)
        return breakdowns_for_runs(runs, now=now)

    monkeypatch.setattr(spend, "breakdowns_for_runs", counted)
    assert month_usd(world) == Decimal("16") + Decimal("80") == engine_usd()  # done $16, live 5 h $80
    assert passes == [NOW]  # the running run priced now only; the pass's figure was read


def test_a_late_correction_to_a_running_runs_start_shows_at_once(world: World, live: Run) -> None:
    # The attempt's start, corrected after the pass: an hour earlier than first reported.
    Attempt.objects.filter(run=live).update(started_at=T0 - timedelta(hours=1))
    Run.objects.filter(pk=live.pk).update(started_at=T0 - timedelta(hours=1))
    # Rollups hold 3 h ($48); the run has run 6 h ($96) by now. A baseline recomputed at the
    # pass's time from today's data (4 h, $64) said $16 + $48 + $32 = $96 - $16 short.
    assert month_usd(world) == Decimal("16") + Decimal("96") == engine_usd()


def test_a_retry_started_after_the_pass_is_priced_against_what_the_pass_held(world: World, live: Run) -> None:
    done = Run.objects.get(external_id="done")
    Run.objects.filter(pk=done.pk).update(status=RunStatus.RUNNING, ended_at=None)
    Attempt.objects.create(run=done, number=2, status=RunStatus.RUNNING, started_at=PASS + timedelta(hours=1))
    assert not AccrualBaseline.objects.filter(run=done).exists()
    # done: its first hour ($16, in the rollups) and an hour of the retry ($16); live: $80.
    assert month_usd(world) == Decimal("112") == engine_usd()


def test_a_run_that_ended_since_the_pass_counts_to_its_end(world: World, live: Run) -> None:
    """Not accruing now, but the rollups hold it only to the pass: its last hour is added now, not
    at the next pass (the month said $64 until then)."""
    Attempt.objects.filter(run=live).update(ended_at=PASS + timedelta(hours=1), status=RunStatus.SUCCEEDED)
    Run.objects.filter(pk=live.pk).update(ended_at=PASS + timedelta(hours=1), status=RunStatus.SUCCEEDED)
    assert month_usd(world) == Decimal("16") + Decimal("64") == engine_usd()  # live: 4 h
    (other,) = spend.team_month([world.nlp.pk], now=NOW)
    assert other.usd == 0  # another team's stopped run is not its


def test_a_run_reported_after_the_pass_counts_from_its_start(world: World, live: Run) -> None:
    """The collector writes a run after the pass that started before it: the rollups hold none of
    it, so none of it is taken away (it was priced as of the pass and taken away: $32 short)."""
    make_run(world.vision, "late", status=RunStatus.RUNNING, ended_at=None, started_at=T0 + timedelta(hours=1))
    # done $16, live 5 h $80, late 4 h $64
    assert month_usd(world) == Decimal("160") == engine_usd()


def test_a_classic_run_joining_an_up_cluster_takes_nothing_from_the_others(world: World, live: Run) -> None:
    """A run on a cluster still up shares its idle time: one that joins after the pass must not
    subtract its share of the hours the rollups hold for the runs already there."""
    InstancePrice.objects.create(instance_type="p4d.24xlarge", region="", effective_from=BOOK, usd_per_hour="10.00")
    cluster = Cluster.objects.create(team=world.nlp, cluster_id="c-up", node_type_id="p4d.24xlarge",
                                     single_node=True, region="us-west-2", start_time=T0)  # fmt: skip
    ClusterEvent.objects.create(cluster=cluster, ts=T0, kind="RUNNING",
                                details={"current_num_workers": 0, "target_num_workers": 0})  # fmt: skip
    make_run(world.nlp, "first", source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
             ended_at=T0 + timedelta(minutes=30))  # fmt: skip
    assert rollups.refresh_changed(now=PASS + timedelta(minutes=30)).claimed
    make_run(world.nlp, "joined", source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
             started_at=PASS + timedelta(hours=1), ended_at=PASS + timedelta(hours=1, minutes=30))  # fmt: skip
    (month,) = spend.team_month([world.nlp.pk], now=NOW)
    assert month.usd == Decimal("50") == _engine_usd_of(world.nlp)  # the cluster up 5 h at $10


def test_a_pass_that_fails_after_its_rollups_still_dates_them(world: World, live: Run, monkeypatch) -> None:
    """The rollups, their baseline and their time are one transaction: the failed runs' backfill
    that follows failing (or still running) never pairs new rollups with the older time."""

    def broken(as_of: datetime) -> int:
        raise RuntimeError("backfill failed")

    monkeypatch.setattr(rollups.failed, "backfill", broken)
    with pytest.raises(RuntimeError):
        rollups.refresh_changed(now=PASS + timedelta(hours=1))
    assert spend.last_pass() == PASS + timedelta(hours=1)
    assert month_usd(world) == Decimal("96") == engine_usd()
    # A pass that ends after a newer one (its lease ran out, a clock behind) writes nothing.
    monkeypatch.setattr(rollups.failed, "backfill", lambda as_of: 0)
    assert not rollups.refresh_changed(now=PASS).claimed
    assert spend.last_pass() == PASS + timedelta(hours=1)
    assert month_usd(world) == Decimal("96") == engine_usd()
    assert list(AccrualBaseline.objects.values_list("as_of", flat=True)) == [PASS + timedelta(hours=1)]


def _engine_usd_of(team) -> Decimal:
    runs = list(Run.objects.filter(team=team))
    return exact_sum(b.total for b in breakdowns_for_runs(runs, now=NOW).values())


@pytest.mark.parametrize("fails", [True, False])
def test_a_pass_that_outlived_its_lease_leaves_the_new_holders_lease(
    world: World, live: Run, monkeypatch, fails: bool
) -> None:
    """Another worker takes the lease over while this pass runs long; this pass then fails or
    ends: the other's lease stays, so no third pass starts beside it, and the cursor is its to move."""
    later = PASS + timedelta(hours=1)
    taken = later + rollups.LEASE + timedelta(minutes=1)

    def overran(as_of: datetime) -> int:
        assert rollups.claim(taken) is not None  # the other worker, after this lease ran out
        if fails:
            raise RuntimeError("backfill failed")
        return 0

    monkeypatch.setattr(rollups.failed, "backfill", overran)
    cursor = RollupState.objects.get().cursor
    if fails:
        with pytest.raises(RuntimeError):
            rollups.refresh_changed(now=later)
    else:
        rollups.refresh_changed(now=later)
    state = RollupState.objects.get()
    assert state.lease_until == taken + rollups.LEASE and state.cursor == cursor
    assert rollups.claim(taken + timedelta(minutes=1)) is None  # still held
