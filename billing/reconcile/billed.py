"""What the provider billed for a team, a policy or a date range: imported usage records, summed.

The run page's billed figure is `compare.per_run` (whole runs, pool shares included). The
pages that show money by period (overview, `/costs/`, policies, `GET /api/v1/costs`,
`/metrics`) read the records *dated* in their range instead (`usage_date`, a UTC day, as the
reconciliation page's day table does), so a bill that covers the 1st to the 2nd of a month
is that month's billed figure whatever the runs' whole cost. Only records linked to a run of
the scope's teams count: a record linked to no run belongs to no team (it stays on the staff's
reconciliation page), and a pool's unsplit rows belong to no team either.

`billing.engine` is the door: pages read these through it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Max, Min, QuerySet, Sum
from django.utils import timezone

from billing.costs.reports import CostFilters
from billing.models import BilledUsage
from billing.prices.money import BILLED, ZERO, Figure, exact_sum, utc


@dataclass(frozen=True)
class BilledSpend:
    """Imported usage records of one scope in a date range, at list price (`billed_usd` summed).

    `first_day` and `last_day` are the earliest and latest `usage_date` among them: what the
    bill covers so far (it arrives hours late, and only for the days imported).
    """

    usd: Decimal
    records: int
    unpriced: int
    first_day: date
    last_day: date
    as_of: datetime

    @property
    def figure(self) -> Figure:
        reasons = (f"{self.unpriced} usage record(s) without a list price",) if self.unpriced else ()
        return Figure(self.usd, BILLED, self.as_of, reasons)

    @property
    def covers(self) -> str:
        """'2026-12-01 to 2026-12-02': the usage dates of the records summed."""
        if self.first_day == self.last_day:
            return self.first_day.isoformat()
        return f"{self.first_day.isoformat()} to {self.last_day.isoformat()}"

    def as_json(self) -> dict[str, object]:
        """The API's shape: the billed figure plus what it covers."""
        return self.figure.as_json() | {
            "records": self.records,
            "first_day": self.first_day.isoformat(),
            "last_day": self.last_day.isoformat(),
        }


def scoped_usage(team_ids: Iterable[int], filters: CostFilters) -> QuerySet[BilledUsage]:
    """Records linked to a run of `team_ids`, dated in [filters.start, filters.end], under the
    filters' run dimensions (team, accelerator type, region, usage policy): the rows a cost page
    with these filters would sum."""
    return BilledUsage.objects.filter(
        filters.dimensions("run__"),
        run__team_id__in=list(team_ids),
        usage_date__gte=filters.start,
        usage_date__lte=filters.end,
    )


def _spend(rows: Iterable[tuple[date, Decimal | None]], as_of: datetime) -> BilledSpend | None:
    days, amounts, unpriced = [], [], 0
    for day, usd in rows:
        days.append(day)
        if usd is None:
            unpriced += 1
        else:
            amounts.append(usd)
    if not days:
        return None
    return BilledSpend(exact_sum(amounts), len(days), unpriced, min(days), max(days), utc(as_of, "as_of"))


# PostgreSQL sums NUMERIC exactly, so a month of records is one grouped query and a few rows;
# SQLite keeps the decimals as text (`billing.fields`), so there the rows are added here.
SUMS = {
    "usd": Sum("billed_usd"),
    "records": Count("pk"),
    "priced": Count("billed_usd"),
    "first_day": Min("usage_date"),
    "last_day": Max("usage_date"),
}


def _from_sums(row: dict, as_of: datetime) -> BilledSpend | None:
    if not row["records"]:
        return None
    usd = row["usd"] if row["usd"] is not None else ZERO
    unpriced = row["records"] - row["priced"]
    return BilledSpend(usd, row["records"], unpriced, row["first_day"], row["last_day"], utc(as_of, "as_of"))


def billed_spend(usage: QuerySet[BilledUsage], as_of: datetime) -> BilledSpend | None:
    """The records of `usage` summed exactly; None when there are none (nothing imported covers it)."""
    if connection.vendor == "postgresql":
        return _from_sums(usage.aggregate(**SUMS), as_of)
    return _spend(usage.values_list("usage_date", "billed_usd").iterator(chunk_size=5000), as_of)


def billed_by(usage: QuerySet[BilledUsage], fields: tuple[str, ...], as_of: datetime) -> dict[tuple, BilledSpend]:
    """`billed_spend` per value tuple of `fields` (ORM paths such as "run__team_id"); one query."""
    if connection.vendor == "postgresql":
        grouped = usage.values(*fields).annotate(**SUMS).order_by()
        # A group has records, so a spend (never None).
        return {tuple(row[f] for f in fields): spend for row in grouped if (spend := _from_sums(row, as_of))}
    rows: dict[tuple, list[tuple[date, Decimal | None]]] = defaultdict(list)
    width = len(fields)
    for values in usage.values_list(*fields, "usage_date", "billed_usd").iterator(chunk_size=5000):
        rows[values[:width]].append(values[width:])
    out = {key: _spend(values, as_of) for key, values in rows.items()}
    return {key: spend for key, spend in out.items() if spend is not None}


def policy_billed(
    name: str, team_ids: list[int] | None, start: date, last: date, now: datetime | None = None
) -> BilledSpend | None:
    """Billed for the runs naming policy `name` in `team_ids` (None: every team), dated in [start, last]:
    the runs the policy's spend sums (`billing.policies.budget.policy_rows`)."""
    usage = BilledUsage.objects.filter(
        run__usage_policy_name=name, usage_date__gte=start, usage_date__lte=last, run__isnull=False
    )
    if team_ids is not None:
        usage = usage.filter(run__team_id__in=team_ids)
    return billed_spend(usage, now or timezone.now())
