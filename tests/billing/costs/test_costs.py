"""The cost engine: hand-computed costs in exact Decimals, query counts, and a split property.

Prices here are made up for easy arithmetic ($4.00 per GPU-hour, then $3.00), not the default
book: a test that reads real prices breaks whenever the book is corrected.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st
from pytest_django import DjangoAssertNumQueries

from billing.costs import rollups
from billing.costs.serverless import CostLine, compute_cost, estimate_costs_for_runs, estimate_run_cost
from billing.costs.spend import team_month
from billing.models import AcceleratorPrice, EgressPrice, EgressRecord
from billing.prices.money import HOURS_QUANTUM, PricePeriod, billed_hours, egress_cost, split_billed_hours
from runs.choices import AcceleratorType, RunStatus
from runs.models import Attempt, Run
from tests.conftest import T0, World, make_run

BOOK_START = datetime(2026, 1, 1, tzinfo=UTC)
GB = 10**9


def h(minutes: int) -> timedelta:
    return timedelta(minutes=minutes)


@pytest.fixture
def h100_prices(db: None) -> None:
    """8xH100 in us-west-2: $4.00/GPU-h from the book's start, $3.00 from T0 + 30 min."""
    AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=BOOK_START, usd_per_hour="4.00"
    )
    AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=T0 + h(30), usd_per_hour="3.00"
    )


@pytest.fixture
def flat_prices(db: None) -> None:
    """$4.00/GPU-h for 8xH100 in us-west-2 and us-east-1, no changes."""
    for region in ("us-west-2", "us-east-1"):
        AcceleratorPrice.objects.create(
            accelerator_type=AcceleratorType.H100_8, region=region, effective_from=BOOK_START, usd_per_hour="4.00"
        )


# --- Pure functions ---------------------------------------------------------------------


def test_split_cuts_at_price_change_and_midnight() -> None:
    start = datetime(2026, 11, 2, 22, 0, tzinfo=UTC)
    end = datetime(2026, 11, 3, 1, 30, tzinfo=UTC)
    change = datetime(2026, 11, 2, 23, 15, tzinfo=UTC)

    segments = split_billed_hours(start, end, [change, BOOK_START])

    assert [(s.start, s.end, s.day, s.hours) for s in segments] == [
        (start, change, date(2026, 11, 2), Decimal("1.25")),
        (change, datetime(2026, 11, 3, tzinfo=UTC), date(2026, 11, 2), Decimal("0.75")),
        (datetime(2026, 11, 3, tzinfo=UTC), end, date(2026, 11, 3), Decimal("1.5")),
    ]


def test_split_of_empty_or_reversed_interval_is_empty() -> None:
    assert split_billed_hours(T0, T0, []) == []
    assert split_billed_hours(T0, T0 - h(5), []) == []


def test_split_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        split_billed_hours(datetime(2026, 11, 2, 9), T0, [])


def test_split_ending_at_midnight_belongs_to_the_day_before() -> None:
    midnight = datetime(2026, 11, 3, tzinfo=UTC)
    segments = split_billed_hours(midnight - h(60), midnight, [midnight])
    assert [(s.day, s.hours) for s in segments] == [(date(2026, 11, 2), Decimal(1))]


def test_hours_are_rounded_to_the_quantum_and_add_up() -> None:
    # 20 minutes is 1/3 h: the one inexact step. Three 20-minute pieces still sum to 1 h.
    changes = [T0 + h(20), T0 + h(40)]
    segments = split_billed_hours(T0, T0 + h(60), changes)
    assert [s.hours for s in segments] == [Decimal("0.333333333"), Decimal("0.333333334"), Decimal("0.333333333")]
    assert sum(s.hours for s in segments) == Decimal(1)


def test_compute_cost_uses_the_price_in_force_at_each_segment() -> None:
    prices = [PricePeriod(T0 + h(30), Decimal("3.00")), PricePeriod(BOOK_START, Decimal("4.00"))]

    lines = compute_cost(T0, T0 + h(60), 8, prices)

    assert [(line.usd_per_hour, line.accelerator_hours, line.usd) for line in lines] == [
        (Decimal("4.00"), Decimal(4), Decimal("16.00")),
        (Decimal("3.00"), Decimal(4), Decimal("12.00")),
    ]


def test_compute_cost_before_any_price_is_flagged_not_silently_zero() -> None:
    lines = compute_cost(T0, T0 + h(60), 8, [PricePeriod(T0 + h(45), Decimal("4"))])

    assert lines == [
        CostLine(T0, T0 + h(45), T0.date(), Decimal("0.75"), Decimal(6), None, Decimal(0), unpriced=True),
        CostLine(T0 + h(45), T0 + h(60), T0.date(), Decimal("0.25"), Decimal(2), Decimal(4), Decimal(8), False),
    ]


def test_compute_cost_refuses_two_prices_starting_together() -> None:
    prices = [PricePeriod(BOOK_START, Decimal(1)), PricePeriod(BOOK_START, Decimal(2))]
    with pytest.raises(ValueError, match="ambiguous"):
        compute_cost(T0, T0 + h(60), 1, prices)


def test_egress_cost_uses_decimal_gigabytes_exactly() -> None:
    assert egress_cost(1_500_000_000, Decimal("0.09")) == Decimal("0.135")
    # One GiB is 1.073741824 GB, priced to the last digit, no rounding.
    assert egress_cost(2**30, Decimal("0.09")) == Decimal("0.09663676416")
    assert egress_cost(0, Decimal("0.09")) == 0
    with pytest.raises(ValueError):
        egress_cost(-1, Decimal("0.09"))


# Times across a few days around the 2026 month ends, at microsecond resolution.
_instants = st.datetimes(min_value=datetime(2026, 10, 30), max_value=datetime(2026, 11, 3), timezones=st.just(UTC))


@given(
    start=_instants,
    length=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    changes=st.lists(_instants, max_size=6),
)
def test_split_never_loses_or_adds_time(start: datetime, length: timedelta, changes: list[datetime]) -> None:
    end = start + length
    segments = split_billed_hours(start, end, changes)

    assert sum((s.hours for s in segments), Decimal(0)) == billed_hours(start, end)
    if length:
        assert segments[0].start == start and segments[-1].end == end
    for before, after in pairwise(segments):
        assert before.end == after.start
    for s in segments:
        assert s.start < s.end
        assert s.day == s.start.date()
        exact = Decimal((s.end - s.start) // timedelta(microseconds=1)) / 3_600_000_000
        assert abs(s.hours - exact) <= HOURS_QUANTUM
        # No midnight and no price change strictly inside a segment.
        next_midnight = datetime.combine(s.day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
        assert s.end <= next_midnight
        assert not any(s.start < c < s.end for c in changes)


# --- One run ----------------------------------------------------------------------------


def test_run_across_a_price_change(world: World, h100_prices: None) -> None:
    run = make_run(world.vision, "across-change")

    cost = estimate_run_cost(run)

    # 8 GPUs x 0.5 h x $4 + 8 GPUs x 0.5 h x $3.
    assert cost.compute == Decimal("28.00")
    assert cost.total == Decimal("28.00")
    assert cost.egress == 0
    assert cost.gpu_hours == Decimal(8)
    assert not cost.unpriced and cost.unpriced_reason == ""
    [attempt] = cost.attempts
    assert (attempt.number, attempt.hours, attempt.accelerator_hours, attempt.usd) == (1, 1, 8, Decimal(28))
    assert [line.usd_per_hour for line in attempt.lines] == [Decimal(4), Decimal(3)]


def test_run_across_utc_midnight(world: World, flat_prices: None) -> None:
    start = datetime(2026, 11, 2, 22, 30, tzinfo=UTC)
    run = make_run(world.vision, "overnight", started_at=start, ended_at=start + h(150))

    cost = estimate_run_cost(run)

    assert [(d.day, d.accelerator_hours, d.compute, d.total) for d in cost.days] == [
        (date(2026, 11, 2), Decimal(12), Decimal(48), Decimal(48)),  # 1.5 h x 8 x $4
        (date(2026, 11, 3), Decimal(8), Decimal(32), Decimal(32)),  # 1 h x 8 x $4
    ]
    assert cost.total == Decimal(80)


def test_every_attempt_is_billed(world: World, flat_prices: None) -> None:
    run = make_run(world.vision, "retried", status=RunStatus.SUCCEEDED, started_at=T0, ended_at=T0 + h(150))
    Attempt.objects.filter(run=run).update(status=RunStatus.FAILED, ended_at=T0 + h(15))
    Attempt.objects.create(run=run, number=2, status=RunStatus.FAILED, started_at=T0 + h(20), ended_at=T0 + h(50))
    Attempt.objects.create(run=run, number=3, status=RunStatus.SUCCEEDED, started_at=T0 + h(60), ended_at=T0 + h(150))
    # A queued attempt that never started costs nothing and is not listed.
    Attempt.objects.create(run=run, number=4, status=RunStatus.CANCELLED)

    cost = estimate_run_cost(run)

    assert [(a.number, a.hours, a.accelerator_hours, a.usd) for a in cost.attempts] == [
        (1, Decimal("0.25"), Decimal(2), Decimal(8)),
        (2, Decimal("0.5"), Decimal(4), Decimal(16)),
        (3, Decimal("1.5"), Decimal(12), Decimal(48)),
    ]
    assert cost.gpu_hours == Decimal(18)
    assert cost.total == Decimal(72)


def test_cross_region_egress_is_priced_per_pair_at_its_time(world: World, flat_prices: None) -> None:
    run = make_run(world.vision, "cross-region", region="us-east-1", home_region="us-west-2")
    EgressPrice.objects.create(
        source_region="us-east-1", destination_region="us-west-2", effective_from=BOOK_START, usd_per_gb="0.02"
    )
    EgressPrice.objects.create(
        source_region="us-east-1", destination_region="us-west-2", effective_from=T0 + h(45), usd_per_gb="0.01"
    )
    EgressPrice.objects.create(
        source_region="us-east-1", destination_region="internet", effective_from=BOOK_START, usd_per_gb="0.09"
    )
    records = [
        ("us-west-2", 250 * GB, T0 + h(30)),  # 250 GB x $0.02 = $5.00
        ("us-west-2", 100 * GB, T0 + h(50)),  # after the change: 100 GB x $0.01 = $1.00
        ("internet", 2_500_000_000, T0 + h(55)),  # 2.5 GB x $0.09 = $0.225
    ]
    for destination, num_bytes, ts in records:
        EgressRecord.objects.create(
            run=run, source_region="us-east-1", destination_region=destination, bytes=num_bytes, ts=ts
        )

    cost = estimate_run_cost(run)

    assert [(line.usd_per_gb, line.usd) for line in cost.egress_lines] == [
        (Decimal("0.02"), Decimal("5.00")),
        (Decimal("0.01"), Decimal("1.00")),
        (Decimal("0.09"), Decimal("0.225")),
    ]
    assert cost.egress == Decimal("6.225")
    assert cost.compute == Decimal(32)  # 1 h x 8 x $4 in us-east-1
    assert cost.total == Decimal("38.225")
    [day] = cost.days
    assert (day.compute, day.egress, day.total) == (Decimal(32), Decimal("6.225"), Decimal("38.225"))


def test_egress_without_a_pair_price_is_flagged(world: World, flat_prices: None) -> None:
    run = make_run(world.vision, "no-egress-price")
    EgressRecord.objects.create(
        run=run, source_region="us-west-2", destination_region="sa-east-1", bytes=GB, ts=T0 + h(5)
    )

    cost = estimate_run_cost(run)

    assert cost.egress == 0
    assert cost.egress_lines[0].unpriced
    assert cost.unpriced_reason == "no price for egress us-west-2 -> sa-east-1"


def test_running_run_accrues_to_now(world: World, flat_prices: None) -> None:
    run = make_run(world.vision, "still-running", status=RunStatus.RUNNING, ended_at=None)

    with time_machine.travel(T0 + h(135), tick=False):
        cost = estimate_run_cost(run)

    # 2.25 h x 8 GPUs x $4.
    assert cost.running and cost.attempts[0].running
    assert cost.attempts[0].end == T0 + h(135)
    assert cost.gpu_hours == Decimal(18)
    assert cost.total == Decimal(72)
    # An explicit `now` wins over the clock.
    assert estimate_run_cost(run, now=T0 + h(30)).total == Decimal(16)


def test_no_price_for_type_and_region_is_flagged(world: World, flat_prices: None) -> None:
    run = make_run(world.vision, "brazil", region="sa-east-1")

    cost = estimate_run_cost(run)

    assert cost.unpriced
    assert cost.unpriced_reason == "no price for GPU_8xH100 in sa-east-1"
    assert cost.total == 0
    assert cost.gpu_hours == Decimal(8)
    assert cost.unpriced_gpu_hours == Decimal(8)
    assert all(line.unpriced and line.usd_per_hour is None for line in cost.attempts[0].lines)


def test_price_starting_mid_run_leaves_the_start_unpriced(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type=AcceleratorType.H100_8, region="us-west-2", effective_from=T0 + h(15), usd_per_hour="4"
    )
    run = make_run(world.vision, "early")

    cost = estimate_run_cost(run)

    assert cost.total == Decimal(24)  # 0.75 h x 8 x $4
    assert cost.unpriced_gpu_hours == Decimal(2)
    assert cost.unpriced_reason == "no price for GPU_8xH100 in us-west-2 before 2026-11-02 09:15 UTC"


def test_run_without_accelerator_type_is_unpriced(world: World, flat_prices: None) -> None:
    run = make_run(world.vision, "classic", accelerator_type="", instance_type="g5.12xlarge")
    assert estimate_run_cost(run).unpriced_reason == "no accelerator type recorded for this run"


def test_queued_run_costs_nothing_and_is_not_flagged(world: World) -> None:
    run = make_run(world.vision, "queued", region="sa-east-1", status=RunStatus.QUEUED, started_at=None, ended_at=None)
    cost = estimate_run_cost(run)
    assert (cost.total, cost.gpu_hours, cost.attempts, cost.unpriced) == (0, 0, (), False)


# --- Many runs --------------------------------------------------------------------------


def _runs_with_egress(world, count: int, prefix: str) -> list[Run]:
    runs = []
    for i in range(count):
        run = make_run(world.vision, f"{prefix}-{i}", started_at=T0 + h(i), ended_at=T0 + h(i + 60))
        EgressRecord.objects.create(
            run=run, source_region="us-west-2", destination_region="internet", bytes=GB, ts=T0 + h(i)
        )
        runs.append(run)
    return runs


def test_batch_query_count_does_not_grow_with_runs(world: World, flat_prices: None) -> None:
    EgressPrice.objects.create(
        source_region="us-west-2", destination_region="internet", effective_from=BOOK_START, usd_per_gb="0.09"
    )
    one = _runs_with_egress(world, 1, "one")
    twenty = _runs_with_egress(world, 20, "many")

    with CaptureQueriesContext(connection) as few:
        single = estimate_costs_for_runs(one)
    with CaptureQueriesContext(connection) as many:
        costs = estimate_costs_for_runs(twenty)

    # Attempts, accelerator prices, egress records, egress prices.
    assert len(few.captured_queries) == len(many.captured_queries) == 4
    assert single[one[0].pk].total == Decimal("32.09")
    assert len(costs) == 20
    assert all(cost.total == Decimal("32.09") for cost in costs.values())


def test_estimate_run_cost_takes_four_queries(
    world: World, flat_prices: None, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    run = _runs_with_egress(world, 1, "solo")[0]
    with django_assert_num_queries(4):
        estimate_run_cost(run)


def test_batch_of_nothing_makes_no_query() -> None:
    # No database fixture: any query would fail this test.
    assert estimate_costs_for_runs([]) == {}


# --- Month to date ----------------------------------------------------------------------

DEC_NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_month_to_date_counts_only_this_month(world: World, flat_prices: None) -> None:
    EgressPrice.objects.create(
        source_region="us-west-2", destination_region="internet", effective_from=BOOK_START, usd_per_gb="0.09"
    )
    # Crosses into December at 00:00: only 2 of its 4 hours are this month's.
    straddling = make_run(
        world.vision,
        "straddle",
        started_at=datetime(2026, 11, 30, 22, tzinfo=UTC),
        ended_at=datetime(2026, 12, 1, 2, tzinfo=UTC),
    )
    make_run(world.vision, "november")  # T0, all in November: not counted.
    # Running since 10:00 on Dec 1: 2 hours so far.
    make_run(world.nlp, "running", status=RunStatus.RUNNING, started_at=DEC_NOON - h(120), ended_at=None)
    # Egress from November is last month's; December's counts.
    EgressRecord.objects.create(
        run=straddling,
        source_region="us-west-2",
        destination_region="internet",
        bytes=10 * GB,
        ts=datetime(2026, 11, 30, 23, tzinfo=UTC),
    )
    EgressRecord.objects.create(
        run=straddling,
        source_region="us-west-2",
        destination_region="internet",
        bytes=GB,
        ts=datetime(2026, 12, 1, 1, tzinfo=UTC),
    )
    other = Group.objects.create(name="idle")

    # The rollups as of an hour ago, plus what the running run accrued since: one figure.
    rollups.refresh_changed(now=DEC_NOON - h(60))
    rows = team_month([world.vision.pk, world.nlp.pk, other.pk], now=DEC_NOON)

    assert [(r.team_name, r.gpu_hours, r.compute_usd, r.egress_usd, r.usd) for r in rows] == [
        ("idle", 0, 0, 0, 0),
        ("nlp", Decimal(16), Decimal(64), 0, Decimal(64)),  # 2 h x 8 x $4
        ("vision", Decimal(16), Decimal(64), Decimal("0.09"), Decimal("64.09")),  # 2 h x 8 x $4 + 1 GB
    ]
    assert not any(r.unpriced for r in rows)
    assert [r.figure.kind for r in rows] == ["estimated"] * 3


def test_month_to_date_flags_unpriced_hours(world: World, flat_prices: None) -> None:
    make_run(world.vision, "brazil", region="sa-east-1", started_at=DEC_NOON - h(60), ended_at=DEC_NOON)

    with time_machine.travel(DEC_NOON + h(1), tick=False):
        rollups.refresh_changed()
        [row] = team_month([world.vision.pk])

    assert (row.usd, row.gpu_hours, row.unpriced) == (0, 8, True)
    assert row.figure.kind == "lower bound" and "sa-east-1" in row.figure.label
