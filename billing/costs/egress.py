"""Egress records: stored when a source reports them, derived when a cross-region run reports none.

Reported records (`POST /api/v1/egress`) are idempotent on (run, source, destination, ts):
the same record again is a duplicate, the same key with other bytes a conflict, and nothing of
a batch is stored when any row conflicts.

Derived records estimate what a run whose GPUs ran outside its home region moved across
regions, from the network counters MLflow logs as system metrics on every node
(`system/[node_id/]network_receive_megabytes`, `..._transmit_megabytes`, decimal MB; see
shared/reference/mlflow-system-metrics.md). Bytes a node received came from the home region
(the run's data lives there): egress home -> GPU region. Bytes it sent went back (checkpoints,
artifacts): egress GPU region -> home. That counts all of a node's traffic as crossing
regions, so the estimate is an upper bound; a reported record for a run replaces every
derived one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from billing.choices import EgressOrigin
from billing.models import EgressRecord
from billing.prices.money import utc_midnight
from runs.models import MetricPoint, Run
from runs.models.collection import NETWORK_COUNTER, is_network_counter

BYTES_PER_MB = 10**6
SECONDS_PER_DAY = 86_400
# The most a bigint column (EgressRecord.bytes) holds.
MAX_STORED_BYTES = 2**63 - 1


def max_bytes_per_day(num_accelerators: int) -> int:
    """The most bytes a run's GPUs could move out in one UTC day: the egress bound.

    num_accelerators x AIRBOARD_MAX_EGRESS_GBITS_PER_GPU / 8 x 86,400 s. The default, 50 Gbit/s
    a GPU, is an 8-GPU node's north/south network, two 200 GbE ports, the one that carries
    traffic leaving the cluster (NVIDIA HGX AI Factory reference architecture, "Network Logical
    Architecture": docs.nvidia.com/reference-architectures/hgx-ai-factory-h100-h200-b200/
    network-logical-architecture). No node sends more than its ports' line rate, so no day of
    a run moves more; capped at what the bytes column holds. Reported records past it are
    refused, derived ones cut to it.
    """
    per_gpu = settings.AIRBOARD_MAX_EGRESS_GBITS_PER_GPU * 10**9 // 8 * SECONDS_PER_DAY
    return min(max(num_accelerators, 1) * per_gpu, MAX_STORED_BYTES)


class EgressImplausible(Exception):
    """Records that would make a run's day move more bytes than its GPUs could; `rows` names them."""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        super().__init__(f"{len(rows)} record(s) exceed what the run's GPUs could move in a day")
        self.rows = rows


class EgressConflict(Exception):
    """Records already stored under the same key with other bytes; `rows` names them."""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        super().__init__(f"{len(rows)} record(s) are already stored with other bytes")
        self.rows = rows


@dataclass(frozen=True)
class EgressRow:
    """One reported record, validated: run id, regions, bytes and an aware UTC time."""

    run_id: int
    source_region: str
    destination_region: str
    num_bytes: int
    ts: datetime


@dataclass
class StoreResult:
    inserted: int = 0
    duplicates: int = 0


def store_reported(rows: Sequence[EgressRow], now: datetime | None = None) -> StoreResult:
    """Store reported records idempotently; raise EgressConflict, storing nothing, on a changed record.

    1. Read the stored reported records with the batch's keys (one query per 500 runs).
    2. A row whose key is stored with the same bytes is a duplicate; with other bytes, a
       conflict. Two rows of the batch with one key but other bytes conflict with each other.
    3. In one transaction: insert the new rows (conflict-ignoring, for a racing twin), drop
       the derived records of those runs (reported figures replace the estimate), and touch
       the runs' `updated_at` so the next cost rollup rewrites their days.
    """
    stamp = now or timezone.now()
    keyed: dict[tuple, tuple[int, EgressRow]] = {}
    problems: list[dict[str, str]] = []
    for i, row in enumerate(rows):
        key = (row.run_id, row.source_region, row.destination_region, row.ts.astimezone(UTC))
        twin = keyed.get(key)
        if twin is not None and twin[1].num_bytes != row.num_bytes:
            problems.append(
                {"field": f"records[{i}].bytes", "message": f"records[{twin[0]}] has the same run, regions and ts"}
            )
        keyed.setdefault(key, (i, row))
    run_ids = sorted({row.run_id for row in rows})
    stored: dict[tuple, int] = {}
    for i in range(0, len(run_ids), 500):
        found = EgressRecord.objects.filter(run_id__in=run_ids[i : i + 500], origin=EgressOrigin.REPORTED)
        for run_id, source, destination, ts, num_bytes in found.values_list(
            "run_id", "source_region", "destination_region", "ts", "bytes"
        ):
            stored[(run_id, source, destination, ts.astimezone(UTC))] = num_bytes
    new: list[EgressRow] = []
    result = StoreResult()
    for key, (i, row) in keyed.items():
        if key not in stored:
            new.append(row)
        elif stored[key] == row.num_bytes:
            result.duplicates += 1
        else:
            problems.append(
                {
                    "field": f"records[{i}].bytes",
                    "message": f"already stored with {stored[key]} bytes, not {row.num_bytes}",
                }
            )
    result.duplicates += len(rows) - len(keyed)
    if problems:
        raise EgressConflict(problems)
    fresh = {id(row) for row in new}
    _check_daily_bound(stored, [(i, row) for i, row in keyed.values() if id(row) in fresh])
    with transaction.atomic():
        EgressRecord.objects.bulk_create(
            [
                EgressRecord(
                    run_id=r.run_id, source_region=r.source_region, destination_region=r.destination_region,
                    bytes=r.num_bytes, ts=r.ts, origin=EgressOrigin.REPORTED,
                )
                for r in new
            ],
            batch_size=1000, ignore_conflicts=True,
        )  # fmt: skip
        if new:
            EgressRecord.objects.filter(run_id__in=run_ids, origin=EgressOrigin.DERIVED).delete()
            Run.objects.filter(pk__in=run_ids).update(updated_at=stamp)
    result.inserted = len(new)
    return result


def _check_daily_bound(stored: dict[tuple, int], new: list[tuple[int, EgressRow]]) -> None:
    """Raise EgressImplausible when a run's reported bytes of a UTC day, stored and new, pass `max_bytes_per_day`."""
    if not new:
        return
    gpus = dict(Run.objects.filter(pk__in={row.run_id for _, row in new}).values_list("pk", "num_accelerators"))
    totals: dict[tuple[int, date], int] = defaultdict(int)
    for (run_id, _, _, ts), num_bytes in stored.items():
        totals[(run_id, ts.date())] += num_bytes
    problems = []
    for i, row in new:
        day = (row.run_id, row.ts.astimezone(UTC).date())
        totals[day] += row.num_bytes
        bound = max_bytes_per_day(gpus.get(row.run_id, 1))
        if totals[day] > bound:
            problems.append(
                {
                    "field": f"records[{i}].bytes",
                    "message": f"the run's records of {day[1]} would total {totals[day]} bytes, more than its "
                    f"{gpus.get(row.run_id, 1)} GPUs could move in a day ({bound} bytes at "
                    f"{settings.AIRBOARD_MAX_EGRESS_GBITS_PER_GPU} Gbit/s each)",
                }
            )
    if problems:
        raise EgressImplausible(problems)


# --- Derived from network metrics -----------------------------------------------------------


def counter_increments(points: Iterable[tuple[datetime, float | None]]) -> dict[date, tuple[int, datetime]]:
    """Bytes a cumulative MB counter grew by, per UTC day of the later point, with that day's last time.

    1. Points in time order; missing values are skipped.
    2. The first point is a baseline, not an increment: older MLflow logs the counter since
       the machine booted, newer MLflow since monitoring began, and only growth is traffic
       the run made in both.
    3. A drop (a new attempt, a restarted monitor) starts a new baseline at the lower value.
    4. Growth is converted from decimal MB to bytes and rounded to the byte, at most
       MAX_STORED_BYTES a day (a pushed counter of 1e308 is no overflow).
    """
    out: dict[date, tuple[int, datetime]] = {}
    previous: float | None = None
    for ts, value in points:
        if value is None:
            continue
        if previous is not None and value > previous:
            day = ts.astimezone(UTC).date()
            num_bytes, _ = out.get(day, (0, ts))
            # A counter of 1e308 MB grows by an infinity of bytes in floats: held at what a bigint holds.
            grown = (value - previous) * BYTES_PER_MB
            grown_bytes = round(grown) if math.isfinite(grown) and grown < MAX_STORED_BYTES else MAX_STORED_BYTES
            out[day] = (min(num_bytes + grown_bytes, MAX_STORED_BYTES), ts)
        previous = value
    return out


def derive_for_runs(
    run_ids: Iterable[int], now: datetime | None = None, days: dict[int, set[date]] | None = None
) -> int:
    """Recompute the derived egress records of the given runs; returns how many runs changed.

    1. Keep the runs that ran outside their home region and have no reported record.
    2. Read their network counters (one query), add each series' growth per UTC day
       (`counter_increments`), and sum the series of every node: receive is egress
       home -> GPU region, transmit GPU region -> home. A day's record is stamped with the
       last counter time of that day. With `days` (run id -> UTC days, what a batch of new
       points touched), only those days are read, each series starting from its last value
       before them, so a long run's history is not re-read on every batch.
    3. Where the result differs from what is stored (for those days), replace the run's
       derived records and touch its `updated_at` so the cost rollup rewrites the days
       involved. A run that stopped being cross-region loses its derived records.
    """
    ids = sorted(set(run_ids))
    if not ids:
        return 0
    stamp = now or timezone.now()
    runs = {
        run.pk: run
        for run in Run.objects.filter(pk__in=ids).exclude(region="").exclude(home_region="")
        .exclude(region=F("home_region")).only("pk", "region", "home_region", "num_accelerators")
    }  # fmt: skip
    reported = set(
        EgressRecord.objects.filter(run_id__in=list(runs), origin=EgressOrigin.REPORTED).values_list(
            "run_id", flat=True
        )
    )
    candidates = [run_id for run_id in runs if run_id not in reported]
    series = _network_series(candidates, days)
    wanted: dict[int, set[tuple[str, str, datetime, int]]] = {run_id: set() for run_id in ids}
    totals: dict[tuple[int, str, date], list] = {}
    for (run_id, key), values in series.items():
        direction = NETWORK_COUNTER.match(key)["direction"]  # type: ignore[index]
        for day, (num_bytes, last) in counter_increments(values).items():
            if days is not None and day not in days.get(run_id, ()):
                continue  # the baseline point's own day
            entry = totals.setdefault((run_id, direction, day), [0, last])
            entry[0] += num_bytes
            entry[1] = max(entry[1], last)
    for (run_id, direction, _), (num_bytes, last) in totals.items():
        run = runs[run_id]
        pair = (run.home_region, run.region) if direction == "receive" else (run.region, run.home_region)
        if num_bytes > 0:
            # Each way at most half the day's bound: a counter of 1e30 MB is not 1e36 bytes of egress.
            num_bytes = min(num_bytes, max_bytes_per_day(run.num_accelerators) // 2)
            wanted[run_id].add((*pair, last.astimezone(UTC), num_bytes))
    stored_rows = EgressRecord.objects.filter(run_id__in=ids, origin=EgressOrigin.DERIVED)
    if days is not None:
        stored_rows = stored_rows.filter(_in_days(days))
    stored: dict[int, set[tuple[str, str, datetime, int]]] = {run_id: set() for run_id in ids}
    for run_id, source, destination, ts, num_bytes in stored_rows.values_list(
        "run_id", "source_region", "destination_region", "ts", "bytes"
    ):
        stored[run_id].add((source, destination, ts.astimezone(UTC), num_bytes))
    changed = [run_id for run_id in ids if wanted[run_id] != stored[run_id]]
    if not changed:
        return 0
    with transaction.atomic():
        stale = EgressRecord.objects.filter(run_id__in=changed, origin=EgressOrigin.DERIVED)
        (stale.filter(_in_days(days)) if days is not None else stale).delete()
        EgressRecord.objects.bulk_create(
            [
                EgressRecord(
                    run_id=run_id, source_region=source, destination_region=destination, bytes=num_bytes, ts=ts,
                    origin=EgressOrigin.DERIVED,
                )
                for run_id in changed
                for source, destination, ts, num_bytes in wanted[run_id]
            ],
            batch_size=1000,
        )  # fmt: skip
        Run.objects.filter(pk__in=changed).update(updated_at=stamp)
    return len(changed)


def rederive_where_region_changed(run_ids: Iterable[int], now: datetime | None = None) -> int:
    """Derive in full only the changed runs whose derived records no longer fit their regions.

    The rollup pass calls this for every run changed since its cursor, and a running run
    changes every minute: re-reading each one's whole network history would cost millions of
    rows a pass. New points are already derived by their batch (`derive_for_runs` with
    `days`); what a pass must catch is a run whose regions changed under its records:
    1. a cross-region run (no reported egress) with no derived record yet, or with one whose
       pair is not home -> GPU region or back (its GPU region was corrected);
    2. a run with derived records that is no longer cross-region, or now reports egress.
    Two queries, then `derive_for_runs` on just those runs.
    """
    ids = sorted(set(run_ids))
    if not ids:
        return 0
    runs = Run.objects.filter(pk__in=ids).values_list("pk", "home_region", "region")
    regions = {pk: (home, region) for pk, home, region in runs}
    origins: dict[int, set[str]] = defaultdict(set)
    pairs: dict[int, set[tuple[str, str]]] = defaultdict(set)
    records = EgressRecord.objects.filter(run_id__in=ids)
    for run_id, origin, source, destination in records.values_list(
        "run_id", "origin", "source_region", "destination_region"
    ).distinct():
        origins[run_id].add(origin)
        if origin == EgressOrigin.DERIVED:
            pairs[run_id].add((source, destination))
    due = []
    for run_id, (home, region) in regions.items():
        estimated = bool(home and region and home != region) and EgressOrigin.REPORTED not in origins[run_id]
        fitting = {(home, region), (region, home)}
        stale = not pairs[run_id] or not pairs[run_id] <= fitting if estimated else bool(pairs[run_id])
        if stale:
            due.append(run_id)
    return derive_for_runs(due, now=now) if due else 0


def _in_days(days: dict[int, set[date]]) -> Q:
    """Rows of each run whose `ts` falls on one of that run's days."""
    found = Q(pk__in=[])
    for run_id, run_days in days.items():
        for day in run_days:
            found |= Q(run_id=run_id, ts__gte=utc_midnight(day), ts__lt=utc_midnight(day) + timedelta(days=1))
    return found


def _network_series(
    run_ids: list[int], days: dict[int, set[date]] | None
) -> dict[tuple[int, str], list[tuple[datetime, float | None]]]:
    """The network counter series of the runs, in time order: all of them, or only `days`.

    With `days`, each series is read from the earliest to the latest of its run's days, with
    its last point before them first: the baseline its first increment is measured from (one
    query per series).
    """
    series: dict[tuple[int, str], list[tuple[datetime, float | None]]] = defaultdict(list)
    network = Q(key__startswith="system/") & Q(key__contains="network_")
    points = MetricPoint.objects.filter(network, run_id__in=run_ids)
    if days is not None:
        # From the first to the last day asked for, so an increment is never measured across
        # a day that was left out; days in between are read but not rewritten.
        spans = Q(pk__in=[])
        for run_id in run_ids:
            if days.get(run_id):
                first, last = utc_midnight(min(days[run_id])), utc_midnight(max(days[run_id])) + timedelta(days=1)
                spans |= Q(run_id=run_id, ts__gte=first, ts__lt=last)
        points = points.filter(spans)
    for run_id, key, ts, value in points.order_by("run_id", "key", "ts", "step").values_list(
        "run_id", "key", "ts", "value"
    ):
        if is_network_counter(key):
            series[(run_id, key)].append((ts, value))
    if days is not None:
        for (run_id, key), values in series.items():
            before = (
                MetricPoint.objects.filter(run_id=run_id, key=key, ts__lt=utc_midnight(min(days[run_id])))
                .exclude(value__isnull=True)
                .order_by("-ts", "-step")
                .values_list("ts", "value")
                .first()
            )
            if before is not None:
                values.insert(0, before)
    return series
