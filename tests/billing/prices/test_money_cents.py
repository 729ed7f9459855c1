"""Cents that add up: series a reader sums (Prometheus by team) give the total the pages show."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from billing.prices.money import CENT, cents_that_add_up, exact_sum, to_cents


def test_three_half_cents_are_two_cents_not_zero_or_three() -> None:
    half = Decimal("0.005")
    assert [to_cents(half)] * 3 == [Decimal("0.01")] * 3  # rounded alone: $0.03 against $0.02
    assert cents_that_add_up([half, half, half]) == [Decimal("0.01"), Decimal("0.01"), Decimal("0.00")]


def test_credits_and_charges_keep_the_total() -> None:
    values = [Decimal("-0.004"), Decimal("0.009"), Decimal("12.3449")]
    out = cents_that_add_up(values)
    assert exact_sum(out) == to_cents(exact_sum(values)) == Decimal("12.35")
    assert out == [Decimal("0.00"), Decimal("0.01"), Decimal("12.34")]


def test_nothing_is_nothing() -> None:
    assert cents_that_add_up([]) == []


amounts = st.decimals(min_value=Decimal("-1000"), max_value=Decimal("100000"), places=6, allow_nan=False)


@given(st.lists(amounts, max_size=12))
def test_the_cents_sum_to_the_rounded_total_and_each_is_within_a_cent(values: list[Decimal]) -> None:
    out = cents_that_add_up(values)
    assert exact_sum(out) == to_cents(exact_sum(values))
    assert all(abs(o - v) < CENT and o == o.quantize(CENT) for o, v in zip(out, values, strict=True))
