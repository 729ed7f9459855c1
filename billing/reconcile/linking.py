"""Billed usage linked to its run (and cluster) and priced at the list price in force.

- A usage record belongs to a run when its `usage_metadata.job_run_id` equals the run's
  `external_id`, else (AI Runtime rows) when its `usage_metadata.ai_runtime_workload_id`
  does: whether the workload id equals the Jobs run id is not documented, so the job run id
  is tried first. Serverless and classic sources only: local runs are never billed.
- A classic cluster's rows go to the cluster, and to its one run running then (`link_clusters`).
- A record is priced at the list price in force at its start (`price_in_force`); negotiated
  discounts are not in the list price tables, so "billed" means "at list price".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import localcontext

from billing.models import BilledUsage, BillingListPrice
from billing.prices.money import EXACT
from runs.choices import RunOrigin, RunSource
from runs.models import Attempt, Cluster, Run

# Sources whose runs the provider bills; job_run_id is looked up among these.
BILLED_SOURCES = (RunSource.SERVERLESS, RunSource.CLASSIC)
CHUNK = 1000


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
    business (`billing.costs.uptime.share_uptime`), not the bill's. Returns the rows that
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
