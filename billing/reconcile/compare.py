"""Estimated against billed, per run: the cost engine's estimate beside the linked usage records.

- `record_type` ORIGINAL, RETRACTION and RESTATEMENT rows are summed, which is the corrected figure.
- NETWORKING rows name `usage_metadata.source_region` / `destination_region`: the billed side
  of cross-region egress, shown per route beside the derived estimate (`BilledFigure.egress`).
- A reserved pool's rows (`ai_runtime_pool_id`, no run) are the pool's cost; each is split
  over the runs of the pool (runs linked to rows naming the same pool) by their GPU-seconds
  inside the row's window (`pool_shares`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, localcontext

from django.utils import timezone

from billing.costs import reports
from billing.costs.run_costs import RunBreakdown, breakdowns_for_runs
from billing.models import BilledUsage
from billing.prices.money import EXACT, ZERO, exact_sum
from billing.reconcile.linking import CHUNK
from runs.models import Attempt, Run

NETWORKING = "NETWORKING"


def difference_and_percent(estimated: Decimal, billed: Decimal) -> tuple[Decimal, Decimal | None]:
    with localcontext(EXACT):
        diff = billed - estimated
    percent = (diff / estimated * 100).quantize(Decimal("0.1")) if estimated else None
    return diff, percent


@dataclass(frozen=True)
class BilledEgress:
    """Billed cross-region traffic of one route (NETWORKING rows), summed."""

    source_region: str
    destination_region: str
    quantity: Decimal
    usage_unit: str
    billed_usd: Decimal


@dataclass(frozen=True)
class BilledFigure:
    """A run's (or a day's) estimate next to what the provider billed, at list price.

    `billed` includes the run's share of reserved-pool rows (`pool`); `egress` lists the
    billed networking rows by route (already inside `billed`).
    """

    estimated: Decimal
    billed: Decimal
    records: int
    unpriced: int
    pool: Decimal = ZERO
    egress: tuple[BilledEgress, ...] = ()

    @property
    def difference(self) -> Decimal:
        return difference_and_percent(self.estimated, self.billed)[0]

    @property
    def percent(self) -> Decimal | None:
        return difference_and_percent(self.estimated, self.billed)[1]


def _egress_routes(rows: list[tuple[dict, Decimal, str, Decimal | None]]) -> tuple[BilledEgress, ...]:
    """NETWORKING rows (metadata, quantity, unit, usd) summed per (source, destination, unit)."""
    routes: dict[tuple[str, str, str], list[tuple[Decimal, Decimal]]] = defaultdict(list)
    for metadata, quantity, unit, usd in rows:
        key = (str(metadata.get("source_region") or ""), str(metadata.get("destination_region") or ""), unit)
        routes[key].append((quantity, usd if usd is not None else ZERO))
    return tuple(
        BilledEgress(src, dst, exact_sum(q for q, _ in values), unit, exact_sum(u for _, u in values))
        for (src, dst, unit), values in sorted(routes.items())
    )


def billed_egress(team_ids: Iterable[int], filters: reports.CostFilters) -> tuple[BilledEgress, ...]:
    """Billed cross-region egress of the teams' runs in the cost page's range, per route.

    The NETWORKING rows the run page shows (`per_run`), summed per route by the same
    `_egress_routes`: rows linked to a run of `team_ids` (a row linked to no run belongs to no
    team and is never here), dated (`usage_date`) in [start, end], under the page's run filters.
    """
    usage = BilledUsage.objects.filter(
        filters.dimensions("run__"),
        billing_origin_product=NETWORKING,
        run__team_id__in=list(team_ids),
        usage_date__gte=filters.start,
        usage_date__lte=filters.end,
    )
    rows = usage.values_list("usage_metadata", "usage_quantity", "usage_unit", "billed_usd")
    return _egress_routes([(metadata or {}, quantity, unit, usd) for metadata, quantity, unit, usd in rows])


def flows_with_billed(flows: list[dict], billed: tuple[BilledEgress, ...]) -> list[dict]:
    """The cost page's derived egress flows, each with its route's billed egress beside it.

    A flow gains `billed` (the route's BilledEgress, one per usage unit) and `billed_usd`
    (their sum, None when nothing was billed on the route); a billed route with no derived
    flow is a row of its own with no bytes.
    """
    by_route: dict[tuple[str, str], list[BilledEgress]] = defaultdict(list)
    for route in billed:
        by_route[(route.source_region, route.destination_region)].append(route)
    out = []
    for flow in flows:
        routes = by_route.pop((flow["source_region"], flow["destination_region"]), [])
        out.append(flow | {"billed": routes, "billed_usd": exact_sum(r.billed_usd for r in routes) if routes else None})
    for (source, destination), routes in sorted(by_route.items()):
        out.append(
            {
                "source_region": source,
                "destination_region": destination,
                "bytes": 0,
                "estimated_bytes": 0,
                "usd": ZERO,
                "unpriced": False,
                "billed": routes,
                "billed_usd": exact_sum(r.billed_usd for r in routes),
            }
        )
    return out


def pool_shares(run_ids: Iterable[int]) -> dict[int, Decimal]:
    """Each run's share of its reserved pools' billed rows, split by GPU-seconds.

    1. A pool's runs: runs linked to any row naming the pool (`ai_runtime_pool_id`).
    2. For each priced pool row with no run of its own: every pool run's GPU-seconds inside
       the row's [start, end) (num_accelerators x the overlap of each attempt).
    3. The row's billed_usd is split in proportion; a row no run overlaps stays unsplit
       (shown as pool cost on the reconciliation page, staff only).
    """
    pools = set(
        BilledUsage.objects.filter(run_id__in=list(run_ids))
        .exclude(ai_runtime_pool_id="")
        .values_list("ai_runtime_pool_id", flat=True)
    )
    if not pools:
        return {}
    members: dict[str, set[int]] = defaultdict(set)
    for pool, run_id in (
        BilledUsage.objects.filter(ai_runtime_pool_id__in=pools, run__isnull=False)
        .values_list("ai_runtime_pool_id", "run_id")
        .distinct()
    ):
        members[pool].add(run_id)
    all_runs = set().union(*members.values())
    gpus = dict(Run.objects.filter(pk__in=all_runs).values_list("pk", "num_accelerators"))
    windows: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    now = timezone.now()
    for run_id, start, end in Attempt.objects.filter(run_id__in=all_runs, started_at__isnull=False).values_list(
        "run_id", "started_at", "ended_at"
    ):
        assert start is not None  # started_at__isnull=False
        windows[run_id].append((start, end or now))
    shares: dict[int, list[Decimal]] = defaultdict(list)
    pool_rows = BilledUsage.objects.filter(ai_runtime_pool_id__in=pools, run__isnull=True, billed_usd__isnull=False)
    columns = ("ai_runtime_pool_id", "usage_start_time", "usage_end_time", "billed_usd")
    for pool, start, end, usd in pool_rows.values_list(*columns):
        seconds = {
            run_id: gpus.get(run_id, 0)
            * sum(max((min(e, end) - max(s, start)).total_seconds(), 0) for s, e in windows[run_id])
            for run_id in members[pool]
        }
        total = sum(seconds.values())
        if not total:
            continue
        with localcontext(EXACT):
            for run_id, value in seconds.items():
                if value:
                    shares[run_id].append(usd * Decimal(value) / Decimal(total))
    return {run_id: exact_sum(values) for run_id, values in shares.items()}


def per_run(
    runs: list[Run], now: datetime | None = None, breakdowns: dict[int, RunBreakdown] | None = None
) -> dict[int, BilledFigure]:
    """Estimated (cost engine) and billed (linked records + pool shares) per run; constant queries.

    `breakdowns`: the engine's, when the caller priced the runs already (`billing.engine.run_costs`)."""
    billed: dict[int, list[Decimal]] = defaultdict(list)
    records: dict[int, int] = defaultdict(int)
    unpriced: dict[int, int] = defaultdict(int)
    networking: dict[int, list[tuple[dict, Decimal, str, Decimal | None]]] = defaultdict(list)
    ids = [run.pk for run in runs]
    for i in range(0, len(ids), CHUNK):
        rows = BilledUsage.objects.filter(run_id__in=ids[i : i + CHUNK]).values_list(
            "run_id", "billed_usd", "billing_origin_product", "usage_metadata", "usage_quantity", "usage_unit"
        )
        for run_id, usd, product, metadata, quantity, unit in rows:
            records[run_id] += 1
            if usd is None:
                unpriced[run_id] += 1
            else:
                billed[run_id].append(usd)
            if product == NETWORKING:
                networking[run_id].append((metadata or {}, quantity, unit, usd))
    pools = pool_shares(ids) if ids else {}
    if breakdowns is None:
        breakdowns = breakdowns_for_runs(runs, now=now or timezone.now()) if runs else {}
    return {
        run.pk: BilledFigure(
            breakdowns[run.pk].total,
            exact_sum([*billed[run.pk], pools.get(run.pk, ZERO)]),
            records[run.pk],
            unpriced[run.pk],
            pools.get(run.pk, ZERO),
            _egress_routes(networking[run.pk]),
        )
        for run in runs
    }


def billed_for_run(run: Run) -> BilledFigure | None:
    """The run page's figure: None when no billed usage is linked to the run yet."""
    figure = per_run([run])[run.pk]
    return figure if figure.records else None
