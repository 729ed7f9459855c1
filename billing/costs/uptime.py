"""Classic cluster uptime, priced: the one place a cluster's uptime becomes money.

Classic ML runtime clusters are billed by uptime busy or idle: hours x (driver instance price
+ workers x worker instance price), from `InstancePrice` (`combined_rate`). The uptime and the
worker count come from one rule, `runs.models.uptime` (events, else `last_restarted_time`, never
`start_time`), read here by `cluster_uptime`: each piece of uptime goes to the runs running then,
and a piece with nobody running to every run of the cluster (`share_uptime`), so a cluster shared
by several runs is billed once. A cluster with no runs keeps its uptime as unattributed. The
clusters page and the run costs (`billing.costs.run_costs`) read the same `cluster_uptime`, so a
cluster's cost is its runs' shares plus its unattributed time, exactly.

Same exact-Decimal rules as `billing.prices.money`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from billing.costs.serverless import (
    CostLine,
    compute_cost,
    no_region_reason,
)
from billing.models import InstancePrice
from billing.prices.money import (
    HOURS_QUANTUM,
    ZERO,
    PricePeriod,
    exact_product,
    exact_sum,
    price_in_force,
    split_billed_hours,
    utc,
)
from runs.choices import RunSource
from runs.models import Attempt, Cluster, ClusterEvent, Run
from runs.models.uptime import UptimePiece, default_workers, uptime_pieces, worker_note

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
            price = price_in_force(periods, [p.effective_from for p in periods], at)
            if price is None:
                break
            total = exact_sum([total, exact_product(price.usd_per_hour, count)])
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
        price = price_in_force(periods, starts, seg.start)
        for n, run_id in enumerate(owners):
            hours = exact_product(each + (1 if n < extra else 0), HOURS_QUANTUM)
            usd = exact_product(hours, price.usd_per_hour) if price is not None else ZERO
            out[run_id].append(
                CostLine(
                    start=seg.start, end=seg.end, day=seg.day, hours=hours, accelerator_hours=hours,
                    usd_per_hour=price.usd_per_hour if price else None, usd=usd, unpriced=price is None,
                )
            )  # fmt: skip
    return out


# --- Database-backed --------------------------------------------------------------------


def instance_prices(keys: set[tuple[str, str]]) -> dict[tuple[str, str], list[PricePeriod]]:
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


# --- Classic cluster uptime: the one place it is priced -----------------------------------


@dataclass(frozen=True)
class ClusterUptime:
    """One cluster's uptime (`runs.models.uptime`), what it cost, and whom it is billed to.

    `shares` are the runs' parts (`share_uptime`); `unattributed` the uptime of a cluster no
    run of ours used. `cost` is their sum, exactly: the clusters page and the runs agree.
    """

    cluster: Cluster
    region: str
    driver_type: str
    worker_type: str
    pieces: tuple[UptimePiece, ...]
    shares: dict[int, tuple[CostLine, ...]]
    unattributed: tuple[CostLine, ...]
    runs: int
    notes: tuple[str, ...]
    worker_prices: tuple[PricePeriod, ...] = ()

    @property
    def cost(self) -> Decimal:
        return exact_sum([self.unattributed_cost, *(line.usd for lines in self.shares.values() for line in lines)])

    @property
    def unattributed_cost(self) -> Decimal:
        return exact_sum(line.usd for line in self.unattributed)

    @property
    def hours(self) -> Decimal:
        return exact_sum(line.hours for line in self.lines)

    @property
    def lines(self) -> list[CostLine]:
        """Every priced line: the runs' shares and the unattributed time."""
        return [*self.unattributed, *(line for lines in self.shares.values() for line in lines)]

    @property
    def unpriced(self) -> bool:
        return any(line.unpriced for line in self.lines)

    @property
    def stretches(self) -> list[tuple[datetime, datetime]]:
        """The pieces merged back into stretches of uptime."""
        out: list[tuple[datetime, datetime]] = []
        for piece in self.pieces:
            if out and out[-1][1] == piece.start:
                out[-1] = (out[-1][0], piece.end)
            else:
                out.append((piece.start, piece.end))
        return out

    @property
    def billed_as(self) -> str:
        counts = sorted({p.workers for p in self.pieces}) or [default_workers(self.cluster)[0]]
        workers = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        estimated = " (estimated)" if any(p.estimated for p in self.pieces) else ""
        return f"{self.driver_type} driver + {workers}{estimated} x {self.worker_type}"


def cluster_uptime(clusters: Iterable[Cluster], now: datetime | None = None) -> dict[int, ClusterUptime]:
    """Uptime, cost and its split among runs for each cluster, keyed by cluster pk; four queries.

    1. One query for the clusters' lifecycle events, one for their classic runs, one for
       those runs' started attempts, one for the instance prices.
    2. Uptime pieces (`runs.models.uptime.uptime_pieces`): events, else `last_restarted_time`,
       else the runs' attempts; each piece with its worker count.
    3. Each piece priced at driver + workers x worker (`combined_rate`) and shared among the
       runs running then (`share_uptime`); with no runs it stays unattributed.
    """
    clusters = [c for c in clusters if c is not None]
    as_of = utc(now or timezone.now(), "now")
    if not clusters:
        return {}
    events: dict[int, list[ClusterEvent]] = defaultdict(list)
    for event in ClusterEvent.objects.filter(cluster__in=clusters).only("cluster_id", "ts", "kind", "details"):
        events[event.cluster_id].append(event)
    members: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for run_id, cluster_id, region in (
        Run.objects.filter(cluster__in=clusters, source=RunSource.CLASSIC)
        .order_by("pk")
        .values_list("pk", "cluster_id", "region")
    ):
        members[cluster_id].append((run_id, region))
    spans: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    member_ids = [run_id for rows in members.values() for run_id, _ in rows]
    rows = Attempt.objects.filter(run_id__in=member_ids, started_at__isnull=False)
    for run_id, start, ended in rows.values_list("run_id", "started_at", "ended_at"):
        assert start is not None  # started attempts only
        spans[run_id].append((start, min(ended or as_of, as_of)))

    regions = {c.pk: c.region or next((r for _, r in members[c.pk] if r), "") for c in clusters}
    keys: set[tuple[str, str]] = set()
    for c in clusters:
        keys |= {(c.node_type_id, regions[c.pk]), (c.driver_node_type_id or c.node_type_id, regions[c.pk])}
    prices = instance_prices(keys)

    out = {}
    for c in clusters:
        region, driver_type = regions[c.pk], c.driver_node_type_id or c.node_type_id
        ids = [run_id for run_id, _ in members[c.pk]]
        run_spans = {run_id: spans[run_id] for run_id in ids}
        pieces = uptime_pieces(c, events[c.pk], as_of, [s for r in ids for s in run_spans[r]])
        driver, worker = prices[(driver_type, region)], prices[(c.node_type_id, region)]
        shares: dict[int, list[CostLine]] = {run_id: [] for run_id in ids}
        unattributed: list[CostLine] = []
        for piece in pieces:
            rate = combined_rate(driver, worker, piece.workers)
            if ids:
                for run_id, lines in share_uptime(piece.start, piece.end, rate, run_spans).items():
                    shares[run_id].extend(lines)
            else:
                unattributed.extend(compute_cost(piece.start, piece.end, 1, rate))
        uptime = ClusterUptime(
            cluster=c, region=region, driver_type=driver_type, worker_type=c.node_type_id, pieces=tuple(pieces),
            shares={r: tuple(lines) for r, lines in shares.items()}, unattributed=tuple(unattributed), runs=len(ids),
            notes=(), worker_prices=tuple(worker),
        )  # fmt: skip
        notes = []
        if uptime.unpriced:
            where = region or "this region"
            notes.append(f"no instance price for {uptime.billed_as} in {where} for part of the uptime")
            if not region:
                notes.append(no_region_reason(RunSource.CLASSIC, "cluster"))
        if any(p.estimated for p in pieces):
            notes.append(worker_note(c, pieces))
        if any(p.from_attempts for p in pieces) and not _job_cluster(c):
            notes.append(
                "no lifecycle events and no last_restarted_time: uptime counted only while its runs ran (a lower bound)"
            )
        out[c.pk] = replace(uptime, notes=tuple(notes))
    return out


def _job_cluster(cluster: Cluster) -> bool:
    """A job cluster (`cluster_source` JOB): it lives for its run, so the run's window is its uptime.

    A Jobs task's `start_time` is "the time the cluster creation call is issued" when the
    task runs on a new cluster (databricks-sdk `jobs.RunTask.start_time`), and its end the
    cluster's teardown: billing it for its run's attempts is no lower bound.
    """
    raw = cluster.raw if isinstance(cluster.raw, dict) else {}
    return raw.get("cluster_source") == "JOB"
