"""Money arithmetic is exact or raises: no sum, product or difference is ever rounded, and the
one rounding step (microseconds to hours) is half-even to 1e-9 h, whatever the thread's context."""

from __future__ import annotations

from decimal import Decimal, Inexact, getcontext, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.prices.money import (
    EXACT,
    HOURS_QUANTUM,
    MICROSECONDS_PER_HOUR,
    ROUNDING,
    exact_difference,
    exact_product,
    exact_sum,
    hours_from_microseconds,
)

amounts = st.decimals(min_value=Decimal("-1e12"), max_value=Decimal("1e12"), places=9, allow_nan=False)


@given(st.lists(amounts, max_size=30))
def test_sum_is_the_exact_sum(values: list[Decimal]) -> None:
    with localcontext(EXACT):
        expected = sum(values, Decimal(0))
    assert exact_sum(values) == expected
    assert exact_sum(iter(values)) == expected  # a generator is read once


@given(amounts, amounts)
def test_product_and_difference_are_exact(a: Decimal, b: Decimal) -> None:
    with localcontext(EXACT):
        assert exact_product(a, b, 3) == a * b * 3
        assert exact_difference(a, b) == a - b


def test_what_would_need_rounding_raises() -> None:
    with pytest.raises(Inexact):
        exact_sum([Decimal("1e59"), Decimal("1e-5")])  # 65 digits: beyond the 60 kept
    with pytest.raises(Inexact):
        exact_product(Decimal("1." + "1" * 40), Decimal("1." + "1" * 40))
    with pytest.raises(Inexact):
        exact_difference(Decimal("1e60"), Decimal("1e-3"))
    with pytest.raises(TypeError):
        exact_sum([Decimal(1), 0.5])  # a float is refused, never converted


@given(st.integers(min_value=0, max_value=10**15))
def test_hours_round_half_even_to_the_quantum(micro: int) -> None:
    with localcontext(ROUNDING):
        expected = (Decimal(micro) / MICROSECONDS_PER_HOUR).quantize(HOURS_QUANTUM)
    assert hours_from_microseconds(micro) == expected
    assert hours_from_microseconds(micro).as_tuple().exponent == -9


def test_the_threads_context_neither_changes_nor_matters() -> None:
    before = getcontext().copy()
    with localcontext() as loose:
        loose.prec = 3  # a caller's coarse context must not round money
        assert exact_sum([Decimal("1234.5678"), Decimal("0.0001")]) == Decimal("1234.5679")
        assert hours_from_microseconds(5_400_000) == Decimal("0.001500000")
    assert getcontext().prec == before.prec and getcontext().traps == before.traps
