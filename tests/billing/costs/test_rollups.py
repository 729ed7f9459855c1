"""CostDaily rollups: exact sums, only touched days rebuilt, one writer at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.costs import rollups
from billing.costs.serverless import estimate_costs_for_runs
from billing.models import (
    AcceleratorPrice,
    CostDaily,
    CostDailyTeam,
    EgressPrice,
    EgressRecord,
    PriceChange,
    RollupState,
    RunCostSpan,
)
from billing.prices.money import exact_sum
from billing.tasks import roll_up_costs
from runs import ingest
from runs.choices import RunOrigin
from runs.models import Attempt, Run
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)


def _price(usd: str = "2.00", region: str = "us-west-2", at: datetime = BOOK) -> AcceleratorPrice:
    return AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region=region, effective_from=at, usd_per_hour=usd
    )


def test_recompute_splits_at_midnight_and_sums_exactly(world: World) -> None:
    _price()
    make_run(world.vision, started_at=T0.replace(hour=23), ended_at=T0.replace(hour=23) + timedelta(hours=2))
    rollups.recompute_days([T0.date(), T0.date() + timedelta(days=1)], now=T0 + timedelta(days=2))
    rows = {r.day: r for r in CostDaily.objects.all()}
    assert rows[T0.date()].compute_usd == Decimal("16")  # 1 h x 8 GPUs x $2
    assert rows[T0.date() + timedelta(days=1)].compute_usd == Decimal("16")
    assert rows[T0.date()].runs == 1 and rows[T0.date()].experiment_name == "/Workspace/Users/alice/llama-ft"


def test_recompute_touches_only_the_given_days(world: World) -> None:
    _price()
    make_run(world.vision, "a", started_at=T0, ended_at=T0 + timedelta(hours=1))
    make_run(world.vision, "b", started_at=T0 + timedelta(days=3), ended_at=T0 + timedelta(days=3, hours=1))
    rollups.recompute_days([T0.date(), T0.date() + timedelta(days=3)], now=T0 + timedelta(days=5))
    untouched = CostDaily.objects.get(day=T0.date())
    # A sentinel: if day 1 were rebuilt, this value (and the row id) would change.
    CostDaily.objects.filter(pk=untouched.pk).update(runs=99)
    Run.objects.filter(external_id="b").update(num_accelerators=16)
    rollups.recompute_days([T0.date() + timedelta(days=3)], now=T0 + timedelta(days=5))
    same = CostDaily.objects.get(day=T0.date())
    assert (same.pk, same.runs) == (untouched.pk, 99)
    assert CostDaily.objects.get(day=T0.date() + timedelta(days=3)).compute_usd == Decimal("32")


def test_refresh_changed_recomputes_only_days_of_changed_runs(world: World) -> None:
    _price()
    with time_machine.travel(T0 + timedelta(days=5), tick=False):
        make_run(world.vision, "old", started_at=T0, ended_at=T0 + timedelta(hours=1))
        assert rollups.refresh_changed().days == 1
    with time_machine.travel(T0 + timedelta(days=5, minutes=5), tick=False):
        rollups.refresh_changed()  # moves the cursor past the overlap that re-reads "old"
    old_row = CostDaily.objects.get(day=T0.date())
    with time_machine.travel(T0 + timedelta(days=5, minutes=10), tick=False):
        make_run(world.vision, "new", started_at=T0 + timedelta(days=4), ended_at=T0 + timedelta(days=4, hours=1))
        result = rollups.refresh_changed()
    assert (result.claimed, result.runs, result.days) == (True, 1, 1)
    assert CostDaily.objects.get(day=T0.date()).pk == old_row.pk
    assert CostDaily.objects.filter(day=T0.date() + timedelta(days=4)).count() == 1


def test_running_runs_accrue_to_now_on_every_pass(world: World) -> None:
    _price()
    run = make_run(world.vision, ended_at=None)
    Attempt.objects.filter(run=run).update(ended_at=None)
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        rollups.refresh_changed()
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        result = rollups.refresh_changed()
    assert result.runs == 1
    assert CostDaily.objects.get().compute_usd == Decimal("32")


def test_price_edit_recomputes_rolled_up_days(world: World) -> None:
    price = _price()
    with time_machine.travel(T0 + timedelta(days=1), tick=False):
        make_run(world.vision)
        rollups.refresh_changed()
    with time_machine.travel(T0 + timedelta(days=1, hours=1), tick=False):
        AcceleratorPrice.objects.filter(pk=price.pk).update(usd_per_hour="3.00")
        PriceChange.objects.create(
            model="AcceleratorPrice", object_id=price.pk, field="usd_per_hour", old="2", new="3",
            at=T0 + timedelta(days=1, hours=1),
        )  # fmt: skip
    with time_machine.travel(T0 + timedelta(days=1, hours=2), tick=False):
        rollups.refresh_changed()
    assert CostDaily.objects.get().compute_usd == Decimal("24")


def test_two_concurrent_passes_write_once(world: World) -> None:
    _price()
    make_run(world.vision)
    now = T0 + timedelta(days=1)
    first = rollups.claim(now)
    assert first is not None
    # A second beat while the first holds the lease: skipped, nothing written.
    assert rollups.claim(now) is None
    assert rollups.refresh_changed(now=now) == rollups.RefreshResult(claimed=False)
    assert CostDaily.objects.count() == 0
    RollupState.objects.update(lease_until=None)
    with time_machine.travel(now, tick=False):
        assert roll_up_costs()["claimed"] is True
        assert roll_up_costs()["claimed"] is True  # lease released after each pass
    assert CostDaily.objects.count() == 1


def test_expired_lease_can_be_taken_over(world: World) -> None:
    now = T0
    assert rollups.claim(now) is not None
    assert rollups.claim(now + rollups.LEASE) is not None


def test_double_insert_is_refused_by_the_constraint(world: World) -> None:
    from django.db import IntegrityError, transaction

    CostDaily.objects.create(day=T0.date(), team=world.vision)
    with pytest.raises(IntegrityError), transaction.atomic():
        CostDaily.objects.create(day=T0.date(), team=world.vision)


REGIONS = ["us-west-2", "us-east-1"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runs=st.lists(
        st.tuples(
            st.sampled_from(REGIONS),
            st.integers(1, 16),
            st.lists(
                st.tuples(st.integers(0, 5 * 24 * 3600 * 1000), st.integers(1, 3 * 24 * 3600 * 1000)),
                min_size=1,
                max_size=3,
            ),
            st.integers(0, 5 * 10**9),
        ),
        min_size=1,
        max_size=6,
    ),
    prices=st.lists(st.decimals(min_value="0.000001", max_value="99.999999", places=6), min_size=1, max_size=3),
)
def test_rollup_always_sums_to_per_run_costs(world: World, runs: list, prices: list) -> None:
    """Whatever the runs, attempts, prices and regions, sum(CostDaily) == sum(run totals), exactly."""
    Run.objects.all().delete()
    CostDaily.objects.all().delete()
    CostDailyTeam.objects.all().delete()
    AcceleratorPrice.objects.all().delete()
    EgressPrice.objects.all().delete()
    for i, usd in enumerate(prices):
        for region in REGIONS:
            _price(str(usd), region=region, at=T0 + timedelta(hours=7 * i) if i else BOOK)
    EgressPrice.objects.create(
        source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK, usd_per_gb=prices[0]
    )
    now = T0 + timedelta(days=9)
    for n, (region, gpus, attempts, num_bytes) in enumerate(runs):
        run = make_run(world.vision, f"r{n}", region=region, num_accelerators=gpus, creator=f"u{n % 2}")
        Attempt.objects.filter(run=run).delete()
        for number, (offset_ms, length_ms) in enumerate(attempts, start=1):
            start = T0 + timedelta(milliseconds=offset_ms)
            Attempt.objects.create(
                run=run, number=number, started_at=start, ended_at=start + timedelta(milliseconds=length_ms)
            )
        if num_bytes:
            EgressRecord.objects.create(
                run=run, source_region="us-west-2", destination_region="us-east-1", bytes=num_bytes,
                ts=T0 + timedelta(hours=n * 13),
            )  # fmt: skip
    all_runs = list(Run.objects.all())
    days = rollups.touched_days([r.pk for r in all_runs], now)
    rollups.recompute_days(days, now=now)
    expected = estimate_costs_for_runs(all_runs, now=now)
    got = rollups.totals(CostDaily.objects.all())
    assert exact_sum([got["compute_usd"], got["egress_usd"]]) == exact_sum(c.total for c in expected.values())
    assert got["gpu_hours"] == exact_sum(c.gpu_hours for c in expected.values())
    _assert_summary_matches()


def _assert_summary_matches() -> None:
    """CostDailyTeam holds exactly the CostDaily rows summed per (day, team), no more, no less."""
    expected: dict[tuple, list[CostDaily]] = {}
    for row in CostDaily.objects.all():
        expected.setdefault((row.day, row.team_id), []).append(row)
    summary = {(r.day, r.team_id): r for r in CostDailyTeam.objects.all()}
    assert set(summary) == set(expected)
    for key, rows in expected.items():
        sums = rollups.totals(rows)
        assert {name: getattr(summary[key], name) for name in sums} == sums
        assert summary[key].runs == sum(r.runs for r in rows)


def test_team_summary_follows_every_recompute(world: World) -> None:
    _price()
    make_run(world.vision, "a", started_at=T0.replace(hour=22), ended_at=T0.replace(hour=22) + timedelta(hours=4))
    make_run(world.vision, "b", experiment_name="/Workspace/other", started_at=T0, ended_at=T0 + timedelta(hours=1))
    make_run(world.nlp, "c", started_at=T0, ended_at=T0 + timedelta(hours=3))
    rollups.recompute_days([T0.date(), T0.date() + timedelta(days=1)], now=T0 + timedelta(days=2))
    _assert_summary_matches()
    day0 = CostDailyTeam.objects.get(day=T0.date(), team=world.vision)
    assert (day0.compute_usd, day0.runs) == (Decimal("48"), 2)  # 2 h + 1 h, x 8 GPUs x $2
    # A run removed: the next recompute of its day leaves no trace of it in either table.
    Run.objects.filter(external_id="c").delete()
    rollups.recompute_days([T0.date()], now=T0 + timedelta(days=2))
    assert not CostDailyTeam.objects.filter(team=world.nlp).exists()
    _assert_summary_matches()


def test_attempt_moved_to_another_day_leaves_its_old_day(world: World) -> None:
    """A source corrects an attempt's times: the day it no longer covers is rebuilt too."""
    _price()
    with time_machine.travel(T0 + timedelta(days=5), tick=False):
        make_run(world.vision, "moved", started_at=T0, ended_at=T0 + timedelta(hours=1))
        rollups.refresh_changed()
    assert CostDaily.objects.get().day == T0.date()
    assert RunCostSpan.objects.get().first_day == T0.date()
    with time_machine.travel(T0 + timedelta(days=5, minutes=10), tick=False):
        later = T0 + timedelta(days=2)
        ingest.upsert_run(
            world.vision,
            {"source": "serverless", "external_id": "moved",
             "attempts": [{"number": 1, "started_at": later, "ended_at": later + timedelta(hours=1)}]},
            origin=RunOrigin.COLLECTOR,  # the run source corrects its own run
        )  # fmt: skip
        result = rollups.refresh_changed()
    assert result.days == 2  # the new day and the old one
    assert [(r.day, r.compute_usd) for r in CostDaily.objects.all()] == [(later.date(), Decimal("16"))]
    assert list(CostDailyTeam.objects.values_list("day", flat=True)) == [later.date()]
    span = RunCostSpan.objects.get()
    assert (span.first_day, span.last_day) == (later.date(), later.date())


def test_run_that_lost_its_attempts_leaves_its_days_and_span(world: World) -> None:
    _price()
    with time_machine.travel(T0 + timedelta(days=5), tick=False):
        run = make_run(world.vision, "gone")
        rollups.refresh_changed()
    assert CostDaily.objects.count() == 1
    with time_machine.travel(T0 + timedelta(days=5, minutes=10), tick=False):
        Attempt.objects.filter(run=run).delete()
        run.save()  # the source's update of the run itself
        rollups.refresh_changed()
    assert CostDaily.objects.count() == 0 and CostDailyTeam.objects.count() == 0
    assert not RunCostSpan.objects.exists()
