"""Reconciliation: the provider's billed usage against our estimates, per run and per day.

Billed usage arrives as CSV exports of Databricks `system.billing.usage`, priced by
`system.billing.list_prices` at `pricing.effective_list.default` (the price in force, a
promotion included; `pricing.default` only where a row has no effective list price), the one
in force at the record's start. Negotiated discounts are not in those tables, so "billed" here
means "at list price". Shapes: ../shared/reference/databricks-ai-runtime.md ("Serverless GPU in
the billing system table").

- A usage record belongs to a run when its `usage_metadata.job_run_id` equals the run's
  `external_id`, else (AI Runtime rows) when its `usage_metadata.ai_runtime_workload_id`
  does: whether the workload id equals the Jobs run id is not documented, so the job run id
  is tried first. Serverless and classic sources only: local runs are never billed.
- `record_type` ORIGINAL, RETRACTION (negative quantities) and RESTATEMENT rows are all kept
  and summed, which is the corrected figure.
- NETWORKING rows name `usage_metadata.source_region` / `destination_region`: the billed side
  of cross-region egress, shown per route beside the derived estimate (`BilledFigure.egress`).
- A reserved pool's rows (`ai_runtime_pool_id`, no run) are the pool's cost; each is split
  over the runs of the pool (runs linked to rows naming the same pool) by their GPU-seconds
  inside the row's window (`pool_shares`).

Imports are all or nothing: every row is parsed first, and any bad row (reported with its
line number) means nothing is written. Re-importing a file adds nothing: `record_id` is
unique and rows are inserted with conflicts ignored.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation, localcontext
from typing import IO

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from billing.choices import RecordType
from billing.costs import reports
from billing.costs.run_costs import RunBreakdown, breakdowns_for_runs
from billing.models import BilledUsage, BillingListPrice
from billing.prices.money import EXACT, ZERO, exact_sum
from billing.prices.pricebook import RowError
from runs.choices import RunOrigin, RunSource
from runs.models import Attempt, Cluster, Run

# Sources whose runs the provider bills; job_run_id is looked up among these.
BILLED_SOURCES = (RunSource.SERVERLESS, RunSource.CLASSIC)
USAGE_REQUIRED = ("usage_start_time", "usage_end_time", "sku_name", "usage_quantity")
NETWORKING = "NETWORKING"
PRICE_REQUIRED = ("sku_name", "price_start_time")
CHUNK = 1000
# Bounds of what a row may say, so that quantity x price always fits the exact columns
# (numeric(38, 15): 23 digits before the point): a usage quantity of 10^18 (an exabyte in
# bytes, a billion years in hours) and a list price of $10,000 a unit are far beyond real rows.
MAX_USAGE_QUANTITY = Decimal(10) ** 18
MAX_UNIT_PRICE = Decimal(10) ** 4
DECIMAL_PLACES = 15


@dataclass
class ImportResult:
    """What an import did; `errors` non-empty means nothing was written."""

    added: int = 0
    unchanged: int = 0
    prices_added: int = 0
    linked: int = 0
    priced: int = 0
    unpriced: int = 0
    errors: list[RowError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


# --- Parsing ----------------------------------------------------------------------------


def _when(text: str, name: str) -> datetime:
    text = text.strip()
    value = parse_datetime(text.replace(" UTC", "").replace("Z", "+00:00")) if text else None
    if value is None:
        day = parse_date(text) if text else None
        if day is None:
            raise ValueError(f"{name} {text!r} is not a date-time")
        value = datetime(day.year, day.month, day.day)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _decimal(text: str, name: str, limit: Decimal) -> Decimal:
    """A finite number of at most `limit` in size and DECIMAL_PLACES places, else a row error.

    Beyond them the exact column (numeric(38, 15)) refused the value while storing, and the
    import died with a traceback instead of naming the row (issue 33: a usage row of 1e30).
    """
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{name} {text!r} is not a number") from None
    if not value.is_finite():
        raise ValueError(f"{name} {text!r} is not a finite number")
    if abs(value) > limit:
        raise ValueError(f"{name} {text[:40]!r} is out of range (at most {limit:,} in size)")
    _sign, digits, exponent = value.as_tuple()
    trailing_zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    if value and int(exponent) + trailing_zeros < -DECIMAL_PLACES:
        raise ValueError(f"{name} {text[:40]!r} has more than {DECIMAL_PLACES} decimal places")
    return value


def _json_object(row: dict[str, str], name: str) -> dict:
    """A JSON column, or its flattened `name.key` columns as `system.billing` exports write them."""
    text = (row.get(name) or "").strip()
    if text:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"{name} is not valid JSON") from None
        if not isinstance(value, dict):
            raise ValueError(f"{name} is not a JSON object")
        return value
    prefix = f"{name}."
    return {k[len(prefix) :]: v for k, v in row.items() if k and k.startswith(prefix) and v not in ("", None)}


def _rows(source: IO[str]) -> Iterable[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(source)
    for row in reader:
        yield reader.line_num, {(k or "").strip(): (v or "") for k, v in row.items()}


def _header_errors(source_fields: list[str] | None, required: Iterable[str]) -> list[RowError]:
    missing = [name for name in required if name not in (source_fields or [])]
    return [RowError(1, f"missing column {name}") for name in missing]


def parse_list_prices(source: IO[str]) -> tuple[list[BillingListPrice], list[RowError]]:
    """List price rows from CSV: `pricing` JSON, or flattened `pricing.*` columns.

    The price is `effective_list.default` (what is charged, a promotion included), else
    `default` for rows written before the effective list price existed.
    """
    prices, errors = [], []
    lines = list(_rows(source))
    header = list(lines[0][1]) if lines else []
    if lines:
        errors += _header_errors(header, PRICE_REQUIRED)
        if "pricing" not in header and "pricing.default" not in header:
            errors.append(RowError(1, "missing column pricing (or pricing.default)"))
    if errors:
        return [], errors
    for line, row in lines:
        try:
            sku = row["sku_name"].strip()
            if not sku:
                raise ValueError("sku_name is empty")
            pricing = _json_object(row, "pricing")
            effective = pricing.get("effective_list")
            effective = (effective or {}).get("default") if isinstance(effective, dict) else None
            effective = effective or pricing.get("effective_list.default")
            if effective is None and pricing.get("default") is None:
                raise ValueError("pricing has no effective_list.default nor default price")
            price_text = str(effective if effective is not None else pricing["default"])
            end_text = row.get("price_end_time", "").strip()
            prices.append(
                BillingListPrice(
                    sku_name=sku,
                    price_start_time=_when(row["price_start_time"], "price_start_time"),
                    price_end_time=_when(end_text, "price_end_time") if end_text else None,
                    currency_code=(row.get("currency_code") or "USD").strip(),
                    usage_unit=row.get("usage_unit", "").strip(),
                    price_per_unit=_decimal(price_text, "pricing", MAX_UNIT_PRICE),
                )
            )
        except ValueError as exc:
            errors.append(RowError(line, str(exc)))
    return prices, errors


def _record_id(row: dict[str, str]) -> str:
    given = row.get("record_id", "").strip()
    if given:
        return given
    canonical = json.dumps(sorted(row.items()), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def parse_usage(source: IO[str]) -> tuple[list[BilledUsage], list[RowError]]:
    """Billed usage rows from CSV, unsaved and unlinked; every bad row with its line number."""
    records, errors = [], []
    lines = list(_rows(source))
    if lines:
        errors += _header_errors(list(lines[0][1]), USAGE_REQUIRED)
    if errors:
        return [], errors
    now = timezone.now()
    seen: dict[str, int] = {}
    for line, row in lines:
        try:
            sku = row["sku_name"].strip()
            if not sku:
                raise ValueError("sku_name is empty")
            start = _when(row["usage_start_time"], "usage_start_time")
            end = _when(row["usage_end_time"], "usage_end_time")
            if end < start:
                raise ValueError("usage_end_time is before usage_start_time")
            day_text = row.get("usage_date", "").strip()
            day = parse_date(day_text) if day_text else start.astimezone(UTC).date()
            if day is None:
                raise ValueError(f"usage_date {day_text!r} is not a date")
            metadata = _json_object(row, "usage_metadata")
            record_type = (row.get("record_type") or "").strip() or RecordType.ORIGINAL
            if record_type not in RecordType.values:
                raise ValueError(f"record_type {record_type!r} is not one of {', '.join(RecordType.values)}")
            record_id = _record_id(row)
            if record_id in seen:
                raise ValueError(f"record_id {record_id} repeats line {seen[record_id]}")
            seen[record_id] = line
            records.append(
                BilledUsage(
                    record_id=record_id,
                    sku_name=sku,
                    usage_start_time=start,
                    usage_end_time=end,
                    usage_date=day,
                    usage_quantity=_decimal(row["usage_quantity"], "usage_quantity", MAX_USAGE_QUANTITY),
                    usage_unit=row.get("usage_unit", "").strip(),
                    usage_metadata=metadata,
                    custom_tags=_json_object(row, "custom_tags"),
                    job_run_id=str(metadata.get("job_run_id") or "").strip(),
                    billing_origin_product=(row.get("billing_origin_product") or "").strip(),
                    record_type=record_type,
                    usage_type=(row.get("usage_type") or "").strip(),
                    product_features=_json_object(row, "product_features"),
                    ai_runtime_workload_id=str(metadata.get("ai_runtime_workload_id") or "").strip(),
                    ai_runtime_pool_id=str(metadata.get("ai_runtime_pool_id") or "").strip(),
                    databricks_cluster_id=str(metadata.get("cluster_id") or "").strip()[:200],
                    imported_at=now,
                )
            )
        except ValueError as exc:
            errors.append(RowError(line, str(exc)))
    return records, errors


# --- Linking and pricing ----------------------------------------------------------------


def _runs_by_external_id(job_run_ids: Iterable[str]) -> dict[str, int]:
    """job_run_id -> run id, for ids naming exactly one billed run (ambiguous ids stay unlinked)."""
    found: dict[str, list[int]] = defaultdict(list)
    ids = sorted(set(job_run_ids) - {""})
    for i in range(0, len(ids), CHUNK):
        # Only the run source collector's runs: a job_run_id is the source's id, and a run an
        # API key pushed with the same id (any team) must not receive another team's billing.
        rows = Run.objects.filter(
            external_id__in=ids[i : i + CHUNK], source__in=BILLED_SOURCES, origin=RunOrigin.COLLECTOR
        )
        for external_id, pk in rows.values_list("external_id", "pk"):
            found[external_id].append(pk)
    return {key: pks[0] for key, pks in found.items() if len(pks) == 1}


def price_in_force(prices: list[BillingListPrice], at: datetime) -> BillingListPrice | None:
    """The USD list price whose [start, end) holds `at`; the latest start wins an overlap."""
    best = None
    for price in prices:
        if price.currency_code != "USD" or price.price_start_time > at:
            continue
        if price.price_end_time is not None and price.price_end_time <= at:
            continue
        if best is None or price.price_start_time > best.price_start_time:
            best = price
    return best


def _price(records: list[BilledUsage]) -> None:
    """Set price_per_unit and billed_usd from the list price in force at each usage start."""
    skus = {r.sku_name for r in records}
    prices: dict[str, list[BillingListPrice]] = defaultdict(list)
    for listed in BillingListPrice.objects.filter(sku_name__in=skus):
        prices[listed.sku_name].append(listed)
    for record in records:
        price = price_in_force(prices[record.sku_name], record.usage_start_time)
        if price is None:
            record.price_per_unit = record.billed_usd = None
            continue
        record.price_per_unit = price.price_per_unit
        with localcontext(EXACT):
            record.billed_usd = record.usage_quantity * price.price_per_unit


def link_clusters() -> int:
    """Rows of classic clusters (`usage_metadata.cluster_id`) linked to their cluster, and to its run.

    All-purpose and job compute rows name the cluster they ran on; a job cluster's rows also
    name their job run, an all-purpose cluster's none. A row gets its cluster when the run
    source has stored it; a row still without a run then goes to the one collected run that
    had an attempt on that cluster during the row's window. When several did (a shared
    all-purpose cluster), the row stays the cluster's alone: dividing it is the estimate's
    business (`billing.costs.run_costs.share_uptime`), not the bill's. Returns the rows that
    gained a cluster or a run.
    """
    changed = 0
    pending = list(BilledUsage.objects.filter(cluster__isnull=True).exclude(databricks_cluster_id=""))
    ids = sorted({r.databricks_cluster_id for r in pending})
    clusters: dict[str, int] = {}
    for i in range(0, len(ids), CHUNK):
        rows = Cluster.objects.filter(cluster_id__in=ids[i : i + CHUNK]).values_list("cluster_id", "pk")
        clusters.update(dict(rows))
    for record in pending:
        record.cluster_id = clusters.get(record.databricks_cluster_id)
    found = [r for r in pending if r.cluster_id]
    BilledUsage.objects.bulk_update(found, ["cluster"], batch_size=CHUNK)
    changed += len(found)

    loose = list(BilledUsage.objects.filter(cluster__isnull=False, run__isnull=True))
    if not loose:
        return changed
    spans: dict[int | None, list[tuple[int, datetime, datetime | None]]] = defaultdict(list)
    attempts = Attempt.objects.filter(
        run__cluster_id__in={r.cluster_id for r in loose},
        run__source=RunSource.CLASSIC,
        run__origin=RunOrigin.COLLECTOR,
        started_at__isnull=False,
        started_at__lt=max(r.usage_end_time for r in loose),
    ).exclude(ended_at__lte=min(r.usage_start_time for r in loose))
    for cluster_pk, run_pk, started, ended in attempts.values_list(
        "run__cluster_id", "run_id", "started_at", "ended_at"
    ):
        assert started is not None  # started_at__isnull=False
        spans[cluster_pk].append((run_pk, started, ended))
    for record in loose:
        runs = {
            run_pk
            for run_pk, started, ended in spans[record.cluster_id]
            if started < record.usage_end_time and (ended is None or ended > record.usage_start_time)
        }
        if len(runs) == 1:
            record.run_id = runs.pop()
    gained = [r for r in loose if r.run_id]
    BilledUsage.objects.bulk_update(gained, ["run"], batch_size=CHUNK)
    return changed + len(gained)


def refresh_links_and_prices() -> tuple[int, int]:
    """Link unlinked records whose run has since arrived, price unpriced ones; (linked, priced).

    A record is linked by its job run id, else by its AI Runtime workload id (see the module
    docstring).
    """
    linked = priced = 0
    pending = list(BilledUsage.objects.filter(run__isnull=True).exclude(job_run_id="", ai_runtime_workload_id=""))
    runs = _runs_by_external_id([r.job_run_id for r in pending] + [r.ai_runtime_workload_id for r in pending])
    for record in pending:
        run_id = runs.get(record.job_run_id) or runs.get(record.ai_runtime_workload_id)
        if run_id:
            record.run_id = run_id
            linked += 1
    BilledUsage.objects.bulk_update([r for r in pending if r.run_id], ["run"], batch_size=CHUNK)
    linked += link_clusters()
    unpriced = list(BilledUsage.objects.filter(billed_usd__isnull=True))
    _price(unpriced)
    done = [r for r in unpriced if r.billed_usd is not None]
    BilledUsage.objects.bulk_update(done, ["price_per_unit", "billed_usd"], batch_size=CHUNK)
    priced += len(done)
    return linked, priced


def import_usage(
    usage: IO[str], prices: IO[str] | None = None, progress: Callable[[int, int], None] | None = None
) -> ImportResult:
    """Import list prices (optional) and usage records; all rows or none.

    1. Parse both files; any bad row -> errors, nothing written.
    2. In one transaction: insert list prices and records, conflicts ignored (idempotent).
    3. Link and price every record still unlinked or unpriced, so a run or a list price that
       arrives after its usage is picked up by the next import.
    """
    result = ImportResult()
    list_prices: list[BillingListPrice] = []
    if prices is not None:
        list_prices, errors = parse_list_prices(prices)
        result.errors += [RowError(e.line, f"list prices: {e.message}") for e in errors]
    records, errors = parse_usage(usage)
    result.errors += errors
    if result.errors:
        return result
    with transaction.atomic():
        before_prices = BillingListPrice.objects.count()
        BillingListPrice.objects.bulk_create(list_prices, ignore_conflicts=True, batch_size=CHUNK)
        result.prices_added = BillingListPrice.objects.count() - before_prices
        before = BilledUsage.objects.count()
        for start in range(0, len(records), CHUNK):
            BilledUsage.objects.bulk_create(records[start : start + CHUNK], ignore_conflicts=True)
            if progress is not None:
                progress(min(start + CHUNK, len(records)), len(records))
        result.added = BilledUsage.objects.count() - before
        result.unchanged = len(records) - result.added
        result.linked, result.priced = refresh_links_and_prices()
        result.unpriced = BilledUsage.objects.filter(billed_usd__isnull=True).count()
    return result


# --- Estimated vs billed ----------------------------------------------------------------


def visible_usage(team_ids: Iterable[int], staff: bool) -> QuerySet[BilledUsage]:
    """Billed usage of runs of `team_ids`; staff also see records linked to no run."""
    linked = Q(run__team_id__in=list(team_ids))
    return BilledUsage.objects.filter(linked | Q(run__isnull=True) if staff else linked)


def _difference(estimated: Decimal, billed: Decimal) -> tuple[Decimal, Decimal | None]:
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
        return _difference(self.estimated, self.billed)[0]

    @property
    def percent(self) -> Decimal | None:
        return _difference(self.estimated, self.billed)[1]


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


def run_rows(team_ids: Iterable[int], start: date, end: date, staff: bool, team_id: int | None = None) -> list[dict]:
    """One row per run with billed usage dated in [start, end]; staff also get unlinked ids.

    Estimated and billed are whole-run figures, so a run that spans the range's edge compares
    like with like.
    """
    usage = visible_usage(team_ids, staff).filter(usage_date__gte=start, usage_date__lte=end)
    if team_id:
        usage = usage.filter(run__team_id=team_id)
    run_ids = set(usage.exclude(run__isnull=True).values_list("run_id", flat=True))
    runs = list(Run.objects.filter(pk__in=run_ids).select_related("team").order_by("-submitted_at"))
    figures = per_run(runs)
    out = []
    for run in runs:
        figure = figures[run.pk]
        out.append({"run": run, "job_run_id": run.external_id, "team": run.team.name, **_figure_dict(figure)})
    if staff and not team_id:
        loose: dict[str, list] = defaultdict(list)
        for job_run_id, usd in usage.filter(run__isnull=True).values_list("job_run_id", "billed_usd"):
            loose[job_run_id].append(usd)
        for job_run_id, values in sorted(loose.items()):
            figure = BilledFigure(
                ZERO, exact_sum(v for v in values if v is not None), len(values), sum(v is None for v in values)
            )
            out.append({"run": None, "job_run_id": job_run_id or "(none)", "team": "", **_figure_dict(figure)})
    return out


def _figure_dict(figure: BilledFigure) -> dict:
    diff, percent = _difference(figure.estimated, figure.billed)
    return {
        "estimated": figure.estimated,
        "billed": figure.billed,
        "difference": diff,
        "percent": percent,
        "records": figure.records,
        "unpriced": figure.unpriced,
    }


def day_rows(team_ids: Iterable[int], start: date, end: date, staff: bool, team_id: int | None = None) -> list[dict]:
    """One row per day in [start, end] with an estimate or a bill: estimated, billed, diff, %."""
    team_ids = list(team_ids)
    filters = reports.CostFilters(start, end, team_id=team_id)
    estimated = {row["day"]: row["total_usd"] for row in reports.sum_by(reports.cost_rows(team_ids, filters), ["day"])}
    usage = visible_usage(team_ids, staff and not team_id).filter(usage_date__gte=start, usage_date__lte=end)
    if team_id:
        usage = usage.filter(run__team_id=team_id)
    billed: dict[date, list[Decimal]] = defaultdict(list)
    for day, usd in usage.values_list("usage_date", "billed_usd"):
        if usd is not None:
            billed[day].append(usd)
    out = []
    for day in sorted(set(estimated) | set(billed)):
        figure = BilledFigure(estimated.get(day, ZERO), exact_sum(billed[day]), 0, 0)
        row = _figure_dict(figure)
        del row["records"], row["unpriced"]
        out.append({"day": day, **row})
    return out
