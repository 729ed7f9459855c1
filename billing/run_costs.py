"""Run costs beyond the serverless rule: classic cluster uptime, idle GPUs, per-day breakdowns.

`billing.costs` prices serverless runs (accelerator-hours) and egress. This module adds:

- Classic ML runtime clusters, billed by uptime busy or idle: hours x (driver instance price
  + workers x worker instance price), from `InstancePrice`. A run with a cluster that has a
  recorded `start_time` is billed its share of the cluster's uptime (start to termination, or
  to now): each stretch goes to the runs running then, and a stretch with nobody running to
  every run of the cluster (`share_uptime`), so a cluster shared by several runs is billed
  once; otherwise for its attempts. A classic run without a cluster is billed as `instance_type` x
  ceil(num_accelerators / gpus_per_node) nodes for its attempts.
- Idle cost ("GPUs held but idle"): GPU-minutes whose `utilization_gpu_max` is below
  `AIRBOARD_IDLE_UTILIZATION_PERCENT` while the run was billed, priced at the run's
  accelerator-hour price. Idle cost is a part of compute cost, not an addition to it.

Egress is priced from `EgressRecord` rows, reported or derived (`billing.egress`). Same
exact-Decimal rules as `billing.costs`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, localcontext

from django.conf import settings
from django.utils import timezone

from billing.costs import (
    _EXACT,
    HOURS_QUANTUM,
    ZERO,
    CostLine,
    PricePeriod,
    RunCost,
    _accelerator_prices,
    _compute_key,
    _exact_sum,
    _hours_from_microseconds,
    _price_in_force,
    _utc,
    compute_cost,
    estimate_costs_for_runs,
    split_billed_hours,
)
from billing.models import InstancePrice
from runs.choices import RunSource
from runs.models import Attempt, Cluster, GpuMinute, Run

_MICROSECONDS_PER_MINUTE = 60_000_000


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
        return _exact_sum([self.compute, self.egress])


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

    @property
    def total(self) -> Decimal:
        return _exact_sum([self.compute, self.egress])


# --- Pure helpers -----------------------------------------------------------------------


def combined_rate(driver: list[PricePeriod] | None, workers: list[PricePeriod], num_workers: int) -> list[PricePeriod]:
    """Hourly rate of a cluster: driver price + num_workers x worker price, as price periods.

    1. The rate can only change where either price changes: take the union of their starts.
    2. At each start, the price in force of each part; a needed part not yet priced means the
       cluster is not priced there (so no period starts before every needed part has a price).
    3. Prices never end, so once every part is priced the rate is defined from then on.
    """
    parts: list[tuple[list[PricePeriod], int]] = []
    if driver is not None:
        parts.append((driver, 1))
    if num_workers:
        parts.append((workers, num_workers))
    if not parts:
        return []
    starts = sorted({p.effective_from for periods, _ in parts for p in periods})
    rate: list[PricePeriod] = []
    for at in starts:
        total = ZERO
        for periods, count in parts:
            price = _price_in_force(periods, [p.effective_from for p in periods], at)
            if price is None:
                break
            with localcontext(_EXACT):
                total += price.usd_per_hour * count
        else:
            rate.append(PricePeriod(at, total))
    return rate


def share_uptime(
    start: datetime,
    end: datetime,
    rate: Sequence[PricePeriod],
    attempts: dict[int, list[tuple[datetime, datetime]]],
) -> dict[int, list[CostLine]]:
    """Split one cluster's uptime [start, end) and its cost among the runs that used it, exactly.

    1. Cut the uptime at every price change, every UTC midnight and every attempt start and
       end inside it (`split_billed_hours`): the pieces' hours add up to the uptime's.
    2. A piece belongs to the runs with an attempt running through it. A piece with none (the
       cluster up, nobody running) belongs to every run of the cluster: it was kept up for them.
    3. A piece's hours are divided among its owners in whole quanta of 1e-9 h: each gets the
       same share, and the few quanta left over go one each to the owners with the lowest run
       ids. No hour is lost or counted twice, so the runs' shares add up to the cluster's cost.
    4. Each share is priced at the rate in force at the piece's start.
    """
    periods = sorted(rate, key=lambda p: p.effective_from)
    starts = [p.effective_from for p in periods]
    owners_all = sorted(attempts)
    cuts = [*starts, *(t for spans in attempts.values() for span in spans for t in span)]
    out: dict[int, list[CostLine]] = {run_id: [] for run_id in owners_all}
    if not owners_all:
        return out
    for seg in split_billed_hours(start, end, cuts):
        owners = [r for r in owners_all if any(a <= seg.start < b for a, b in attempts[r])] or owners_all
        quanta = int(seg.hours / HOURS_QUANTUM)
        each, extra = divmod(quanta, len(owners))
        price = _price_in_force(periods, starts, seg.start)
        for n, run_id in enumerate(owners):
            with localcontext(_EXACT):
                hours = (each + (1 if n < extra else 0)) * HOURS_QUANTUM
                usd = hours * price.usd_per_hour if price is not None else ZERO
            out[run_id].append(
                CostLine(
                    start=seg.start, end=seg.end, day=seg.day, hours=hours, accelerator_hours=hours,
                    usd_per_hour=price.usd_per_hour if price else None, usd=usd, unpriced=price is None,
                )
            )  # fmt: skip
    return out


def idle_hours(minutes: int) -> Decimal:
    """GPU-hours of `minutes` GPU-minutes, rounded half-even to 1e-9 h as all hours are."""
    return _hours_from_microseconds(minutes * _MICROSECONDS_PER_MINUTE)


def _nodes(run: Run) -> int:
    per_node = max(run.gpus_per_node, 1)
    return max(-(-run.num_accelerators // per_node), 1)


# --- Database-backed --------------------------------------------------------------------


def _instance_prices(keys: set[tuple[str, str]]) -> dict[tuple[str, str], list[PricePeriod]]:
    """Price periods per (instance type, region) in one query; a region's own rows win over blank ones."""
    found: dict[tuple[str, str], list[PricePeriod]] = {key: [] for key in keys}
    if not keys:
        return found
    rows = InstancePrice.objects.filter(instance_type__in={t for t, _ in keys}).order_by("effective_from")
    by_region: dict[tuple[str, str], list[PricePeriod]] = defaultdict(list)
    for instance_type, region, effective_from, usd in rows.values_list(
        "instance_type", "region", "effective_from", "usd_per_hour"
    ):
        by_region[(instance_type, region)].append(PricePeriod(effective_from, usd))
    for instance_type, region in keys:
        found[(instance_type, region)] = by_region.get((instance_type, region)) or by_region.get(
            (instance_type, ""), []
        )
    return found


def _intervals(
    run: Run, attempts: list[Attempt], cluster: Cluster | None, as_of: datetime
) -> list[tuple[int, str, datetime, datetime, bool]]:
    if cluster is not None and cluster.start_time is not None:
        end = min(cluster.terminated_time or as_of, as_of)
        return [(0, "cluster uptime", cluster.start_time, end, cluster.terminated_time is None)]
    out = []
    for attempt in attempts:
        end = attempt.ended_at or as_of
        out.append((attempt.number, f"attempt {attempt.number}", attempt.started_at, end, attempt.ended_at is None))
    return out


def breakdowns_for_runs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunBreakdown]:
    """Per-run cost with classic clusters and idle GPUs, in a constant number of queries.

    1. The serverless engine (`estimate_costs_for_runs`) prices attempts and egress.
    2. One query for the clusters of classic runs, one for their instance prices, and one
       for their attempts; classic compute replaces the serverless compute of those runs.
    3. One query for the idle GPU-minutes of all runs and one for accelerator prices; a
       minute counts while the run was billed (inside an interval) and is priced at the
       run's accelerator price in force at that minute.
    4. Fold compute, egress and idle into intervals and UTC days.
    """
    runs = list(runs)
    as_of = _utc(now or timezone.now(), "now")
    base = estimate_costs_for_runs(runs, now=as_of)
    classic = [run for run in runs if run.source == RunSource.CLASSIC]
    clusters = {c.pk: c for c in Cluster.objects.filter(pk__in={r.cluster_id for r in classic if r.cluster_id})}

    attempts: dict[int, list[Attempt]] = defaultdict(list)
    rows = Attempt.objects.filter(run_id__in=[r.pk for r in runs], started_at__isnull=False).order_by("number")
    for attempt in rows.only("run_id", "number", "started_at", "ended_at"):
        attempts[attempt.run_id].append(attempt)

    plans: dict[int, tuple[str, str | None, str, int, str]] = {}
    keys: set[tuple[str, str]] = set()
    for run in classic:
        cluster = clusters.get(run.cluster_id) if run.cluster_id else None
        if cluster is not None:
            worker_type = cluster.node_type_id
            driver_type = cluster.driver_node_type_id or worker_type
            workers = 0 if cluster.single_node else cluster.num_workers
            region = cluster.region or run.region
            label = f"{driver_type} driver + {workers} x {worker_type}"
        else:
            driver_type, worker_type, workers, region = None, run.instance_type, _nodes(run), run.region
            label = f"{workers} x {worker_type}"
        plans[run.pk] = (worker_type, driver_type, region, workers, label)
        keys |= {(worker_type, region)} | ({(driver_type, region)} if driver_type else set())
    instance_prices = _instance_prices(keys)
    shares = _cluster_shares(classic, clusters, plans, instance_prices, as_of)

    threshold = settings.AIRBOARD_IDLE_UTILIZATION_PERCENT
    idle_minutes: dict[int, list[datetime]] = defaultdict(list)
    idle_rows = GpuMinute.objects.filter(run_id__in=[r.pk for r in runs], utilization_gpu_max__lt=threshold)
    for run_id, minute in idle_rows.values_list("run_id", "minute"):
        idle_minutes[run_id].append(minute)
    accel_keys = {k for run in runs if idle_minutes[run.pk] and (k := _compute_key(run.accelerator_type, run.region))}
    accel_prices = _accelerator_prices(accel_keys)

    out = {}
    for run in runs:
        cluster = clusters.get(run.cluster_id) if run.cluster_id and run.pk in plans else None
        intervals = _intervals(run, attempts[run.pk], cluster, as_of)
        key = _compute_key(run.accelerator_type, run.region)
        out[run.pk] = _breakdown(
            run, base[run.pk], intervals, plans.get(run.pk), instance_prices,
            idle_minutes[run.pk], accel_prices.get(key, []) if key else [], shares.get(run.pk),
        )  # fmt: skip
    return out


def _plan_rate(
    plan: tuple[str, str | None, str, int, str], instance_prices: dict[tuple[str, str], list[PricePeriod]]
) -> list[PricePeriod]:
    worker_type, driver_type, region, workers, _ = plan
    driver = instance_prices.get((driver_type, region), []) if driver_type else None
    return combined_rate(driver, instance_prices.get((worker_type, region), []), workers)


def _cluster_shares(
    classic: list[Run],
    clusters: dict[int, Cluster],
    plans: dict[int, tuple[str, str | None, str, int, str]],
    instance_prices: dict[tuple[str, str], list[PricePeriod]],
    as_of: datetime,
) -> dict[int, tuple[list[CostLine], int]]:
    """Each classic run's share of its cluster's uptime cost (`share_uptime`) and the cluster's run count.

    Two queries: the runs of those clusters (the batch may hold only some of them) and their
    started attempts. A cluster's price comes from the plan of the first run of the batch on it.
    """
    on_cluster = {r.pk: r.cluster_id for r in classic if r.cluster_id in clusters and clusters[r.cluster_id].start_time}
    if not on_cluster:
        return {}
    members: dict[int, list[int]] = defaultdict(list)
    for run_id, cluster_id in Run.objects.filter(
        cluster_id__in=set(on_cluster.values()), source=RunSource.CLASSIC
    ).values_list("pk", "cluster_id"):
        members[cluster_id].append(run_id)
    spans: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    rows = Attempt.objects.filter(run_id__in=[r for ids in members.values() for r in ids], started_at__isnull=False)
    for run_id, started, ended in rows.values_list("run_id", "started_at", "ended_at"):
        spans[run_id].append((started, ended or as_of))
    first_run: dict[int, int] = {}
    for run_id, cluster_id in on_cluster.items():
        first_run.setdefault(cluster_id, run_id)
    out: dict[int, tuple[list[CostLine], int]] = {}
    for cluster_id, first in first_run.items():
        cluster = clusters[cluster_id]
        end = min(cluster.terminated_time or as_of, as_of)
        rate = _plan_rate(plans[first], instance_prices)
        ids = members[cluster_id]
        for run_id, lines in share_uptime(cluster.start_time, end, rate, {r: spans[r] for r in ids}).items():
            out[run_id] = (lines, len(ids))
    return out


def _breakdown(
    run: Run,
    base: RunCost,
    intervals: list[tuple[int, str, datetime, datetime, bool]],
    plan: tuple[str, str | None, str, int, str] | None,
    instance_prices: dict[tuple[str, str], list[PricePeriod]],
    idle_minutes: list[datetime],
    accel_periods: list[PricePeriod],
    share: tuple[list[CostLine], int] | None = None,
) -> RunBreakdown:
    reasons = list(base.unpriced_reasons)
    day_compute: dict[date, list[Decimal]] = defaultdict(list)
    day_hours: dict[date, list[Decimal]] = defaultdict(list)
    interval_compute: dict[int, tuple[Decimal, Decimal, Decimal]] = {}
    if plan is None:
        billed_as = f"{run.num_accelerators} x {run.accelerator_type or 'unknown'} accelerator-hours"
        for attempt in base.attempts:
            interval_compute[attempt.number] = (attempt.hours, attempt.accelerator_hours, attempt.usd)
            for line in attempt.lines:
                day_compute[line.day].append(line.usd)
                day_hours[line.day].append(line.accelerator_hours)
    else:
        # The serverless engine's reasons are about accelerator prices, which classic runs do not use.
        reasons = [r for r in reasons if r.startswith("no price for egress")]
        _, _, region, _, billed_as = plan
        # A cluster's uptime is shared by the runs on it (priced in `_cluster_shares`); a run
        # alone on it gets all of it. Without a cluster, the run's own attempts are priced here.
        rate = _plan_rate(plan, instance_prices) if share is None else []
        unpriced = False
        for number, _, start, end, _ in intervals:
            lines = share[0] if share is not None else compute_cost(start, end, 1, rate)
            unpriced |= any(line.unpriced for line in lines)
            with localcontext(_EXACT):
                gpu = [line.hours * run.num_accelerators for line in lines]
            for line, hours in zip(lines, gpu, strict=True):
                day_compute[line.day].append(line.usd)
                day_hours[line.day].append(hours)
            interval_compute[number] = (
                _exact_sum(line.hours for line in lines), _exact_sum(gpu), _exact_sum(line.usd for line in lines)
            )  # fmt: skip
        if unpriced:
            reasons.append(f"no instance price for {billed_as} in {region or 'this region'}")

    # Idle: count minutes per (interval, day, price), then round each group's hours once.
    starts = [p.effective_from for p in accel_periods]
    groups: dict[tuple[int, date, Decimal | None], int] = defaultdict(int)
    for minute in idle_minutes:
        for number, _, start, end, _ in intervals:
            if start <= minute < end:
                price = _price_in_force(accel_periods, starts, minute)
                groups[(number, _utc(minute).date(), price.usd_per_hour if price else None)] += 1
                break
    day_idle: dict[date, list[Decimal]] = defaultdict(list)
    day_idle_hours: dict[date, list[Decimal]] = defaultdict(list)
    interval_idle: dict[int, list[tuple[Decimal, Decimal]]] = defaultdict(list)
    unpriced_idle: list[Decimal] = []
    for (number, day, price), count in groups.items():
        hours = idle_hours(count)
        with localcontext(_EXACT):
            usd = hours * price if price is not None else ZERO
        if price is None:
            unpriced_idle.append(hours)
        day_idle[day].append(usd)
        day_idle_hours[day].append(hours)
        interval_idle[number].append((hours, usd))
    if unpriced_idle:
        reasons.append("idle GPU-hours without an accelerator price are counted, not priced")

    egress_by_day = {d.day: d.egress for d in base.days}
    days = tuple(
        DayBreakdown(
            day=day,
            compute=_exact_sum(day_compute[day]),
            egress=egress_by_day.get(day, ZERO),
            idle=_exact_sum(day_idle[day]),
            gpu_hours=_exact_sum(day_hours[day]),
            idle_gpu_hours=_exact_sum(day_idle_hours[day]),
        )
        for day in sorted(set(day_compute) | set(egress_by_day) | set(day_idle))
    )
    interval_costs = []
    if share is not None and share[1] > 1:
        billed_as = f"{billed_as}, its uptime shared by {share[1]} runs"
    for number, label, start, end, running in intervals:
        hours, gpu_hours, usd = interval_compute.get(number, (ZERO, ZERO, ZERO))
        idle = interval_idle[number]
        interval_costs.append(
            IntervalCost(
                number=number, label=label, start=start, end=end, running=running, hours=hours,
                gpu_hours=gpu_hours, compute=usd, idle=_exact_sum(u for _, u in idle),
                idle_gpu_hours=_exact_sum(h for h, _ in idle),
            )
        )  # fmt: skip
    return RunBreakdown(
        run_id=run.pk,
        classic=plan is not None,
        billed_as=billed_as,
        compute=_exact_sum(d.compute for d in days),
        egress=base.egress,
        idle=_exact_sum(d.idle for d in days),
        gpu_hours=_exact_sum(d.gpu_hours for d in days),
        idle_gpu_hours=_exact_sum(d.idle_gpu_hours for d in days),
        unpriced_idle_gpu_hours=_exact_sum(unpriced_idle),
        intervals=tuple(interval_costs),
        days=days,
        unpriced_reasons=tuple(reasons),
        base=base,
    )
