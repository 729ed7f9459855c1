"""The cost engine: what a serverless GPU run cost, from the price book, in exact Decimals.

Money rule (DESIGN.md): for every attempt (retries are billed), num_accelerators x billed hours
x the accelerator-hour price in force for the run's type and region, split at price changes and
at UTC day boundaries; plus egress bytes x the price for that region pair.

Arithmetic: no floats anywhere. Durations are integer microseconds; the one inexact step in
the whole engine is microseconds / 3.6e9, which we round half-even to `HOURS_QUANTUM` (1e-9 h,
3.6 microseconds, finer than any cloud bills). After that every product and sum runs in
`_EXACT`, a Decimal context that traps `Inexact`: if money would ever be rounded, it raises
instead of drifting. Each segment's hours are taken as the difference of *cumulative* rounded
hours from the interval start, so the segments of an interval add up to exactly the interval's
own rounded hours: the per-day and per-attempt lines on a page always add up to its total.

Pure functions (`split_billed_hours`, `compute_cost`, `egress_cost`) know nothing of the
database; `estimate_run_cost`, `estimate_costs_for_runs` and `month_to_date_by_team` read it
with a small, constant number of queries, whatever the number of runs.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import (
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    localcontext,
)
from itertools import pairwise
from typing import Any, TypedDict

from django.contrib.auth.models import Group
from django.db.models import Q
from django.utils import timezone

from billing.choices import EgressOrigin, PriceKind
from billing.models import AcceleratorPrice, EgressPrice, EgressRecord
from runs.models import Attempt, Run

# Hours are kept to 1e-9 h (3.6 us): below what any provider bills, above datetime's 1 us.
HOURS_QUANTUM = Decimal("0.000000001")
# Decimal GB, as AWS and Azure quote egress ("per GB" = 10^9 bytes). GCP quotes per GiB
# (2^30 bytes); a GiB price must be divided by 1.073741824 before it goes in the book.
BYTES_PER_GB = 10**9
_MICROSECONDS_PER_HOUR = 3_600_000_000
ZERO = Decimal(0)

# Money arithmetic: 60 digits is far beyond any bill, and Inexact is trapped so that a sum or
# product that would need rounding raises rather than silently losing a fraction of a cent.
_EXACT = Context(prec=60, traps=[Inexact, InvalidOperation, DivisionByZero, Overflow])
# The single rounding step (microseconds -> hours) runs in this context, then quantizes.
_ROUNDING = Context(prec=60, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, DivisionByZero, Overflow])


# --- Value types ------------------------------------------------------------------------


@dataclass(frozen=True)
class PricePeriod:
    """An accelerator-hour price in force from `effective_from` until the next one starts."""

    effective_from: datetime
    usd_per_hour: Decimal


@dataclass(frozen=True)
class Segment:
    """A piece of billed time that crosses neither a UTC midnight nor a price change."""

    start: datetime
    end: datetime
    day: date
    hours: Decimal


@dataclass(frozen=True)
class CostLine:
    """One segment priced: `usd_per_hour` is None (and `unpriced` True) when no price was in force."""

    start: datetime
    end: datetime
    day: date
    hours: Decimal
    accelerator_hours: Decimal
    usd_per_hour: Decimal | None
    usd: Decimal
    unpriced: bool


@dataclass(frozen=True)
class AttemptCost:
    """Compute cost of one attempt; `running` when it has no end yet and accrues to `as_of`."""

    number: int
    start: datetime
    end: datetime
    running: bool
    hours: Decimal
    accelerator_hours: Decimal
    unpriced_accelerator_hours: Decimal
    usd: Decimal
    lines: tuple[CostLine, ...]


@dataclass(frozen=True)
class EgressLine:
    """One egress record priced by the pair's price in force at the record's time."""

    ts: datetime
    source_region: str
    destination_region: str
    num_bytes: int
    usd_per_gb: Decimal | None
    usd: Decimal
    unpriced: bool
    origin: str = EgressOrigin.REPORTED

    @property
    def derived(self) -> bool:
        """True for an estimate from network metrics (billing.egress), not a reported record."""
        return self.origin == EgressOrigin.DERIVED


@dataclass(frozen=True)
class DayCost:
    """A run's cost on one UTC day: compute segments of that day plus egress recorded that day."""

    day: date
    accelerator_hours: Decimal
    compute: Decimal
    egress: Decimal
    total: Decimal


@dataclass(frozen=True)
class RunCost:
    """Everything the run page shows about cost. Unpriced parts count in hours, never in USD."""

    run_id: int
    accelerator_type: str
    region: str
    num_accelerators: int
    as_of: datetime
    total: Decimal
    compute: Decimal
    egress: Decimal
    gpu_hours: Decimal
    unpriced_gpu_hours: Decimal
    running: bool
    attempts: tuple[AttemptCost, ...]
    days: tuple[DayCost, ...]
    egress_lines: tuple[EgressLine, ...]
    unpriced_reasons: tuple[str, ...]

    @property
    def unpriced(self) -> bool:
        """True when some hours or bytes had no price, so `total` is a lower bound."""
        return bool(self.unpriced_reasons)

    @property
    def unpriced_reason(self) -> str:
        """The reasons as one line for the page, e.g. "no price for GPU_8xH100 in sa-east-1"."""
        return "; ".join(self.unpriced_reasons)


class TeamSpend(TypedDict):
    """One row of `month_to_date_by_team`."""

    team_id: int
    team_name: str
    gpu_hours: Decimal
    usd: Decimal
    compute_usd: Decimal
    egress_usd: Decimal
    unpriced_gpu_hours: Decimal
    unpriced: bool


# --- Pure functions ---------------------------------------------------------------------


def _utc(value: datetime, name: str = "datetime") -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        # A naive time would be read in the server's zone and shift every day boundary.
        raise ValueError(f"{name} must be timezone-aware, got naive {value!r}")
    return value.astimezone(UTC)


def _microseconds(delta: timedelta) -> int:
    # timedelta.total_seconds() is a float; this is the exact integer.
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _hours_from_microseconds(microseconds: int) -> Decimal:
    with localcontext(_ROUNDING):
        return (Decimal(microseconds) / _MICROSECONDS_PER_HOUR).quantize(HOURS_QUANTUM)


def billed_hours(start: datetime, end: datetime) -> Decimal:
    """Hours from `start` to `end` (0 if end <= start), rounded half-even to `HOURS_QUANTUM`."""
    micro = _microseconds(_utc(end, "end") - _utc(start, "start"))
    return _hours_from_microseconds(max(micro, 0))


def split_billed_hours(start: datetime, end: datetime, price_changes: Iterable[datetime]) -> list[Segment]:
    """Split [start, end) exactly at price-change instants and at UTC midnights.

    1. Convert everything to UTC (naive datetimes are refused); an empty or reversed interval
       gives no segments.
    2. Cut points: each price change strictly inside the interval, and each UTC midnight
       strictly inside it. A cut exactly at `start` or `end` makes no zero-length segment.
    3. Segment hours are differences of cumulative rounded hours since `start`, so their sum
       equals `billed_hours(start, end)` exactly (see the module docstring).
    4. A segment's `day` is the UTC date of its start; one ending at 00:00 belongs to the day
       before, because the interval is half-open.
    """
    start, end = _utc(start, "start"), _utc(end, "end")
    if end <= start:
        return []
    cuts = {c for c in (_utc(p, "price change") for p in price_changes) if start < c < end}
    midnight = utc_midnight(start.date() + timedelta(days=1))
    while midnight < end:
        cuts.add(midnight)
        midnight += timedelta(days=1)
    points = [start, *sorted(cuts), end]
    segments = []
    done = ZERO
    for seg_start, seg_end in pairwise(points):
        cumulative = _hours_from_microseconds(_microseconds(seg_end - start))
        with localcontext(_EXACT):
            hours = cumulative - done
        done = cumulative
        segments.append(Segment(start=seg_start, end=seg_end, day=seg_start.date(), hours=hours))
    return segments


def _sorted_periods(prices: Iterable[PricePeriod]) -> list[PricePeriod]:
    periods = sorted(
        (PricePeriod(_utc(p.effective_from, "effective_from"), p.usd_per_hour) for p in prices),
        key=lambda p: p.effective_from,
    )
    for before, after in pairwise(periods):
        if before.effective_from == after.effective_from:
            raise ValueError(f"two prices start at {after.effective_from.isoformat()}; which is in force is ambiguous")
    return periods


def compute_cost(
    start: datetime, end: datetime, num_accelerators: int, prices: Sequence[PricePeriod]
) -> list[CostLine]:
    """Price [start, end) for `num_accelerators` accelerators.

    1. Sort the price periods; two with the same start are an error, not a coin toss.
    2. Split the interval at every price change and UTC midnight (`split_billed_hours`).
    3. For each segment take the price in force at its start: the latest `effective_from` <=
       segment start. Segments never cross a change, so that price holds for all of it.
    4. usd = num_accelerators x hours x usd_per_hour, exactly. A segment before the first
       price gets usd_per_hour None, usd 0 and `unpriced=True`: never a silent zero.
    """
    if num_accelerators < 0:
        raise ValueError(f"num_accelerators must be >= 0, got {num_accelerators}")
    periods = _sorted_periods(prices)
    starts = [p.effective_from for p in periods]
    lines = []
    for seg in split_billed_hours(start, end, starts):
        index = bisect_right(starts, seg.start) - 1
        price = periods[index].usd_per_hour if index >= 0 else None
        with localcontext(_EXACT):
            accelerator_hours = seg.hours * num_accelerators
            usd = accelerator_hours * price if price is not None else ZERO
        lines.append(
            CostLine(
                start=seg.start,
                end=seg.end,
                day=seg.day,
                hours=seg.hours,
                accelerator_hours=accelerator_hours,
                usd_per_hour=price,
                usd=usd,
                unpriced=price is None,
            )
        )
    return lines


def egress_cost(num_bytes: int, usd_per_gb: Decimal) -> Decimal:
    """Exact cost of moving `num_bytes` at `usd_per_gb`, with GB = 10^9 bytes (AWS/Azure)."""
    if num_bytes < 0:
        raise ValueError(f"bytes must be >= 0, got {num_bytes}")
    with localcontext(_EXACT):
        # Dividing by a power of ten only moves the decimal point, so this stays exact.
        return Decimal(num_bytes) * usd_per_gb / BYTES_PER_GB


# --- Price lookups (one query each) -----------------------------------------------------


def _price_in_force(periods: Sequence[Any], starts: Sequence[datetime], at: datetime) -> Any | None:
    index = bisect_right(starts, at) - 1
    return periods[index] if index >= 0 else None


def _accelerator_prices(keys: set[tuple[str, str]]) -> dict[tuple[str, str], list[PricePeriod]]:
    """Price periods per (type, region) for all `keys` in one query (none if `keys` is empty)."""
    found: dict[tuple[str, str], list[PricePeriod]] = {key: [] for key in keys}
    if not keys:
        return found
    # Filtering on each column separately may fetch a few rows for pairs nobody asked for; the
    # price book is tens of rows, and one IN-query beats an OR of pairs on every backend.
    rows = AcceleratorPrice.objects.filter(
        accelerator_type__in={t for t, _ in keys}, region__in={r for _, r in keys}
    ).order_by("effective_from")
    negotiated: dict[tuple[str, str], list[PricePeriod]] = defaultdict(list)
    for row in rows.values_list("accelerator_type", "region", "effective_from", "usd_per_hour", "kind"):
        if (row[0], row[1]) in found:
            target = negotiated if row[4] == PriceKind.NEGOTIATED else found
            target[(row[0], row[1])].append(PricePeriod(row[2], row[3]))
    # A negotiated book, where a type and region has one, replaces the list prices whole.
    found.update(negotiated)
    return found


@dataclass(frozen=True)
class _EgressPeriods:
    starts: list[datetime]
    prices: list[Decimal]


def _egress_prices(pairs: set[tuple[str, str]]) -> dict[tuple[str, str], _EgressPeriods]:
    found: dict[tuple[str, str], _EgressPeriods] = {pair: _EgressPeriods([], []) for pair in pairs}
    if not pairs:
        return found
    rows = EgressPrice.objects.filter(
        source_region__in={s for s, _ in pairs}, destination_region__in={d for _, d in pairs}
    ).order_by("effective_from")
    for source, destination, effective_from, usd_per_gb, processing in rows.values_list(
        "source_region", "destination_region", "effective_from", "usd_per_gb", "usd_per_gb_processing"
    ):
        periods = found.get((source, destination))
        if periods is not None:
            periods.starts.append(effective_from)
            # The processing fee is charged per GB on top of the transfer price.
            periods.prices.append(_exact_sum([usd_per_gb, processing]))
    return found


def _price_egress(
    ts: datetime,
    source: str,
    destination: str,
    num_bytes: int,
    periods: _EgressPeriods,
    origin: str = EgressOrigin.REPORTED,
) -> EgressLine:
    usd_per_gb = _price_in_force(periods.prices, periods.starts, ts)
    return EgressLine(
        origin=origin,
        ts=ts,
        source_region=source,
        destination_region=destination,
        num_bytes=num_bytes,
        usd_per_gb=usd_per_gb,
        usd=egress_cost(num_bytes, usd_per_gb) if usd_per_gb is not None else ZERO,
        unpriced=usd_per_gb is None,
    )


def _missing_price_reason(what: str, first_start: datetime | None) -> str:
    if first_start is None:
        return f"no price for {what}"
    return f"no price for {what} before {first_start:%Y-%m-%d %H:%M} UTC"


def _exact_sum(values: Iterable[Decimal]) -> Decimal:
    with localcontext(_EXACT):
        return sum(values, ZERO)


def _compute_key(accelerator_type: str, region: str) -> tuple[str, str] | None:
    return (accelerator_type, region) if accelerator_type and region else None


# --- Database-backed estimates ----------------------------------------------------------


def estimate_run_cost(run: Run, now: datetime | None = None) -> RunCost:
    """Cost of one run so far (a running attempt accrues to `now`); at most four queries."""
    return estimate_costs_for_runs([run], now=now)[run.pk]


def estimate_costs_for_runs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunCost]:
    """Cost of each run, keyed by run id, in at most four queries however many runs.

    1. One query for the started attempts of all runs, in number order.
    2. One query for the accelerator prices of every (type, region) among the runs.
    3. One query for the runs' egress records, and one for the prices of their region pairs
       (skipped when there are no records).
    4. Price each attempt with `compute_cost` (an attempt with no end accrues to `now`),
       each egress record with the pair's price in force at its time, then fold both into
       per-attempt and per-day lines. Anything without a price is counted in hours and named
       in `unpriced_reasons`, never priced at zero silently.

    Meant for a page's worth of runs: the ids travel as one IN list.
    """
    runs = list(runs)
    if not runs:
        return {}
    as_of = _utc(now or timezone.now(), "now")
    run_ids = [run.pk for run in runs]

    attempts: dict[int, list[Attempt]] = defaultdict(list)
    attempt_rows = Attempt.objects.filter(run_id__in=run_ids, started_at__isnull=False).order_by("run_id", "number")
    for attempt in attempt_rows.only("run_id", "number", "started_at", "ended_at"):
        attempts[attempt.run_id].append(attempt)

    keys = {key for run in runs if (key := _compute_key(run.accelerator_type, run.region))}
    compute_prices = _accelerator_prices(keys)

    records: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    record_rows = EgressRecord.objects.filter(run_id__in=run_ids).order_by("ts", "pk")
    for row in record_rows.values_list("run_id", "ts", "source_region", "destination_region", "bytes", "origin"):
        records[row[0]].append(row[1:])
    pairs = {(row[1], row[2]) for rows in records.values() for row in rows}
    egress_prices = _egress_prices(pairs)

    return {
        run.pk: _run_cost(run, attempts[run.pk], compute_prices, records[run.pk], egress_prices, as_of) for run in runs
    }


def _run_cost(
    run: Run,
    attempts: list[Attempt],
    compute_prices: dict[tuple[str, str], list[PricePeriod]],
    records: list[tuple[Any, ...]],
    egress_prices: dict[tuple[str, str], _EgressPeriods],
    as_of: datetime,
) -> RunCost:
    key = _compute_key(run.accelerator_type, run.region)
    periods = compute_prices.get(key, []) if key else []
    reasons: list[str] = []

    attempt_costs = []
    for attempt in attempts:
        # An attempt without an end is still holding its GPUs (Attempt.billed_seconds agrees).
        end = attempt.ended_at or as_of
        lines = tuple(compute_cost(attempt.started_at, end, run.num_accelerators, periods))
        attempt_costs.append(
            AttemptCost(
                number=attempt.number,
                start=attempt.started_at,
                end=end,
                running=attempt.ended_at is None,
                hours=_exact_sum(line.hours for line in lines),
                accelerator_hours=_exact_sum(line.accelerator_hours for line in lines),
                unpriced_accelerator_hours=_exact_sum(line.accelerator_hours for line in lines if line.unpriced),
                usd=_exact_sum(line.usd for line in lines),
                lines=lines,
            )
        )
    unpriced_hours = _exact_sum(a.unpriced_accelerator_hours for a in attempt_costs)
    if unpriced_hours > 0:
        if not run.accelerator_type:
            reasons.append("no accelerator type recorded for this run")
        elif not run.region:
            reasons.append("no region recorded for this run")
        else:
            what = f"{run.accelerator_type} in {run.region}"
            reasons.append(_missing_price_reason(what, periods[0].effective_from if periods else None))

    egress_lines = []
    for ts, source, destination, num_bytes, origin in records:
        pair_periods = egress_prices[(source, destination)]
        line = _price_egress(ts, source, destination, num_bytes, pair_periods, origin)
        egress_lines.append(line)
        if line.unpriced:
            first = pair_periods.starts[0] if pair_periods.starts else None
            reason = _missing_price_reason(f"egress {source} -> {destination}", first)
            if reason not in reasons:
                reasons.append(reason)

    days = _day_lines(attempt_costs, egress_lines)
    compute = _exact_sum(a.usd for a in attempt_costs)
    egress = _exact_sum(line.usd for line in egress_lines)
    return RunCost(
        run_id=run.pk,
        accelerator_type=run.accelerator_type,
        region=run.region,
        num_accelerators=run.num_accelerators,
        as_of=as_of,
        total=_exact_sum([compute, egress]),
        compute=compute,
        egress=egress,
        gpu_hours=_exact_sum(a.accelerator_hours for a in attempt_costs),
        unpriced_gpu_hours=unpriced_hours,
        running=any(a.running for a in attempt_costs),
        attempts=tuple(attempt_costs),
        days=days,
        egress_lines=tuple(egress_lines),
        unpriced_reasons=tuple(reasons),
    )


def _day_lines(attempt_costs: list[AttemptCost], egress_lines: list[EgressLine]) -> tuple[DayCost, ...]:
    hours: dict[date, list[Decimal]] = defaultdict(list)
    compute: dict[date, list[Decimal]] = defaultdict(list)
    egress: dict[date, list[Decimal]] = defaultdict(list)
    for attempt in attempt_costs:
        for line in attempt.lines:
            hours[line.day].append(line.accelerator_hours)
            compute[line.day].append(line.usd)
    for line in egress_lines:
        egress[_utc(line.ts).date()].append(line.usd)
    days = []
    for day in sorted(set(hours) | set(egress)):
        day_compute, day_egress = _exact_sum(compute[day]), _exact_sum(egress[day])
        days.append(
            DayCost(
                day=day,
                accelerator_hours=_exact_sum(hours[day]),
                compute=day_compute,
                egress=day_egress,
                total=_exact_sum([day_compute, day_egress]),
            )
        )
    return tuple(days)


def utc_midnight(day: date) -> datetime:
    """00:00 UTC at the start of `day`: every rollup day and range bound is a UTC day."""
    return datetime.combine(day, time(), tzinfo=UTC)


def month_start(now: datetime) -> datetime:
    """00:00 UTC on the first day of `now`'s UTC month."""
    now = _utc(now, "now")
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def month_to_date_by_team(team_ids: Iterable[int], now: datetime | None = None) -> list[TeamSpend]:
    """Estimated spend of each team in the current UTC month, up to `now`; five queries at most.

    1. The month starts at 00:00 UTC on the 1st; `now` defaults to the current time.
    2. One query for the teams (so a team with no runs still gets a row of zeros), one for
       every attempt of their runs that overlaps [month start, now), with its run's type,
       region and size, and one for the prices of those (type, region) pairs.
    3. Each attempt is clipped to [month start, now] before pricing: hours before the month
       belong to last month's bill, and a running attempt accrues up to `now`.
    4. One query for egress records time-stamped inside the month, one for their pair prices.
    5. usd = compute + egress. Hours without a price are counted in `unpriced_gpu_hours` and
       flagged with `unpriced`, so the overview can say the figure is a lower bound.

    Rows come back ordered by team name.
    """
    team_ids = list(team_ids)
    as_of = _utc(now or timezone.now(), "now")
    start_of_month = month_start(as_of)
    teams = list(Group.objects.filter(pk__in=team_ids).order_by("name").values_list("pk", "name"))
    if not teams:
        return []

    attempt_rows = list(
        Attempt.objects.filter(run__team_id__in=team_ids, started_at__lt=as_of)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start_of_month))
        .values_list(
            "run__team_id", "started_at", "ended_at", "run__accelerator_type", "run__region", "run__num_accelerators"
        )
    )
    keys = {key for row in attempt_rows if (key := _compute_key(row[3], row[4]))}
    compute_prices = _accelerator_prices(keys)

    hours: dict[int, list[Decimal]] = defaultdict(list)
    unpriced: dict[int, list[Decimal]] = defaultdict(list)
    compute: dict[int, list[Decimal]] = defaultdict(list)
    for team_id, started_at, ended_at, accelerator_type, region, num_accelerators in attempt_rows:
        start = max(started_at, start_of_month)
        end = min(ended_at or as_of, as_of)
        key = _compute_key(accelerator_type, region)
        for line in compute_cost(start, end, num_accelerators, compute_prices[key] if key else []):
            hours[team_id].append(line.accelerator_hours)
            compute[team_id].append(line.usd)
            if line.unpriced:
                unpriced[team_id].append(line.accelerator_hours)

    record_rows = list(
        EgressRecord.objects.filter(run__team_id__in=team_ids, ts__gte=start_of_month, ts__lte=as_of).values_list(
            "run__team_id", "ts", "source_region", "destination_region", "bytes"
        )
    )
    egress_prices = _egress_prices({(row[2], row[3]) for row in record_rows})
    egress: dict[int, list[Decimal]] = defaultdict(list)
    egress_unpriced: set[int] = set()
    for team_id, ts, source, destination, num_bytes in record_rows:
        line = _price_egress(ts, source, destination, num_bytes, egress_prices[(source, destination)])
        egress[team_id].append(line.usd)
        if line.unpriced:
            egress_unpriced.add(team_id)

    result: list[TeamSpend] = []
    for team_id, team_name in teams:
        team_compute, team_egress = _exact_sum(compute[team_id]), _exact_sum(egress[team_id])
        team_unpriced = _exact_sum(unpriced[team_id])
        result.append(
            TeamSpend(
                team_id=team_id,
                team_name=team_name,
                gpu_hours=_exact_sum(hours[team_id]),
                usd=_exact_sum([team_compute, team_egress]),
                compute_usd=team_compute,
                egress_usd=team_egress,
                unpriced_gpu_hours=team_unpriced,
                unpriced=team_unpriced > 0 or team_id in egress_unpriced,
            )
        )
    return result
