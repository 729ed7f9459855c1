"""The cost engine: what a serverless GPU run cost, from the price book, in exact Decimals.

Money rule (docs/costs.md, "The money rule"): for every attempt (retries are billed), num_accelerators x billed hours
x the accelerator-hour price in force for the run's type and region, split at price changes and
at UTC day boundaries; plus egress bytes x the price for that region pair.

Arithmetic: no floats anywhere. Durations are integer microseconds; the one inexact step in
the whole engine is microseconds / 3.6e9, which we round half-even to `HOURS_QUANTUM` (1e-9 h,
3.6 microseconds, finer than any cloud bills). After that every product and sum runs in
`EXACT`, a Decimal context that traps `Inexact`: if money would ever be rounded, it raises
instead of drifting. Each segment's hours are taken as the difference of *cumulative* rounded
hours from the interval start, so the segments of an interval add up to exactly the interval's
own rounded hours: the per-day and per-attempt lines on a page always add up to its total.

The primitives live in `billing.prices.money`. `compute_cost` is pure; `estimate_costs_for_runs` is
the serverless part of `billing.engine.run_costs`, the one function pages read a run's cost
from (directly, or through the rollups it writes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.choices import EgressOrigin, PriceKind
from billing.models import AcceleratorPrice, EgressPrice, EgressRecord
from billing.prices.money import (
    BYTES_PER_GB,
    HOURS_QUANTUM,
    ZERO,
    PricePeriod,
    egress_cost,
    exact_product,
    exact_sum,
    price_in_force,
    sorted_periods,
    split_billed_hours,
    utc,
)
from runs.choices import RunOrigin, RunSource
from runs.models import MAX_RUNTIME, Attempt, Run

__all__ = ["BYTES_PER_GB", "HOURS_QUANTUM", "PricePeriod", "egress_cost", "split_billed_hours"]


# --- Value types ------------------------------------------------------------------------


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
        """True for an estimate from network metrics (billing.costs.egress), not a reported record."""
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
    """The serverless engine's view of one run's cost: attempts x accelerators x billed hours, plus egress.

    Pages do not read it directly: billing.costs.run_costs wraps it (`RunBreakdown.base`) with the
    classic-cluster share, idle GPU-minutes and the split by interval and day, and that breakdown
    is what the run page, the API and the exports show. Unpriced parts count in hours, never in USD.
    """

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


# --- Pure functions ---------------------------------------------------------------------


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
    periods = sorted_periods(prices)
    starts = [p.effective_from for p in periods]
    lines = []
    for seg in split_billed_hours(start, end, starts):
        period = price_in_force(periods, starts, seg.start)
        price = period.usd_per_hour if period is not None else None
        accelerator_hours = exact_product(seg.hours, num_accelerators)
        usd = exact_product(accelerator_hours, price) if price is not None else ZERO
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


# --- Price lookups (one query each) -----------------------------------------------------


def accelerator_prices(keys: set[tuple[str, str]]) -> dict[tuple[str, str], list[PricePeriod]]:
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
class EgressPeriods:
    starts: list[datetime]
    prices: list[Decimal]


def egress_prices(pairs: set[tuple[str, str]]) -> dict[tuple[str, str], EgressPeriods]:
    found: dict[tuple[str, str], EgressPeriods] = {pair: EgressPeriods([], []) for pair in pairs}
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
            periods.prices.append(exact_sum([usd_per_gb, processing]))
    return found


def price_egress(
    ts: datetime,
    source: str,
    destination: str,
    num_bytes: int,
    periods: EgressPeriods,
    origin: str = EgressOrigin.REPORTED,
) -> EgressLine:
    usd_per_gb = price_in_force(periods.prices, periods.starts, ts)
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


def no_region_reason(source: str, what: str = "run") -> str:
    """Why a run (or cluster) without a region has no price; a Databricks one names the setting that places it."""
    if source != RunSource.LOCAL and not settings.AIRBOARD_DATABRICKS_REGION:
        return f"no region recorded for this {what}: set AIRBOARD_DATABRICKS_REGION to the workspace's region"
    return f"no region recorded for this {what}"


def compute_key(accelerator_type: str, region: str) -> tuple[str, str] | None:
    return (accelerator_type, region) if accelerator_type and region else None


# --- Database-backed estimates ----------------------------------------------------------


def started(attempt: Attempt) -> datetime:
    """A billed attempt's start: billing reads started attempts only (`started_at__isnull=False`)."""
    assert attempt.started_at is not None, f"attempt {attempt.pk} has not started"
    return attempt.started_at


def billed_end(run: Run, start: datetime, end: datetime | None, as_of: datetime) -> datetime:
    """Where an attempt's billing ends: its end, or `as_of` while it runs.

    A running attempt of a run an API key pushed (origin KEY) stops accruing at the 14-day
    runtime cap (`MAX_RUNTIME`) after its start: no collector sees it end, and a pushed run
    left "running" must not spend a budget for ever (SECURITY.md, "Pushed data").
    """
    if end is not None:
        return end
    if run.origin == RunOrigin.KEY:
        return min(as_of, start + MAX_RUNTIME)
    return as_of


def estimate_run_cost(run: Run, now: datetime | None = None) -> RunCost:
    """The serverless part of one run's cost (accelerator-hours and egress), at most four queries.

    A building block and a test oracle: pages read `billing.engine.run_cost`, which adds a
    classic run's share of cluster uptime, idle GPUs and the billed figure.
    """
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
    as_of = utc(now or timezone.now(), "now")
    run_ids = [run.pk for run in runs]

    attempts: dict[int, list[Attempt]] = defaultdict(list)
    attempt_rows = Attempt.objects.filter(run_id__in=run_ids, started_at__isnull=False).order_by("run_id", "number")
    for attempt in attempt_rows.only("run_id", "number", "started_at", "ended_at"):
        attempts[attempt.run_id].append(attempt)

    keys = {key for run in runs if (key := compute_key(run.accelerator_type, run.region))}
    compute_prices = accelerator_prices(keys)

    records: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    record_rows = EgressRecord.objects.filter(run_id__in=run_ids).order_by("ts", "pk")
    for row in record_rows.values_list("run_id", "ts", "source_region", "destination_region", "bytes", "origin"):
        records[row[0]].append(row[1:])
    pairs = {(row[1], row[2]) for rows in records.values() for row in rows}
    pair_prices = egress_prices(pairs)

    return {
        run.pk: _run_cost(run, attempts[run.pk], compute_prices, records[run.pk], pair_prices, as_of) for run in runs
    }


def _run_cost(
    run: Run,
    attempts: list[Attempt],
    compute_prices: dict[tuple[str, str], list[PricePeriod]],
    records: list[tuple[Any, ...]],
    egress_prices: dict[tuple[str, str], EgressPeriods],
    as_of: datetime,
) -> RunCost:
    key = compute_key(run.accelerator_type, run.region)
    periods = compute_prices.get(key, []) if key else []
    reasons: list[str] = []

    attempt_costs = []
    for attempt in attempts:
        # An attempt without an end is still holding its GPUs (Attempt.billed_seconds agrees).
        start = started(attempt)
        end = billed_end(run, start, attempt.ended_at, as_of)
        lines = tuple(compute_cost(start, end, run.num_accelerators, periods))
        attempt_costs.append(
            AttemptCost(
                number=attempt.number,
                start=start,
                end=end,
                running=attempt.ended_at is None,
                hours=exact_sum(line.hours for line in lines),
                accelerator_hours=exact_sum(line.accelerator_hours for line in lines),
                unpriced_accelerator_hours=exact_sum(line.accelerator_hours for line in lines if line.unpriced),
                usd=exact_sum(line.usd for line in lines),
                lines=lines,
            )
        )
    unpriced_hours = exact_sum(a.unpriced_accelerator_hours for a in attempt_costs)
    if unpriced_hours > 0:
        if not run.accelerator_type:
            reasons.append("no accelerator type recorded for this run")
        elif not run.region:
            reasons.append(no_region_reason(run.source))
        else:
            what = f"{run.accelerator_type} in {run.region}"
            reasons.append(_missing_price_reason(what, periods[0].effective_from if periods else None))

    egress_lines = []
    for ts, source, destination, num_bytes, origin in records:
        pair_periods = egress_prices[(source, destination)]
        line = price_egress(ts, source, destination, num_bytes, pair_periods, origin)
        egress_lines.append(line)
        if line.unpriced:
            first = pair_periods.starts[0] if pair_periods.starts else None
            reason = _missing_price_reason(f"egress {source} -> {destination}", first)
            if reason not in reasons:
                reasons.append(reason)

    days = _day_lines(attempt_costs, egress_lines)
    compute = exact_sum(a.usd for a in attempt_costs)
    egress = exact_sum(line.usd for line in egress_lines)
    return RunCost(
        run_id=run.pk,
        accelerator_type=run.accelerator_type,
        region=run.region,
        num_accelerators=run.num_accelerators,
        as_of=as_of,
        total=exact_sum([compute, egress]),
        compute=compute,
        egress=egress,
        gpu_hours=exact_sum(a.accelerator_hours for a in attempt_costs),
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
    for egress_line in egress_lines:
        egress[utc(egress_line.ts).date()].append(egress_line.usd)
    days = []
    for day in sorted(set(hours) | set(egress)):
        day_compute, day_egress = exact_sum(compute[day]), exact_sum(egress[day])
        days.append(
            DayCost(
                day=day,
                accelerator_hours=exact_sum(hours[day]),
                compute=day_compute,
                egress=day_egress,
                total=exact_sum([day_compute, day_egress]),
            )
        )
    return tuple(days)
