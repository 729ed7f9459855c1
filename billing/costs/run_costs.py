"""A run's cost: serverless accelerator-hours, its share of classic cluster uptime, egress, idle GPUs.

`breakdowns_for_runs` is the estimate every surface reads (directly, or through the daily
rollups it writes); `billing.engine.run_costs` adds the billed figure where one is known.

- Serverless runs: `billing.costs` prices attempts as accelerator-hours, and egress.
- Classic ML runtime clusters, billed by uptime busy or idle: a run on a cluster gets its
  share of the cluster's uptime, priced in one place (`billing.costs.uptime.cluster_uptime`),
  which the clusters page reads too. A classic run without a cluster is billed as
  `instance_type` x ceil(num_accelerators / gpus_per_node) nodes for its attempts.
- Idle cost ("GPUs held but idle"): GPU-minutes whose `utilization_gpu_max` is below
  `AIRBOARD_IDLE_UTILIZATION_PERCENT` while the run was billed, priced at what holds the GPU:
  a serverless run's accelerator-hour price, a classic run's worker instance price per GPU.
  The clusters page's idle cost is its runs' idle, so /costs/ and it agree. Idle cost is a
  part of compute cost, not an addition to it.

Same exact-Decimal rules as `billing.prices.money`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, localcontext

from django.conf import settings
from django.utils import timezone

from billing.costs.serverless import (
    CostLine,
    RunCost,
    accelerator_prices,
    billed_end,
    compute_cost,
    compute_key,
    estimate_costs_for_runs,
    no_region_reason,
    started,
)
from billing.costs.uptime import ClusterUptime, cluster_uptime, combined_rate, instance_prices
from billing.prices.money import (
    EXACT,
    ZERO,
    Figure,
    PricePeriod,
    estimate,
    exact_product,
    exact_sum,
    hours_from_microseconds,
    per_unit,
    price_in_force,
    utc,
)
from runs.choices import RunSource
from runs.models import Attempt, Cluster, GpuMinute, Run
from runs.models.instance_types import instance_gpus, is_gpu_instance

_MICROSECONDS_PER_MINUTE = 60_000_000

# The run fields the cost engine (`breakdowns_for_runs`) reads: load only these to price many runs.
RUN_COST_FIELDS = (
    "id", "source", "team_id", "creator", "usage_policy_name", "experiment_name", "accelerator_type",
    "region", "num_accelerators", "gpus_per_node", "instance_type", "cluster_id", "origin",
)  # fmt: skip


@dataclass(frozen=True)
class DayBreakdown:
    """One UTC day of one run: compute (idle included), egress, and the idle part of compute."""

    day: date
    compute: Decimal
    egress: Decimal
    idle: Decimal
    gpu_hours: Decimal
    idle_gpu_hours: Decimal

    @property
    def total(self) -> Decimal:
        return exact_sum([self.compute, self.egress])


@dataclass(frozen=True)
class IntervalCost:
    """A billed interval: an attempt, or a classic cluster's uptime (`number` 0)."""

    number: int
    label: str
    start: datetime
    end: datetime
    running: bool
    hours: Decimal
    gpu_hours: Decimal
    compute: Decimal
    idle: Decimal
    idle_gpu_hours: Decimal


@dataclass(frozen=True)
class RunBreakdown:
    """A run's cost split by interval and by day; `base` is the serverless engine's view."""

    run_id: int
    classic: bool
    billed_as: str
    compute: Decimal
    egress: Decimal
    idle: Decimal
    gpu_hours: Decimal
    idle_gpu_hours: Decimal
    unpriced_idle_gpu_hours: Decimal
    intervals: tuple[IntervalCost, ...]
    days: tuple[DayBreakdown, ...]
    unpriced_reasons: tuple[str, ...]
    base: RunCost
    as_of: datetime
    running: bool

    @property
    def total(self) -> Decimal:
        return exact_sum([self.compute, self.egress])

    @property
    def missing_prices(self) -> bool:
        """True when a price is missing (rather than, say, only an autoscale minimum known)."""
        return any(reason.startswith("no ") and "price" in reason for reason in self.unpriced_reasons)

    @property
    def figure(self) -> Figure:
        """The total and what it is: estimated, or a lower bound naming what has no price."""
        return estimate(self.total, self.as_of, self.unpriced_reasons)


# --- Helpers ----------------------------------------------------------------------------


def idle_hours(minutes: int) -> Decimal:
    """GPU-hours of `minutes` GPU-minutes, rounded half-even to 1e-9 h as all hours are."""
    return hours_from_microseconds(minutes * _MICROSECONDS_PER_MINUTE)


def _nodes(run: Run) -> int:
    per_node = max(run.gpus_per_node, 1)
    return max(-(-run.num_accelerators // per_node), 1)


# --- Per run ------------------------------------------------------------------------------

# An interval of a run: (key, label, start, end, running); the key matches its compute lines.
Interval = tuple[int, str, datetime, datetime, bool]


def _attempt_intervals(run: Run, attempts: list[Attempt], as_of: datetime) -> list[Interval]:
    return [
        (a.number, f"attempt {a.number}", started(a), billed_end(run, started(a), a.ended_at, as_of),
         a.ended_at is None)
        for a in attempts
    ]  # fmt: skip


def _uptime_intervals(uptime: ClusterUptime, as_of: datetime) -> list[Interval]:
    stretches = uptime.stretches
    out = []
    for n, (start, end) in enumerate(stretches):
        label = "cluster uptime" if len(stretches) == 1 else f"cluster uptime {n + 1} of {len(stretches)}"
        out.append((-n, label, start, end, end >= as_of))
    return out


def breakdowns_for_runs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunBreakdown]:
    """Per-run cost estimate with classic clusters and idle GPUs, in a constant number of queries.

    1. The serverless engine (`estimate_costs_for_runs`) prices attempts and egress.
    2. One query for the clusters of classic runs, and their uptime (`cluster_uptime`): a run
       on a cluster gets its share of the cluster's uptime; one query for the attempts, and
       one for the instance prices of classic runs without a cluster.
    3. One query for the idle GPU-minutes of all runs and one for accelerator prices; a
       minute counts while the run was billed (inside an interval) and is priced at the
       run's accelerator price in force at that minute.
    4. Fold compute, egress and idle into intervals and UTC days.
    """
    runs = list(runs)
    as_of = utc(now or timezone.now(), "now")
    base = estimate_costs_for_runs(runs, now=as_of)
    classic = [run for run in runs if run.source == RunSource.CLASSIC]
    clusters = {c.pk: c for c in Cluster.objects.filter(pk__in={r.cluster_id for r in classic if r.cluster_id})}
    uptimes = cluster_uptime(clusters.values(), now=as_of)

    attempts: dict[int, list[Attempt]] = defaultdict(list)
    rows = Attempt.objects.filter(run_id__in=[r.pk for r in runs], started_at__isnull=False).order_by("number")
    for attempt in rows.only("run_id", "number", "started_at", "ended_at"):
        attempts[attempt.run_id].append(attempt)

    # Classic runs without a cluster: instance_type x nodes for their attempts.
    loose = [run for run in classic if run.cluster_id not in uptimes]
    prices = instance_prices({(run.instance_type, run.region) for run in loose})

    threshold = settings.AIRBOARD_IDLE_UTILIZATION_PERCENT
    idle_minutes: dict[int, list[datetime]] = defaultdict(list)
    idle_rows = GpuMinute.objects.filter(run_id__in=[r.pk for r in runs], utilization_gpu_max__lt=threshold)
    for run_id, minute in idle_rows.values_list("run_id", "minute"):
        idle_minutes[run_id].append(minute)
    accel_keys = {k for run in runs if idle_minutes[run.pk] and (k := compute_key(run.accelerator_type, run.region))}
    accel_prices = accelerator_prices(accel_keys)

    out = {}
    for run in runs:
        uptime = uptimes.get(run.cluster_id) if run.source == RunSource.CLASSIC and run.cluster_id else None
        # Idle GPU-minutes are priced at what holds the GPU (`GpuHourPrice`).
        idle_rule = _gpu_hour_price(run, uptime, prices, accel_prices)
        if uptime is not None:
            classic_compute: _Classic | None = _Classic(
                billed_as=uptime.billed_as, region=uptime.region, lines=list(uptime.shares.get(run.pk, ())),
                runs=uptime.runs, notes=uptime.notes, gpus=_gpus_on(uptime),
            )  # fmt: skip
            intervals = _uptime_intervals(uptime, as_of)
        elif run.source == RunSource.CLASSIC:
            nodes = _nodes(run)
            rate = combined_rate(None, prices.get((run.instance_type, run.region), []), nodes)
            spans = [(started(a), billed_end(run, started(a), a.ended_at, as_of)) for a in attempts[run.pk]]
            lines = [line for start, end in spans for line in compute_cost(start, end, 1, rate)]
            classic_compute = _Classic(
                billed_as=f"{nodes} x {run.instance_type}", region=run.region, lines=lines, runs=1, notes=(),
                gpus=True,
            )  # fmt: skip
            intervals = _attempt_intervals(run, attempts[run.pk], as_of)
        else:
            classic_compute, intervals = None, _attempt_intervals(run, attempts[run.pk], as_of)
        out[run.pk] = _breakdown(run, base[run.pk], intervals, classic_compute, idle_minutes[run.pk], idle_rule)
    return out


def _gpus_on(uptime: ClusterUptime) -> bool:
    """True when the cluster carries GPUs (driver or workers); a CPU-only cluster's hours are no GPU time."""
    return is_gpu_instance(uptime.driver_type) or is_gpu_instance(uptime.worker_type)


@dataclass(frozen=True)
class GpuHourPrice:
    """What one GPU-hour of a run costs: `prices` per hour of what holds the GPUs, divided among
    `per` GPUs (1 for a serverless accelerator-hour, the instance's GPU count on a cluster)."""

    prices: list[PricePeriod]
    per: int
    what: str

    def at(self, when: datetime) -> Decimal | None:
        """The price of one GPU-hour in force at `when`, or None when nothing is priced then."""
        period = price_in_force(self.prices, [p.effective_from for p in self.prices], when)
        return None if period is None else per_unit(period.usd_per_hour, self.per)


def _gpu_hour_price(
    run: Run,
    uptime: ClusterUptime | None,
    instance: dict[tuple[str, str], list[PricePeriod]],
    accelerator: dict[tuple[str, str], list[PricePeriod]],
) -> GpuHourPrice:
    """What holds a run's GPUs, priced: the accelerator-hour price of a serverless run, the
    worker instance price per GPU of a classic one (the clusters page's rule too)."""
    if uptime is not None:
        spec = instance_gpus(uptime.worker_type)
        return GpuHourPrice(list(uptime.worker_prices), spec.count if spec else 1, "an instance")
    if run.source == RunSource.CLASSIC:
        spec = instance_gpus(run.instance_type)
        return GpuHourPrice(instance.get((run.instance_type, run.region), []), spec.count if spec else 1, "an instance")
    key = compute_key(run.accelerator_type, run.region)
    return GpuHourPrice(accelerator.get(key, []) if key else [], 1, "an accelerator")


def gpu_hour_prices(runs: Iterable[Run], now: datetime | None = None) -> dict[int, GpuHourPrice]:
    """`GpuHourPrice` of each run (what stalls and idle GPUs cost), in a constant number of queries."""
    runs = list(runs)
    as_of = utc(now or timezone.now(), "now")
    classic = [run for run in runs if run.source == RunSource.CLASSIC]
    clusters = Cluster.objects.filter(pk__in={r.cluster_id for r in classic if r.cluster_id})
    uptimes = cluster_uptime(clusters, now=as_of)
    instance = instance_prices({(r.instance_type, r.region) for r in classic if r.cluster_id not in uptimes})
    accelerator = accelerator_prices({k for r in runs if (k := compute_key(r.accelerator_type, r.region))})
    return {
        run.pk: _gpu_hour_price(
            run,
            uptimes.get(run.cluster_id) if run.source == RunSource.CLASSIC and run.cluster_id is not None else None,
            instance,
            accelerator,
        )
        for run in runs
    }


@dataclass(frozen=True)
class _Classic:
    """A classic run's compute lines and how it is billed."""

    billed_as: str
    region: str
    lines: list[CostLine]
    runs: int
    notes: tuple[str, ...]
    gpus: bool


def _breakdown(
    run: Run,
    base: RunCost,
    intervals: list[Interval],
    classic: _Classic | None,
    idle_minutes: list[datetime],
    idle_rule: GpuHourPrice,
) -> RunBreakdown:
    reasons = list(base.unpriced_reasons)
    day_compute: dict[date, list[Decimal]] = defaultdict(list)
    day_hours: dict[date, list[Decimal]] = defaultdict(list)
    interval_compute: dict[int, tuple[Decimal, Decimal, Decimal]] = {}
    if classic is None:
        billed_as = f"{run.num_accelerators} x {run.accelerator_type or 'unknown'} accelerator-hours"
        for attempt in base.attempts:
            interval_compute[attempt.number] = (attempt.hours, attempt.accelerator_hours, attempt.usd)
            for line in attempt.lines:
                day_compute[line.day].append(line.usd)
                day_hours[line.day].append(line.accelerator_hours)
    else:
        # The serverless engine's reasons are about accelerator prices, which classic runs do not use.
        reasons = [r for r in reasons if r.startswith("no price for egress")]
        billed_as = classic.billed_as
        per_gpu = run.num_accelerators if classic.gpus else 0
        grouped: dict[int, list[tuple[CostLine, Decimal]]] = defaultdict(list)
        for line in classic.lines:
            gpu_hours = exact_product(line.hours, per_gpu)
            day_compute[line.day].append(line.usd)
            day_hours[line.day].append(gpu_hours)
            first = intervals[0][0] if intervals else 0
            number = next((n for n, _, a, b, _ in intervals if a <= line.start < b), first)
            grouped[number].append((line, gpu_hours))
        for number, pairs in grouped.items():
            interval_compute[number] = (
                exact_sum(line.hours for line, _ in pairs), exact_sum(g for _, g in pairs),
                exact_sum(line.usd for line, _ in pairs),
            )  # fmt: skip
        if any(line.unpriced for line in classic.lines):
            reasons.append(f"no instance price for {billed_as} in {classic.region or 'this region'}")
            if not classic.region and not any(n.startswith("no region recorded") for n in classic.notes):
                reasons.append(no_region_reason(run.source))
        reasons.extend(n for n in classic.notes if not n.startswith("no instance price") and n not in reasons)

    # Idle: count minutes per (interval, day, price), then round each group's hours once.
    accel_periods = idle_rule.prices
    starts = [p.effective_from for p in accel_periods]
    groups: dict[tuple[int, date, Decimal | None], int] = defaultdict(int)
    for minute in idle_minutes:
        for number, _, start, end, _ in intervals:
            if start <= minute < end:
                price = price_in_force(accel_periods, starts, minute)
                groups[(number, utc(minute).date(), price.usd_per_hour if price else None)] += 1
                break
    day_idle: dict[date, list[Decimal]] = defaultdict(list)
    day_idle_hours: dict[date, list[Decimal]] = defaultdict(list)
    interval_idle: dict[int, list[tuple[Decimal, Decimal]]] = defaultdict(list)
    unpriced_idle: list[Decimal] = []
    for (number, day, usd_per_hour), count in groups.items():
        hours = idle_hours(count)
        with localcontext(EXACT):
            usd = per_unit(hours * usd_per_hour, idle_rule.per) if usd_per_hour is not None else ZERO
        if usd_per_hour is None:
            unpriced_idle.append(hours)
        day_idle[day].append(usd)
        day_idle_hours[day].append(hours)
        interval_idle[number].append((hours, usd))
    if unpriced_idle:
        reasons.append(f"idle GPU-hours without {idle_rule.what} price are counted, not priced")

    egress_by_day = {d.day: d.egress for d in base.days}
    days = tuple(
        DayBreakdown(
            day=day,
            compute=exact_sum(day_compute[day]),
            egress=egress_by_day.get(day, ZERO),
            idle=exact_sum(day_idle[day]),
            gpu_hours=exact_sum(day_hours[day]),
            idle_gpu_hours=exact_sum(day_idle_hours[day]),
        )
        for day in sorted(set(day_compute) | set(egress_by_day) | set(day_idle))
    )
    interval_costs = []
    if classic is not None and classic.runs > 1:
        billed_as = f"{billed_as}, its uptime shared by {classic.runs} runs"
    for number, label, start, end, running in intervals:
        hours, gpu_hours, usd = interval_compute.get(number, (ZERO, ZERO, ZERO))
        idle = interval_idle[number]
        interval_costs.append(
            IntervalCost(
                number=max(number, 0), label=label, start=start, end=end, running=running, hours=hours,
                gpu_hours=gpu_hours, compute=usd, idle=exact_sum(u for _, u in idle),
                idle_gpu_hours=exact_sum(h for h, _ in idle),
            )
        )  # fmt: skip
    return RunBreakdown(
        run_id=run.pk,
        classic=classic is not None,
        billed_as=billed_as,
        compute=exact_sum(d.compute for d in days),
        egress=base.egress,
        idle=exact_sum(d.idle for d in days),
        gpu_hours=exact_sum(d.gpu_hours for d in days),
        idle_gpu_hours=exact_sum(d.idle_gpu_hours for d in days),
        unpriced_idle_gpu_hours=exact_sum(unpriced_idle),
        intervals=tuple(interval_costs),
        days=days,
        unpriced_reasons=tuple(dict.fromkeys(reasons)),
        base=base,
        as_of=base.as_of,
        running=base.running or any(i[4] for i in intervals),
    )
