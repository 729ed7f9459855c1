"""The cost page (`/costs/`): its tables, totals and period figures, for the teams a viewer sees.

`cost_overview` reads the daily rollups of `team_ids` under the page's filters, plus what
running runs accrued since the last rollup pass (computed once, for every table), and the
egress flows with the billed NETWORKING rows beside them (as the run page shows them).
`csv_table` is one of its tables as the CSV download writes it.

It sits beside `billing.engine`, above the rooms it reads (costs, reconcile, policies): the
billed figures and a policy's period come from those, and they import `billing.costs`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from billing import engine
from billing.choices import GroupBy
from billing.costs import reports, spend
from billing.engine import BilledSpend
from billing.models import UsagePolicy
from billing.policies.budget import period_bounds
from billing.prices.money import Figure, estimate
from billing.reconcile import compare

AMOUNT_HEADER = ["compute_usd", "egress_usd", "idle_usd", "total_usd", "gpu_hours", "idle_gpu_hours", "figure"]


@dataclass(frozen=True)
class CostOverview:
    """What the cost page shows. `mtd`, `mtd_policy`, `mtd_billed` and `total_billed` are None
    when it was built for a CSV table (`summary=False`), which needs none of them."""

    filters: reports.CostFilters
    group_by: str
    group_field: str
    by_group: list[dict[str, Any]]
    experiments: list[dict[str, Any]]
    creators: list[dict[str, Any]]
    idle: list[dict[str, Any]]
    daily: list[dict[str, Any]]
    flows: list[dict[str, Any]]
    total: dict[str, Any]
    total_figure: Figure
    total_billed: BilledSpend | None = None
    mtd: reports.MonthToDate | None = None
    mtd_policy: UsagePolicy | None = None
    mtd_billed: BilledSpend | None = None

    @property
    def group_label(self) -> str:
        return str(GroupBy(self.group_by).label)

    @property
    def egress_share(self) -> Decimal | None:
        """Egress as a percent of the total (None when nothing was spent)."""
        total = self.total["total_usd"]
        return (self.total["egress_usd"] / total * 100) if total else None


def cost_overview(
    team_ids: list[int], filters: reports.CostFilters, group_by: str, now: datetime, *, summary: bool = True
) -> CostOverview:
    """The cost page's tables under `filters`, grouped by `group_by`, as of `now`.

    1. Rollup rows of `team_ids` under `filters`, plus running runs' accrual since the last
       rollup pass (`billing.costs.spend.accrual`), read once for every table.
    2. The tables: by group, by experiment, by creator, idle cost by experiment, daily by group,
       and the egress flows with their billed routes (`billing.reconcile.compare`).
    3. With `summary`: this month (or, when the filters name a policy, the policy's own period,
       so the figure is the policy page's) so far, and the billed figures of both ranges.
    """
    rows = reports.cost_rows(team_ids, filters)
    accrued = spend.accrual(team_ids, now)
    extra = reports.accrual_for(accrued, team_ids, filters)
    group_field = reports.GROUP_FIELDS[GroupBy(group_by)]
    experiments = reports.grouped(rows, GroupBy.EXPERIMENT_NAME, extra)
    flows = compare.flows_with_billed(reports.egress_flows(team_ids, filters), compare.billed_egress(team_ids, filters))
    total = reports.totals(reports.rows_for(team_ids, filters), extra)
    overview = CostOverview(
        filters=filters,
        group_by=group_by,
        group_field=group_field,
        by_group=reports.grouped(reports.rows_for(team_ids, filters, group_by), group_by, extra),
        experiments=experiments,
        creators=reports.grouped(rows, GroupBy.CREATOR, extra),
        idle=sorted((r for r in experiments if r["idle_usd"] > 0), key=lambda r: -r["idle_usd"]),
        daily=reports.sum_by(reports.rows_for(team_ids, filters, group_by), ["day", group_field], extra),
        flows=flows,
        total=total,
        total_figure=estimate(total["total_usd"], now, reports.unpriced_reasons(rows, extra)),
    )
    if not summary:
        return overview
    name = filters.usage_policy_name
    policy = UsagePolicy.objects.filter(name=name).first() if name else None
    period = period_bounds(policy, now.date()) if policy is not None else None
    mtd = reports.month_to_date(team_ids, now, accrued, filters, period)
    mtd_filters = reports.CostFilters(
        mtd.month, now.date(), filters.team_id, filters.accelerator_type, filters.region, filters.usage_policy_name
    )
    return replace(
        overview,
        mtd=mtd,
        mtd_policy=policy,
        mtd_billed=engine.billed_between(team_ids, mtd_filters, now),
        total_billed=engine.billed_between(team_ids, filters, now),
    )


# --- CSV ----------------------------------------------------------------------------------


def _amounts(row: dict, figure: str) -> list[object]:
    """A row's amounts and what they are (the export's label: estimated or a lower bound, as of when)."""
    return [*(row[name] for name in AMOUNT_HEADER[:-1]), figure]


def _billed_cells(flow: dict) -> list[object]:
    """An egress flow's billed quantity, unit and USD for the CSV ('' when the route was not billed)."""
    routes = flow["billed"]
    if not routes:
        return ["", "", ""]
    quantities = "; ".join(reports.decimal_str(r.quantity) for r in routes)
    return [quantities, "; ".join(r.usage_unit for r in routes), flow["billed_usd"]]


def csv_table(overview: CostOverview, table: str) -> tuple[str, list[str], Iterable[list[object]]]:
    """(file name, header, rows) of the page's table named `table` (the by-group table by default)."""
    stamp = f"{overview.filters.start}_{overview.filters.end}"
    label = overview.total_figure.label
    group_by, group_field = overview.group_by, overview.group_field
    if table == "experiments":
        return (f"costs-experiments-{stamp}.csv", ["experiment_name", *AMOUNT_HEADER],
                ([r["key"], *_amounts(r, label)] for r in overview.experiments))  # fmt: skip
    if table == "users":
        return (f"costs-users-{stamp}.csv", ["creator", *AMOUNT_HEADER],
                ([r["key"], *_amounts(r, label)] for r in overview.creators))  # fmt: skip
    if table == "idle":
        return (f"costs-idle-{stamp}.csv", ["experiment_name", "idle_usd", "idle_gpu_hours"],
                ([r["key"], r["idle_usd"], r["idle_gpu_hours"]] for r in overview.idle))  # fmt: skip
    if table == "egress":
        # `unpriced`: the page's "(no price)"; a 0 alone would read as free. `billed_*`: the
        # route's NETWORKING usage rows (blank when none), one quantity per unit.
        header = ["source_region", "destination_region", "bytes", "estimated_bytes", "usd", "unpriced"]
        billed_header = ["billed_quantity", "billed_unit", "billed_usd"]
        return (
            f"costs-egress-{stamp}.csv",
            [*header, *billed_header],
            ([*(f[name] for name in header), *_billed_cells(f)] for f in overview.flows),
        )
    if table == "daily":
        ordered = sorted(overview.daily, key=lambda r: r["day"])
        return (f"costs-daily-{stamp}.csv", ["day", group_by, *AMOUNT_HEADER],
                ([r["day"], r[group_field], *_amounts(r, label)] for r in ordered))  # fmt: skip
    return (f"costs-by-{group_by}-{stamp}.csv", [group_by, *AMOUNT_HEADER],
            ([r["key"], *_amounts(r, label)] for r in overview.by_group))  # fmt: skip
