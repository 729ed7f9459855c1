"""Reads of the daily rollups for the cost pages and `GET /api/v1/costs`: exact sums, scoped.

Every read starts from `cost_rows(team_ids, filters)`, so a team a user cannot see never
reaches a sum. Sums are exact: PostgreSQL adds NUMERIC columns exactly in SQL; SQLite stores
the exact decimals as text (see `billing.fields`), so there the rows are added in Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet, Sum

from billing.choices import GroupBy
from billing.costs.serverless import egress_prices, price_egress
from billing.models import COST_AMOUNTS, CostDaily, CostDailyTeam, EgressRecord
from billing.prices.money import (
    CENT,
    ESTIMATED,
    FORECAST,
    PROVISIONAL_FORECAST,
    ZERO,
    Figure,
    exact_sum,
    linear_forecast,
    month_start,
    run_rate_forecast,
    utc,
    utc_midnight,
)

AMOUNTS = COST_AMOUNTS
# The ORM path each group_by reads; team is shown by name.
GROUP_FIELDS = {
    GroupBy.TEAM: "team__name",
    GroupBy.ACCELERATOR_TYPE: "accelerator_type",
    GroupBy.REGION: "region",
    GroupBy.EXPERIMENT_NAME: "experiment_name",
    GroupBy.CREATOR: "creator",
    GroupBy.USAGE_POLICY_NAME: "usage_policy_name",
    GroupBy.DAY: "day",
}
# A forecast from fewer days of data is mostly noise.
MIN_FORECAST_DAYS = 3


@dataclass(frozen=True)
class CostFilters:
    """Which rollup rows to read: an inclusive UTC date range and optional dimensions."""

    start: date
    end: date
    team_id: int | None = None
    accelerator_type: str = ""
    region: str = ""
    usage_policy_name: str = ""

    def dimensions(self, prefix: str = "") -> Q:
        """The optional dimension filters as one Q; `prefix` reaches the run's fields ("run__")
        from records that are not rollup rows (egress records, billed usage)."""
        chosen = {
            "team_id": self.team_id,
            "accelerator_type": self.accelerator_type,
            "region": self.region,
            "usage_policy_name": self.usage_policy_name,
        }
        return Q(**{f"{prefix}{name}": value for name, value in chosen.items() if value})


@dataclass(frozen=True)
class MonthToDate:
    """Spend this period (the UTC month, or a policy's period) so far, and a forecast to its end.

    The forecast is `period_forecast`'s, the policy pages' own: linear once MIN_FORECAST_DAYS
    days of the period are in; before that `provisional`, from the trailing run rate.
    """

    month: date
    spend: Decimal
    days_with_data: int
    elapsed_days: Decimal
    days_in_month: int
    forecast: Decimal | None
    as_of: datetime | None = None
    provisional: bool = False
    # The period's end (excluded); None: the end of `month`'s UTC month.
    end: date | None = None

    @property
    def spend_figure(self) -> Figure:
        return Figure(self.spend, ESTIMATED, self.as_of or utc_midnight(self.month))

    @property
    def forecast_figure(self) -> Figure | None:
        if self.forecast is None:
            return None
        kind = PROVISIONAL_FORECAST if self.provisional else FORECAST
        return Figure(self.forecast, kind, self.as_of or utc_midnight(self.month))


def period_forecast(by_day: dict[date, Decimal], first: date, end: date, now: datetime) -> tuple[Decimal | None, bool]:
    """The one forecast of a period's spend, (amount, provisional): `/costs/` and the policies.

    `by_day`: spend per UTC day from the trailing window's first day (`trailing_window`) or the
    period's first day, whichever is earlier, to today.
    1. From MIN_FORECAST_DAYS days into [first, end): linear, spend / elapsed x the period.
    2. Before that: provisional, spend + the trailing run rate x what is left of the period,
       the trailing window reaching back across the period's start. None with no spend at all
       in the window or the period (nothing to extrapolate).
    """
    spend = exact_sum(usd for day, usd in by_day.items() if first <= day < end)
    elapsed = int((now - utc_midnight(first)).total_seconds())
    length = int((utc_midnight(end) - utc_midnight(first)).total_seconds())
    if elapsed >= MIN_FORECAST_DAYS * 86_400:
        return linear_forecast(spend, elapsed, length), False
    trailing_first, trailing_seconds = trailing_window(now)
    if not by_day:
        return None, False
    trailing = exact_sum(usd for day, usd in by_day.items() if day >= trailing_first)
    return run_rate_forecast(spend, trailing, trailing_seconds, length - elapsed), True


def trailing_window(now: datetime) -> tuple[date, int]:
    """The trailing run rate's window: (its first UTC day, its seconds up to `now`).

    MIN_FORECAST_DAYS whole days before today plus today so far, so the rate rests on as much
    data as the linear forecast would, whichever period those days belong to.
    """
    first = now.date() - timedelta(days=MIN_FORECAST_DAYS)
    return first, int((now - utc_midnight(first)).total_seconds())


def cost_rows(team_ids: Iterable[int], filters: CostFilters | None = None) -> QuerySet[CostDaily]:
    """CostDaily rows of the given teams, narrowed by `filters`."""
    rows = CostDaily.objects.filter(team_id__in=list(team_ids))
    if filters is None:
        return rows
    return rows.filter(filters.dimensions(), day__gte=filters.start, day__lte=filters.end)


def summary_rows(team_ids: Iterable[int], filters: CostFilters) -> QuerySet[CostDailyTeam] | None:
    """The per-(day, team) summary narrowed by `filters`; None when a filter needs CostDaily's dimensions."""
    if filters.accelerator_type or filters.region or filters.usage_policy_name:
        return None
    rows = CostDailyTeam.objects.filter(team_id__in=list(team_ids), day__gte=filters.start, day__lte=filters.end)
    return rows.filter(team_id=filters.team_id) if filters.team_id else rows


def rows_for(team_ids: Iterable[int], filters: CostFilters, group_by: str | None = None) -> QuerySet:
    """The smallest rollup that answers sums by `group_by` (None: the totals) under `filters`.

    Team and day sums without a type or region filter read `CostDailyTeam` (one row per team
    and day); any other dimension reads CostDaily. Both hold the same amounts, exactly.
    """
    team_ids = list(team_ids)
    if group_by in (None, GroupBy.TEAM, GroupBy.DAY):
        summary = summary_rows(team_ids, filters)
        if summary is not None:
            return summary
    return cost_rows(team_ids, filters)


def _with_total(row: dict) -> dict:
    row["total_usd"] = exact_sum([row["compute_usd"], row["egress_usd"]])
    return row


def accrual_for(accrued: Sequence[dict[str, Any]], team_ids: Iterable[int], filters: CostFilters) -> list[dict]:
    """The accrual rows (`billing.costs.spend.accrual`) that `cost_rows(team_ids, filters)` would hold."""
    team_ids = set(team_ids)
    return [
        row
        for row in accrued
        if row["team_id"] in team_ids
        and filters.start <= row["day"] <= filters.end
        and (not filters.team_id or row["team_id"] == filters.team_id)
        and (not filters.accelerator_type or row["accelerator_type"] == filters.accelerator_type)
        and (not filters.region or row["region"] == filters.region)
        and (not filters.usage_policy_name or row["usage_policy_name"] == filters.usage_policy_name)
    ]


def unpriced_reasons(rows: QuerySet, extra: Sequence[dict[str, Any]] = ()) -> list[str]:
    """What had no price among the rollup rows and accrual rows: their sum is then a lower bound."""
    found: dict[str, None] = {}
    texts = [
        *rows.exclude(unpriced="").values_list("unpriced", flat=True).distinct()[:50],
        *(r["unpriced"] for r in extra),
    ]
    for text in texts:
        found.update(dict.fromkeys(r for r in text.split("\n") if r))
    return list(found)


def _add_extra(out: list[dict], fields: list[str], extra: Sequence[dict[str, Any]]) -> list[dict]:
    """`out` (sum_by rows) with the accrual rows `extra` added into their groups, exactly."""
    if not extra:
        return out
    by_key = {tuple(row[f] for f in fields): row for row in out}
    for row in extra:
        key = tuple(row[f] for f in fields)
        target = by_key.setdefault(key, {**dict(zip(fields, key, strict=True)), **dict.fromkeys(AMOUNTS, ZERO)})
        for name in AMOUNTS:
            target[name] = exact_sum([target[name], row[name]])
    return [_with_total(row) for row in by_key.values()]


def sum_by(rows: QuerySet, fields: Iterable[str], extra: Sequence[dict[str, Any]] = ()) -> list[dict]:
    """Exact sums of the amounts per distinct value of `fields` (ORM paths); one query.

    `rows` is a CostDaily or a CostDailyTeam queryset: both carry the same amount columns.

    `extra`: accrual rows (`accrual_for`) added into their groups.

    Rows come back as dicts: the field values, then the amounts and `total_usd`, ordered by
    total (largest first).
    """
    fields = list(fields)
    if connection.vendor == "postgresql":
        grouped = rows.values(*fields).annotate(**{name: Sum(name) for name in AMOUNTS}).order_by()
        out = [_with_total({**row, **{n: row[n] if row[n] is not None else ZERO for n in AMOUNTS}}) for row in grouped]
    else:
        acc: dict[tuple, dict[str, list[Decimal]]] = defaultdict(lambda: defaultdict(list))
        for values in rows.values_list(*fields, *AMOUNTS):
            key, amounts = values[: len(fields)], values[len(fields) :]
            for name, value in zip(AMOUNTS, amounts, strict=True):
                acc[key][name].append(value)
        out = [
            _with_total({**dict(zip(fields, key, strict=True)), **{n: exact_sum(v[n]) for n in AMOUNTS}})
            for key, v in acc.items()
        ]
    out = _add_extra(out, fields, extra)
    return sorted(out, key=lambda row: (-row["total_usd"], [str(row[f]) for f in fields]))


def grouped(rows: QuerySet, group_by: str, extra: Sequence[dict[str, Any]] = ()) -> list[dict]:
    """Sums per `group_by` value, each row with `key` set to the value (days ascending)."""
    field = GROUP_FIELDS[GroupBy(group_by)]
    out = [{"key": row.pop(field), **row} for row in sum_by(rows, [field], extra)]
    if group_by == GroupBy.DAY:
        out.sort(key=lambda row: row["key"])
    return out


def totals(rows: QuerySet, extra: Sequence[dict[str, Any]] = ()) -> dict[str, Decimal]:
    """Exact sums of every amount over `rows` plus accrual rows `extra` (zeros when there are none)."""
    if connection.vendor == "postgresql":
        sums = rows.aggregate(**{name: Sum(name) for name in AMOUNTS})
        base = _with_total({name: sums[name] if sums[name] is not None else ZERO for name in AMOUNTS})
        return _add_extra([base], [], extra)[0]
    found = sum_by(rows, [], extra)
    return found[0] if found else _with_total(dict.fromkeys(AMOUNTS, ZERO))


def month_to_date(
    team_ids: Iterable[int],
    now: datetime,
    extra: Sequence[dict[str, Any]] = (),
    filters: CostFilters | None = None,
    period: tuple[date, date] | None = None,
) -> MonthToDate:
    """This period's spend under `filters`' dimensions and a forecast to its end.

    1. The period: [first, end) in UTC days, the UTC month holding `now` unless given (a
       policy's period, `billing.policies.budget.period_bounds`).
    2. Sum per day the smallest rollup that answers the filters (`rows_for`: one row per team
       and day without a dimension filter) plus the accrual rows they would hold, from the
       trailing window's first day (`trailing_window`) or the period's, whichever is earlier.
    3. Elapsed time is exact: from 00:00 UTC on the first day to `now`, in days.
    4. The forecast: `period_forecast` (linear from MIN_FORECAST_DAYS days in, provisional
       before), the policy pages' own rule.
    """
    now = utc(now)
    first, end = period or (month_start(now).date(), _next_month(month_start(now).date()))
    dims = filters or CostFilters(first, now.date())
    team_ids = list(team_ids)
    trailing_first, _ = trailing_window(now)
    scope = CostFilters(min(first, trailing_first), now.date(), dims.team_id, dims.accelerator_type, dims.region,
                        dims.usage_policy_name)  # fmt: skip
    by_day = {
        row["day"]: row["total_usd"]
        for row in sum_by(rows_for(team_ids, scope, GroupBy.DAY), ["day"], accrual_for(extra, team_ids, scope))
    }
    in_period = [usd for day, usd in by_day.items() if first <= day < end]
    spend = exact_sum(in_period)
    days = len(in_period)
    elapsed_seconds = int((now - utc_midnight(first)).total_seconds())
    forecast, provisional = period_forecast(by_day, first, end, now)
    elapsed = (Decimal(elapsed_seconds) / 86_400).quantize(CENT)
    return MonthToDate(first, spend, days, elapsed, (end - first).days, forecast, now, provisional, end)


def _next_month(first: date) -> date:
    return date(first.year + first.month // 12, first.month % 12 + 1, 1)


def egress_flows(team_ids: Iterable[int], filters: CostFilters) -> list[dict]:
    """Bytes (and how many of them derived estimates) and priced USD per region pair in the range; two queries."""
    begin, end = utc_midnight(filters.start), utc_midnight(filters.end + timedelta(days=1))
    records = EgressRecord.objects.filter(
        filters.dimensions("run__"), run__team_id__in=list(team_ids), ts__gte=begin, ts__lt=end
    )
    rows = list(records.values_list("ts", "source_region", "destination_region", "bytes", "origin"))
    prices = egress_prices({(r[1], r[2]) for r in rows})
    flows: dict[tuple[str, str], dict] = {}
    for ts, source, destination, num_bytes, origin in rows:
        line = price_egress(ts, source, destination, num_bytes, prices[(source, destination)], origin)
        flow = flows.setdefault(
            (source, destination),
            {"source_region": source, "destination_region": destination, "bytes": 0, "estimated_bytes": 0,
             "usd": ZERO, "unpriced": False},
        )  # fmt: skip
        flow["bytes"] += num_bytes
        # Derived from network metrics (billing.costs.egress): an upper bound, shown as such.
        flow["estimated_bytes"] += num_bytes if line.derived else 0
        flow["usd"] = exact_sum([flow["usd"], line.usd])
        flow["unpriced"] |= line.unpriced
    return sorted(flows.values(), key=lambda f: (-f["usd"], -f["bytes"]))


def decimal_str(value: Decimal) -> str:
    """An exact decimal as a plain string: '12.5', never '1.25E+1'."""
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
