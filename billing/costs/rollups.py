"""Daily cost rollups (`CostDaily`): rebuilt per UTC day from the runs that touch it.

`recompute_days(days)` is the one primitive: it prices every run overlapping those days with
the cost engine and replaces exactly those days' rows in one transaction. `refresh_changed`
works out which days need it (runs changed since a cursor, runs still running, price edits)
and is what the beat task calls every five minutes, under a lease claimed with a conditional
UPDATE so two beats at once never both write.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Min, Q
from django.utils import timezone

from billing.costs import egress, failed, figures
from billing.costs.run_costs import RUN_COST_FIELDS, DayBreakdown, breakdowns_for_runs
from billing.costs.uptime import cluster_uptime
from billing.models import (
    COST_AMOUNTS,
    AcceleratorPrice,
    AccrualBaseline,
    CostDaily,
    CostDailyTeam,
    EgressPrice,
    EgressRecord,
    InstancePrice,
    PriceChange,
    RollupState,
    RunCostSpan,
)
from billing.prices.money import ZERO, exact_sum, utc, utc_midnight
from runs.choices import RunSource
from runs.models import Attempt, Cluster, Run

STATE_NAME = "costs"
# A worker that died holding the lease gives it up after this; a pass takes seconds.
LEASE = timedelta(minutes=10)
# Run.updated_at is stamped by the writer's clock before its transaction commits, so a run
# saved just before our read may become visible just after it: re-read a little overlap. The
# same lag decides when a stored failed-run cost is still the engine's (billing.costs.failed).
CURSOR_OVERLAP = failed.SETTLE
# Runs priced per batch: bounds memory and keeps IN lists under SQLite's variable limit.
CHUNK = 2000
DIMENSIONS = ("team_id", "creator", "usage_policy_name", "experiment_name", "accelerator_type", "region")


@dataclass(frozen=True)
class RefreshResult:
    """What one `refresh_changed` pass did; `claimed` False when another worker held the lease."""

    claimed: bool
    runs: int = 0
    days: int = 0
    rows: int = 0


def _ranges(days: Iterable[date]) -> list[tuple[date, date]]:
    """Sorted days as contiguous inclusive ranges: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    out: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if out and out[-1][1] + timedelta(days=1) == day:
            out[-1] = (out[-1][0], day)
        else:
            out.append((day, day))
    return out


def days_between(start: datetime, end: datetime) -> list[date]:
    """UTC days that the half-open interval [start, end) touches."""
    start, end = utc(start), utc(end)
    if end <= start:
        return []
    last = (end - timedelta(microseconds=1)).date()
    return [start.date() + timedelta(days=n) for n in range((last - start.date()).days + 1)]


def cluster_days(clusters: Iterable[Cluster], now: datetime) -> dict[int, set[date]]:
    """UTC days each cluster was up (`billing.costs.uptime.cluster_uptime`: the one uptime rule)."""
    return {
        pk: {day for piece in uptime.pieces for day in days_between(piece.start, piece.end)}
        for pk, uptime in cluster_uptime(clusters, now=now).items()
    }


def _classic_clusters(runs: Iterable[int] | None = None) -> list[Cluster]:
    """Clusters with classic runs (of `runs`, when given): the ones whose uptime is billed to runs."""
    rows = Run.objects.filter(source=RunSource.CLASSIC, cluster__isnull=False)
    if runs is not None:
        rows = rows.filter(pk__in=list(runs))
    return list(Cluster.objects.filter(pk__in=rows.values("cluster_id")))


def runs_touching(days: Iterable[date], now: datetime | None = None) -> set[int]:
    """Ids of runs with an attempt, a cluster's uptime or an egress record on any of `days`."""
    wanted = set(days)
    attempts, egress = Q(), Q()
    for first, last in _ranges(wanted):
        begin, end = utc_midnight(first), utc_midnight(last + timedelta(days=1))
        attempts |= Q(started_at__lt=end) & (Q(ended_at__isnull=True) | Q(ended_at__gt=begin))
        egress |= Q(ts__gte=begin, ts__lt=end)
    if not attempts:
        return set()
    ids = set(Attempt.objects.filter(attempts, started_at__isnull=False).values_list("run_id", flat=True))
    ids |= set(EgressRecord.objects.filter(egress).values_list("run_id", flat=True))
    up = [pk for pk, up_days in cluster_days(_classic_clusters(), now or timezone.now()).items() if up_days & wanted]
    ids |= set(Run.objects.filter(cluster_id__in=up, source=RunSource.CLASSIC).values_list("pk", flat=True))
    return ids


def recompute_days(days: Iterable[date], now: datetime | None = None) -> int:
    """Rebuild the CostDaily rows of exactly `days`; returns the number of rows written.

    1. Find the runs touching any of the days (`runs_touching`).
    2. Price them in chunks with `breakdowns_for_runs` (running runs accrue to `now`) and
       add each run's lines for the wanted days into its dimension tuple, exactly.
    3. Sum those rows per (day, team) into the `CostDailyTeam` summary, exactly.
    4. Store the failed runs' failed-attempt cost from the same breakdowns (`failed.cache`).
    5. In one transaction, delete those days' rows of both tables and insert the new ones,
       and record each priced run's span of days (`RunCostSpan`). Rows of other days are
       never touched. Two passes racing on the same day cannot both insert: the named
       unique constraints refuse the second.

    A repair: it leaves the accrual baseline and the pass time (`refresh_changed` keeps those
    with the rollups), so days running runs touch are counted right again at the next pass.
    """
    return _recompute(days, now or timezone.now())[0]


def _recompute(days: Iterable[date], as_of: datetime, keep: set[int] | None = None) -> tuple[int, set[int]]:
    """`recompute_days`, also returning the ids of the runs it priced.

    `keep` (the pass's accruing runs): their lines as written are stored as the accrual
    baseline (`AccrualBaseline`), replacing every earlier row, in the same transaction.
    """
    wanted = set(days)
    if not wanted:
        if keep is not None:
            with transaction.atomic():
                _passed(as_of)
                AccrualBaseline.objects.all().delete()
        return 0, set()
    run_ids = sorted(runs_touching(wanted, as_of))
    sums: dict[tuple, dict[str, list[Decimal]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[tuple, int] = defaultdict(int)
    unpriced: dict[tuple, dict[str, None]] = defaultdict(dict)
    spans: dict[int, tuple[date, date]] = {}
    baseline: list[AccrualBaseline] = []
    book = failed.price_book()
    for i in range(0, len(run_ids), CHUNK):
        # What the settled runs' figures rest on, as of before they are read and priced.
        seen = figures.versions(run_ids[i : i + CHUNK])
        runs = list(Run.objects.filter(pk__in=run_ids[i : i + CHUNK]).only(*RUN_COST_FIELDS))
        breakdowns = breakdowns_for_runs(runs, now=as_of)
        # The failed runs' failed-attempt cost, from the same breakdowns, for the failures overview.
        failed.cache(breakdowns, as_of, book)
        # And the settled runs' figures, for the run list's CSV.
        figures.cache(breakdowns, as_of, seen, book)
        for run in runs:
            dims = tuple(getattr(run, name) or "" for name in DIMENSIONS)
            run_days = breakdowns[run.pk].days
            if run_days:
                spans[run.pk] = (run_days[0].day, run_days[-1].day)
            for day_line in run_days:
                if day_line.day not in wanted:
                    continue
                key = (day_line.day, *dims)
                counts[key] += 1
                unpriced[key].update(dict.fromkeys(breakdowns[run.pk].unpriced_reasons))
                for name in _LINE_AMOUNTS:
                    sums[key][name].append(getattr(day_line, name))
                if keep is not None and run.pk in keep:
                    baseline.append(
                        AccrualBaseline(run_id=run.pk, day=day_line.day, as_of=as_of, **line_amounts(day_line))
                    )
    rows = [
        CostDaily(
            day=key[0],
            **dict(zip(DIMENSIONS, key[1:], strict=True)),
            **_amounts(values),
            runs=counts[key],
            unpriced="\n".join(unpriced[key]),
        )
        for key, values in sums.items()
    ]
    team_rows = _team_days(rows)
    with transaction.atomic():
        if keep is not None:
            _passed(as_of)
        for first, last in _ranges(wanted):
            CostDaily.objects.filter(day__gte=first, day__lte=last).delete()
            CostDailyTeam.objects.filter(day__gte=first, day__lte=last).delete()
        CostDaily.objects.bulk_create(rows, batch_size=1000)
        CostDailyTeam.objects.bulk_create(team_rows, batch_size=1000)
        _save_spans(spans)
        if keep is not None:
            AccrualBaseline.objects.all().delete()
            AccrualBaseline.objects.bulk_create(baseline, batch_size=1000)
    return len(rows), set(run_ids)


class StalePass(Exception):
    """A rollup pass found a later pass's rollups already written: it writes nothing."""


def _passed(as_of: datetime) -> None:
    """Mark the rollups as written at `as_of`, first in the transaction that writes them: a reader
    never sees the new rows with the old time (the accrual since then counted twice) or the other
    way round. Only forwards: a pass that overran its lease and ends after a newer one raises
    StalePass, and its transaction writes nothing (on PostgreSQL the row lock taken here also
    makes a racing pass wait for this one's commit)."""
    later = Q(last_run_at__isnull=True) | Q(last_run_at__lte=as_of)
    if RollupState.objects.filter(later, name=STATE_NAME).update(last_run_at=as_of) != 1:
        raise StalePass(f"the rollups were written after {as_of.isoformat()}")


# DayBreakdown's amounts, in the order of the COST_AMOUNTS columns they are summed into.
_LINE_AMOUNTS = ("compute", "egress", "idle", "gpu_hours", "idle_gpu_hours")


def line_amounts(line: DayBreakdown) -> dict[str, Decimal]:
    """A DayBreakdown's amounts under CostDaily's column names (COST_AMOUNTS)."""
    return {column: getattr(line, name) for name, column in zip(_LINE_AMOUNTS, COST_AMOUNTS, strict=True)}


def _amounts(values: dict[str, list[Decimal]]) -> dict[str, Decimal]:
    """A DayBreakdown's amounts summed exactly, under CostDaily's column names."""
    return {column: exact_sum(values[line]) for line, column in zip(_LINE_AMOUNTS, COST_AMOUNTS, strict=True)}


def _team_days(rows: list[CostDaily]) -> list[CostDailyTeam]:
    """The per-(day, team) summary of `rows`, exactly: what month to date and by-team sums read."""
    sums: dict[tuple[date, int], dict[str, list[Decimal]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[tuple[date, int], int] = defaultdict(int)
    unpriced: dict[tuple[date, int], dict[str, None]] = defaultdict(dict)
    for row in rows:
        key = (row.day, row.team_id)
        counts[key] += row.runs
        unpriced[key].update(dict.fromkeys(r for r in row.unpriced.split("\n") if r))
        for name in COST_AMOUNTS:
            sums[key][name].append(getattr(row, name))
    return [
        CostDailyTeam(
            day=day,
            team_id=team_id,
            runs=counts[(day, team_id)],
            **{n: exact_sum(v[n]) for n in COST_AMOUNTS},
            unpriced="\n".join(unpriced[(day, team_id)]),
        )
        for (day, team_id), v in sums.items()
    ]


def summarize_days(days: Iterable[date]) -> int:
    """Rebuild the CostDailyTeam rows of `days` from the CostDaily rows stored for them.

    `recompute_days` writes both tables itself; this is for CostDaily rows written some other
    way (an import, a repair by hand).
    """
    wanted = sorted(set(days))
    rows = _team_days(list(CostDaily.objects.filter(day__in=wanted)))
    with transaction.atomic():
        CostDailyTeam.objects.filter(day__in=wanted).delete()
        CostDailyTeam.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


def _save_spans(spans: dict[int, tuple[date, date]]) -> None:
    """Record each priced run's first and last day; only rows that changed are written."""
    ids = list(spans)
    stored: dict[int, tuple[date, date]] = {}
    for i in range(0, len(ids), CHUNK):
        for run_id, first, last in RunCostSpan.objects.filter(run_id__in=ids[i : i + CHUNK]).values_list(
            "run_id", "first_day", "last_day"
        ):
            stored[run_id] = (first, last)
    changed = [
        RunCostSpan(run_id=run_id, first_day=first, last_day=last)
        for run_id, (first, last) in spans.items()
        if stored.get(run_id) != (first, last)
    ]
    RunCostSpan.objects.bulk_create(
        changed, batch_size=1000, update_conflicts=True, unique_fields=["run"], update_fields=["first_day", "last_day"]
    )


def span_days(run_ids: Iterable[int]) -> set[date]:
    """Days the given runs covered when last rolled up (their `RunCostSpan`), one query a chunk."""
    run_ids = list(run_ids)
    days: set[date] = set()
    for i in range(0, len(run_ids), CHUNK):
        for first, last in RunCostSpan.objects.filter(run_id__in=run_ids[i : i + CHUNK]).values_list(
            "first_day", "last_day"
        ):
            days.update(first + timedelta(days=n) for n in range((last - first).days + 1))
    return days


def touched_days(run_ids: Iterable[int], now: datetime) -> set[date]:
    """UTC days the given runs' attempts, clusters' uptime and egress records touch."""
    run_ids = list(run_ids)
    days: set[date] = set()
    for i in range(0, len(run_ids), CHUNK):
        chunk = run_ids[i : i + CHUNK]
        for start, end in Attempt.objects.filter(run_id__in=chunk, started_at__isnull=False).values_list(
            "started_at", "ended_at"
        ):
            assert start is not None  # started_at__isnull=False
            days.update(days_between(start, end or now))
        for up_days in cluster_days(_classic_clusters(chunk), now).values():
            days.update(up_days)
        days.update(utc(ts).date() for ts in EgressRecord.objects.filter(run_id__in=chunk).values_list("ts", flat=True))
    return days


def accruing_run_ids(team_ids: Iterable[int] | None = None) -> set[int]:
    """Runs whose cost grows with the clock: an attempt still running, or a classic run on a
    cluster not terminated (its idle uptime is shared by its runs, `billing.costs.run_costs`)."""
    running = Attempt.objects.filter(started_at__isnull=False, ended_at__isnull=True)
    on_cluster = Run.objects.filter(
        source=RunSource.CLASSIC, cluster__isnull=False, cluster__terminated_time__isnull=True
    )
    if team_ids is not None:
        team_ids = list(team_ids)
        running = running.filter(run__team_id__in=team_ids)
        on_cluster = on_cluster.filter(team_id__in=team_ids)
    return set(running.values_list("run_id", flat=True)) | set(on_cluster.values_list("pk", flat=True))


def _days_since_price_changes(cursor: datetime | None) -> set[date]:
    """Days already rolled up that a price edited since `cursor` may have changed."""
    changes = PriceChange.objects.all() if cursor is None else PriceChange.objects.filter(at__gt=cursor)
    earliest: list[datetime] = []
    for model in (AcceleratorPrice, EgressPrice, InstancePrice):
        ids = changes.filter(model=model.__name__).values("object_id")
        value = model.objects.filter(pk__in=ids).aggregate(first=Min("effective_from"))["first"]
        if value is not None:
            earliest.append(value)
    if not earliest:
        return set()
    first_day = utc(min(earliest)).date()
    return set(CostDaily.objects.filter(day__gte=first_day).values_list("day", flat=True).distinct())


def claim(now: datetime) -> RollupState | None:
    """Take the rollup lease with a conditional UPDATE; None when another worker holds it."""
    RollupState.objects.get_or_create(name=STATE_NAME)
    free = Q(lease_until__isnull=True) | Q(lease_until__lte=now)
    if RollupState.objects.filter(free, name=STATE_NAME).update(lease_until=now + LEASE) != 1:
        return None
    return RollupState.objects.get(name=STATE_NAME)


def refresh_changed(now: datetime | None = None) -> RefreshResult:
    """Recompute only the days that changed since the last pass.

    1. Claim the lease (`claim`); if another worker holds it, do nothing.
    2. Runs to look at: those whose `updated_at` (or cluster's) is after the cursor, plus
       runs with an attempt still running, which accrue to now.
    3. The UTC days those runs touch now, the days they covered at the last pass (their
       `RunCostSpan`), plus the rolled-up days from the earliest effective_from of any price
       edited since the cursor.
    4. `recompute_days` on that set (which also stores the failed runs' failed-attempt cost,
       billing.costs.failed, the settled runs' figures, billing.costs.figures, and the accruing
       runs' lines as the accrual baseline), then store both for up to BACKFILL runs each that
       lack a usable one; then move the cursor to the
       pass's start (less an overlap, see CURSOR_OVERLAP) and release the lease.
    """
    as_of = utc(now or timezone.now())
    state = claim(as_of)
    if state is None:
        return RefreshResult(claimed=False)
    try:
        cursor = state.cursor
        changed = Run.objects.all()
        if cursor is not None:
            changed = changed.filter(Q(updated_at__gt=cursor) | Q(cluster__updated_at__gt=cursor))
        run_ids = set(changed.values_list("pk", flat=True))
        # A run that became cross-region (or stopped being) after its network metrics arrived.
        egress.rederive_where_region_changed(run_ids, now=as_of)
        accruing = accruing_run_ids()
        run_ids |= accruing
        # The days they cover now, and the days they covered at the last pass: an attempt
        # whose times moved, or a cluster or egress record that changed, leaves old days too.
        days = touched_days(run_ids, as_of) | span_days(run_ids) | _days_since_price_changes(cursor)
        rows, priced = _recompute(days, as_of, keep=accruing)
        # Failed runs no day brought in whose stored failed-attempt cost is missing or stale.
        failed.backfill(as_of)
        figures.backfill(as_of)
        # A run that no longer covers any day (its attempts were removed) keeps no span.
        gone = sorted(run_ids - priced)
        for i in range(0, len(gone), CHUNK):
            RunCostSpan.objects.filter(run_id__in=gone[i : i + CHUNK]).delete()
        # last_run_at was set with the rollups (`_passed`). The cursor moves and the lease is
        # freed only while the lease is still this pass's: one that outlived it leaves both to
        # the pass that took it over.
        ours = RollupState.objects.filter(name=STATE_NAME, lease_until=as_of + LEASE)
        ours.update(cursor=as_of - CURSOR_OVERLAP, days_last_run=len(days), lease_until=None)
    except StalePass:
        return RefreshResult(claimed=False)  # a newer pass wrote (and holds or freed the lease)
    except BaseException:
        RollupState.objects.filter(name=STATE_NAME, lease_until=as_of + LEASE).update(lease_until=None)
        raise
    return RefreshResult(claimed=True, runs=len(run_ids), days=len(days), rows=rows)


def totals(rows: Iterable[CostDaily]) -> dict[str, Decimal]:
    """Exact sums of a set of CostDaily rows (used by tests and checks)."""
    rows = list(rows)
    return {name: exact_sum(getattr(r, name) for r in rows) if rows else ZERO for name in COST_AMOUNTS}
