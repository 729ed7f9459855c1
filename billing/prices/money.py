"""Money primitives: exact Decimal arithmetic, billed hours, the price in force, formatting.

Every module that computes money uses these and nothing else (issue 17: "one cost engine, one
number"). What a run cost is answered by `billing.engine.run_costs`; pages read it, or the
daily rollups it writes (`billing.costs.rollups`), through `billing.costs.spend`.

Arithmetic: no floats anywhere. Durations are integer microseconds; the one inexact step is
microseconds / 3.6e9, rounded half-even to `HOURS_QUANTUM` (1e-9 h, 3.6 microseconds, finer
than any cloud bills). After that every product and sum runs in `EXACT`, a Decimal context
that traps `Inexact`: if money would ever be rounded, it raises instead of drifting. Each
segment's hours are the difference of *cumulative* rounded hours from the interval start, so
the segments of an interval add up to exactly the interval's own rounded hours.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import (
    ROUND_FLOOR,
    ROUND_HALF_EVEN,
    ROUND_HALF_UP,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    localcontext,
)
from itertools import pairwise
from typing import Any, TypeVar

# Hours are kept to 1e-9 h (3.6 us): below what any provider bills, above datetime's 1 us.
HOURS_QUANTUM = Decimal("0.000000001")
# Decimal GB, as AWS and Azure quote egress ("per GB" = 10^9 bytes). GCP quotes per GiB
# (2^30 bytes); a GiB price must be divided by 1.073741824 before it goes in the book.
BYTES_PER_GB = 10**9
MICROSECONDS_PER_HOUR = 3_600_000_000
ZERO = Decimal(0)
CENT = Decimal("0.01")

# Money arithmetic: 60 digits is far beyond any bill, and Inexact is trapped so that a sum or
# product that would need rounding raises rather than silently losing a fraction of a cent.
EXACT = Context(prec=60, traps=[Inexact, InvalidOperation, DivisionByZero, Overflow])
# The single rounding step (microseconds -> hours) runs in this context, then quantizes.
ROUNDING = Context(prec=60, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, DivisionByZero, Overflow])

T = TypeVar("T")


@dataclass(frozen=True)
class PricePeriod:
    """A price (per hour) in force from `effective_from` until the next one starts."""

    effective_from: datetime
    usd_per_hour: Decimal


@dataclass(frozen=True)
class Segment:
    """A piece of billed time that crosses neither a UTC midnight nor a price change."""

    start: datetime
    end: datetime
    day: date
    hours: Decimal


def utc(value: datetime, name: str = "datetime") -> datetime:
    """`value` in UTC; a naive datetime is refused (it would shift every day boundary)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value!r}")
    return value.astimezone(UTC)


def microseconds(delta: timedelta) -> int:
    """The exact integer microseconds of `delta` (timedelta.total_seconds() is a float)."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def hours_from_microseconds(micro: int) -> Decimal:
    """`micro` microseconds as hours, half-even to `HOURS_QUANTUM`: the one rounding step."""
    return ROUNDING.divide(Decimal(micro), MICROSECONDS_PER_HOUR).quantize(HOURS_QUANTUM, context=ROUNDING)


def billed_hours(start: datetime, end: datetime) -> Decimal:
    """Hours from `start` to `end` (0 if end <= start), rounded half-even to `HOURS_QUANTUM`."""
    micro = microseconds(utc(end, "end") - utc(start, "start"))
    return hours_from_microseconds(max(micro, 0))


# The arithmetic below calls EXACT's (or ROUNDING's) own methods: the same results and traps as
# `with localcontext(EXACT)`, without copying and switching the thread's context each call
# (a page of 50 runs made ~9,000 sums; the context switch was most of their cost). The cost
# engine's products go through exact_product for the same reason.


def exact_sum(values: Iterable[Decimal]) -> Decimal:
    """Sum of `values` that raises rather than round."""
    total = ZERO
    for value in values:
        total = EXACT.add(total, value)
    return total


def exact_product(*values: Decimal | int) -> Decimal:
    """Product of `values` that raises rather than round."""
    out = Decimal(1)
    for value in values:
        out = EXACT.multiply(out, value)
    return out


def exact_difference(a: Decimal, b: Decimal) -> Decimal:
    """a - b, exactly."""
    return EXACT.subtract(a, b)


def per_unit(usd: Decimal, units: int) -> Decimal:
    """usd / units (an instance's price per GPU): exact when it can be (1, 2, 4, 8 always are),
    else half-even to 1e-12 dollars, far below a cent."""
    try:
        with localcontext(EXACT):
            return usd / units
    except Inexact:
        with localcontext(ROUNDING):
            return (usd / units).quantize(Decimal("1e-12"))


def linear_forecast(spend: Decimal, elapsed_seconds: int, length_seconds: int) -> Decimal | None:
    """spend / elapsed x length, half-even to the cent: the one forecast (policies, /costs/)."""
    if elapsed_seconds <= 0:
        return None
    with localcontext(ROUNDING):
        return (spend * length_seconds / elapsed_seconds).quantize(CENT)


def run_rate_forecast(
    spend: Decimal, trailing_spend: Decimal, trailing_seconds: int, remaining_seconds: int
) -> Decimal | None:
    """spend + the trailing run rate (trailing_spend / trailing_seconds) x remaining_seconds,
    half-even to the cent: the provisional forecast of a period's first days, whose own spend
    is too little to extrapolate. The trailing window may reach back across the period's start.
    None without a trailing window."""
    if trailing_seconds <= 0:
        return None
    with localcontext(ROUNDING):
        return (spend + trailing_spend * max(remaining_seconds, 0) / trailing_seconds).quantize(CENT)


def utc_midnight(day: date) -> datetime:
    """00:00 UTC at the start of `day`: every rollup day and range bound is a UTC day."""
    return datetime.combine(day, time(), tzinfo=UTC)


def month_start(now: datetime) -> datetime:
    """00:00 UTC on the first day of `now`'s UTC month."""
    now = utc(now, "now")
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def split_billed_hours(start: datetime, end: datetime, cuts: Iterable[datetime]) -> list[Segment]:
    """Split [start, end) exactly at the given instants (price changes...) and at UTC midnights.

    1. Convert everything to UTC (naive datetimes are refused); an empty or reversed interval
       gives no segments.
    2. Cut points: each given instant strictly inside the interval, and each UTC midnight
       strictly inside it. A cut exactly at `start` or `end` makes no zero-length segment.
    3. Segment hours are differences of cumulative rounded hours since `start`, so their sum
       equals `billed_hours(start, end)` exactly.
    4. A segment's `day` is the UTC date of its start; one ending at 00:00 belongs to the day
       before, because the interval is half-open.
    """
    start, end = utc(start, "start"), utc(end, "end")
    if end <= start:
        return []
    points_inside = {c for c in (utc(p, "cut") for p in cuts) if start < c < end}
    midnight = utc_midnight(start.date() + timedelta(days=1))
    while midnight < end:
        points_inside.add(midnight)
        midnight += timedelta(days=1)
    points = [start, *sorted(points_inside), end]
    segments = []
    done = ZERO
    for seg_start, seg_end in pairwise(points):
        cumulative = hours_from_microseconds(microseconds(seg_end - start))
        hours = EXACT.subtract(cumulative, done)
        done = cumulative
        segments.append(Segment(start=seg_start, end=seg_end, day=seg_start.date(), hours=hours))
    return segments


def price_in_force(periods: Sequence[T], starts: Sequence[datetime], at: datetime) -> T | None:
    """The period whose start is the latest <= `at` (`starts` sorted, one per period), or None."""
    index = bisect_right(starts, at) - 1
    return periods[index] if index >= 0 else None


def sorted_periods(prices: Iterable[PricePeriod]) -> list[PricePeriod]:
    """Price periods in time order; two starting at the same instant are an error, not a coin toss."""
    periods = sorted(
        (PricePeriod(utc(p.effective_from, "effective_from"), p.usd_per_hour) for p in prices),
        key=lambda p: p.effective_from,
    )
    for before, after in pairwise(periods):
        if before.effective_from == after.effective_from:
            raise ValueError(f"two prices start at {after.effective_from.isoformat()}; which is in force is ambiguous")
    return periods


def egress_cost(num_bytes: int, usd_per_gb: Decimal) -> Decimal:
    """Exact cost of moving `num_bytes` at `usd_per_gb`, with GB = 10^9 bytes (AWS/Azure)."""
    if num_bytes < 0:
        raise ValueError(f"bytes must be >= 0, got {num_bytes}")
    with localcontext(EXACT):
        # Dividing by a power of ten only moves the decimal point, so this stays exact.
        return Decimal(num_bytes) * usd_per_gb / BYTES_PER_GB


def to_cents(value: Decimal) -> Decimal:
    """`value` to the cent for display, half away from zero (as Django's floatformat rounds, so
    a page, a CSV reader and /metrics show the same cents); never used inside a sum."""
    with localcontext(EXACT) as ctx:
        ctx.traps[Inexact] = False
        return value.quantize(CENT, rounding=ROUND_HALF_UP)


def cents_that_add_up(values: Sequence[Decimal]) -> list[Decimal]:
    """Each of `values` to the cent such that they sum to `to_cents(sum(values))`.

    Series that a reader adds up (Prometheus `sum by (team)` over a team's policies) must give
    the total the pages show, which rounding each one alone does not: three series of $0.005
    are $0.00 + $0.00 + $0.00 (or $0.03) against a total of $0.02. Largest remainder: every
    value is floored to the cent, and the cents still missing go to the largest remainders
    (the first in order on a tie), so each stays within a cent of its exact value.
    """
    with localcontext(EXACT) as ctx:
        ctx.traps[Inexact] = False
        floors = [v.quantize(CENT, rounding=ROUND_FLOOR) for v in values]
        missing = int((to_cents(exact_sum(values)) - exact_sum(floors)) / CENT)
        by_remainder = sorted(range(len(values)), key=lambda i: (-(values[i] - floors[i]), i))
        for i in by_remainder[:missing]:
            floors[i] += CENT
    return floors


def format_usd(value: Decimal | None) -> str:
    """'$1,234.57' (`to_cents`), '-$3.00' for a negative amount, '-' for None."""
    if value is None:
        return "-"
    cents = to_cents(value)
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents):,.2f}"


# --- What a figure is ----------------------------------------------------------------------

ESTIMATED = "estimated"
BILLED = "billed"
LOWER_BOUND = "lower bound"
FORECAST = "forecast"
# A forecast from the trailing run rate, before MIN_FORECAST_DAYS of the period are in.
PROVISIONAL_FORECAST = "provisional forecast"


@dataclass(frozen=True)
class Figure:
    """An amount and what it is: estimated, billed, a lower bound (with what is unpriced or
    counted at its least) or a forecast, and as of when. Every page, CSV and API labels money
    with one of these; `unpriced` holds the reasons."""

    usd: Decimal
    kind: str
    as_of: datetime
    unpriced: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """e.g. 'lower bound (no price for GPU_8xH100 in sa-east-1), as of 2026-12-01 14:05 UTC'.

        The reasons say what is missing: a price ("no price for ..."), or what was counted at
        its least ("workers estimated at the autoscale minimum ...").
        """
        what = self.kind
        if self.kind == LOWER_BOUND and self.unpriced:
            what += f" ({'; '.join(self.unpriced)})"
        return f"{what}, as of {utc(self.as_of):%Y-%m-%d %H:%M} UTC"

    def as_json(self) -> dict[str, Any]:
        """The API's shape: usd as an exact string, kind, as_of, unpriced."""
        text = format(self.usd, "f")
        usd = text.rstrip("0").rstrip(".") if "." in text else text
        return {"usd": usd, "kind": self.kind, "as_of": utc(self.as_of).isoformat(), "unpriced": list(self.unpriced)}


def estimate(usd: Decimal, as_of: datetime, unpriced: Iterable[str] = ()) -> Figure:
    """An estimate from the price book: a lower bound when anything had no price (or, for a
    cluster's workers, only the autoscale minimum is known)."""
    reasons = tuple(dict.fromkeys(unpriced))
    return Figure(usd, LOWER_BOUND if reasons else ESTIMATED, as_of, reasons)
