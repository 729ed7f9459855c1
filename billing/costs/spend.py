"""Spend as every surface reports it: the daily rollups plus what accrued since their last pass.

The overview, `/costs/`, `GET /api/v1/costs`, `/metrics`, the policy pages and every CSV read
money here (or `billing.costs.reports`, which adds the same `accrual` rows), so a team's month is
one number everywhere. The rollups are written by `billing.costs.rollups` from
`billing.costs.run_costs.breakdowns_for_runs`, the same engine the run page reads.

Accrual, computed once (`accrual`): runs whose cost grows with the clock
(`rollups.accruing_run_ids`) priced now, less what the rollups already hold for them (`_stored`:
what the last rollup pass stored for the runs accruing then), per UTC day and dimension tuple.
With no pass yet the rollups are empty and the baseline is zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import Group
from django.utils import timezone

from billing.costs.rollups import CHUNK, DIMENSIONS, STATE_NAME, accruing_run_ids, line_amounts
from billing.costs.run_costs import breakdowns_for_runs
from billing.models import COST_AMOUNTS, AccrualBaseline, CostDailyTeam, RollupState, RunCostSpan
from billing.prices.money import ZERO, Figure, estimate, exact_difference, exact_sum, month_start, utc
from runs.models import Run


def last_pass() -> datetime | None:
    """When the rollups were last written (`billing.costs.rollups.refresh_changed`), or None."""
    return RollupState.objects.filter(name=STATE_NAME).values_list("last_run_at", flat=True).first()


def accrual(team_ids: Iterable[int] | None, now: datetime) -> list[dict[str, Any]]:
    """Spend the rollups have not seen yet, as rows shaped like CostDaily's values.

    Each row: `day`, the DIMENSIONS, `team__name`, the COST_AMOUNTS and `unpriced` (reasons,
    newline-separated). The runs: those accruing now and those accruing at the last pass. One
    engine pass over them only, whatever the month (and a second, as of the last pass, for those
    the pass priced but did not store).
    """
    now = utc(now, "now")
    team_ids = None if team_ids is None else list(team_ids)
    last = last_pass()
    if last is not None and last >= now:
        return []  # the rollups were written at (or after) this instant: nothing has accrued
    # What the pass stored for the runs accruing then. Those that stopped since (ended, their
    # cluster terminated) are priced too: from the pass to their end, which the next pass would
    # otherwise add.
    stored = _stored(team_ids, last) if last is not None else {}
    ids = accruing_run_ids(team_ids) | set(stored)
    if not ids:
        return []
    runs = list(Run.objects.filter(pk__any=sorted(ids)).select_related("team"))
    current = breakdowns_for_runs(runs, now=now)
    baseline = (stored | _unstored(runs, stored, last)) if last is not None else {}
    rows: dict[tuple, dict[str, Any]] = {}
    for run in runs:
        before = baseline.get(run.pk, {})
        after = {d.day: line_amounts(d) for d in current[run.pk].days}
        dims = tuple(getattr(run, name) or "" for name in DIMENSIONS)
        for day in sorted(set(before) | set(after)):
            deltas = {
                column: exact_difference(after.get(day, {}).get(column, ZERO), before.get(day, {}).get(column, ZERO))
                for column in COST_AMOUNTS
            }
            if not any(deltas.values()):
                continue
            key = (day, *dims)
            row = rows.setdefault(
                key,
                {"day": day, **dict(zip(DIMENSIONS, dims, strict=True)), "team__name": run.team.name,
                 **dict.fromkeys(COST_AMOUNTS, ZERO), "unpriced": ""},
            )  # fmt: skip
            for column, value in deltas.items():
                row[column] = exact_sum([row[column], value])
            reasons = dict.fromkeys([*row["unpriced"].split("\n"), *current[run.pk].unpriced_reasons])
            row["unpriced"] = "\n".join(r for r in reasons if r)
    return list(rows.values())


# Per run: per UTC day, the amounts under CostDaily's column names (COST_AMOUNTS).
Held = dict[int, dict[date, dict[str, Decimal]]]


def _stored(team_ids: list[int] | None, last: datetime) -> Held:
    """What the pass at `last` stored for the runs accruing then (`AccrualBaseline`, written in
    the rollups' own transaction with `last_run_at`), of the runs now in `team_ids`; one query."""
    rows = AccrualBaseline.objects.filter(as_of=last)
    if team_ids is not None:
        rows = rows.filter(run__team_id__in=team_ids)
    held: Held = defaultdict(dict)
    for run_id, day, *amounts in rows.values_list("run_id", "day", *COST_AMOUNTS):
        held[run_id][day] = dict(zip(COST_AMOUNTS, amounts, strict=True))
    return held


def _unstored(runs: Sequence[Run], stored: Held, last: datetime) -> Held:
    """What the rollups hold for the runs the pass at `last` stored nothing for.

    - A run the rollups priced without storing (finished then, a retry started since): priced
      as of `last` by the engine, as the pass priced it.
    - A run the rollups never priced (no `RunCostSpan`: written or started after the pass, or a
      classic run that joined a cluster since): nothing. Pricing it as of `last` would take
      away its share of what other runs already hold (a cluster's idle time) or hours it ran
      before it was reported.
    """
    ids = [run.pk for run in runs if run.pk not in stored]
    spanned: set[int] = set()
    for i in range(0, len(ids), CHUNK):
        spanned.update(RunCostSpan.objects.filter(run_id__any=ids[i : i + CHUNK]).values_list("run_id", flat=True))
    missing = [run for run in runs if run.pk in spanned]
    held: Held = {}
    for run_id, breakdown in (breakdowns_for_runs(missing, now=last) if missing else {}).items():
        held[run_id] = {line.day: line_amounts(line) for line in breakdown.days}
    return held


def accrual_between(rows: Sequence[dict[str, Any]], first: date, last: date) -> list[dict[str, Any]]:
    """The accrual rows dated in [first, last]."""
    return [row for row in rows if first <= row["day"] <= last]


@dataclass(frozen=True)
class TeamMonth:
    """One team's spend this UTC month so far: rollups + accrual, and what the figure is."""

    team_id: int
    team_name: str
    gpu_hours: Decimal
    compute_usd: Decimal
    egress_usd: Decimal
    idle_usd: Decimal
    unpriced_reasons: tuple[str, ...]
    as_of: datetime

    @property
    def usd(self) -> Decimal:
        return exact_sum([self.compute_usd, self.egress_usd])

    @property
    def unpriced(self) -> bool:
        return bool(self.unpriced_reasons)

    @property
    def figure(self) -> Figure:
        return estimate(self.usd, self.as_of, self.unpriced_reasons)


def team_month(
    team_ids: Iterable[int], now: datetime | None = None, accrued: Sequence[dict[str, Any]] | None = None
) -> list[TeamMonth]:
    """Each team's month to date, ordered by team name: a team with no spend gets zeros.

    1. The month's `CostDailyTeam` rows up to today, per team (exact sums).
    2. Plus `accrual` (pass it in when the caller already has it: it is computed once).
    """
    team_ids = list(team_ids)
    as_of = utc(now or timezone.now(), "now")
    first = month_start(as_of).date()
    teams = list(Group.objects.filter(pk__in=team_ids).order_by("name").values_list("pk", "name"))
    if not teams:
        return []
    sums: dict[int, dict[str, list[Decimal]]] = defaultdict(lambda: defaultdict(list))
    reasons: dict[int, dict[str, None]] = defaultdict(dict)
    rows = CostDailyTeam.objects.filter(team_id__in=team_ids, day__gte=first, day__lte=as_of.date())
    for team_id, unpriced, *amounts in rows.values_list("team_id", "unpriced", *COST_AMOUNTS):
        for column, value in zip(COST_AMOUNTS, amounts, strict=True):
            sums[team_id][column].append(value)
        reasons[team_id].update(dict.fromkeys(r for r in unpriced.split("\n") if r))
    extra = accrual(team_ids, as_of) if accrued is None else accrued
    for row in accrual_between(extra, first, as_of.date()):
        for column in COST_AMOUNTS:
            sums[row["team_id"]][column].append(row[column])
        reasons[row["team_id"]].update(dict.fromkeys(r for r in row["unpriced"].split("\n") if r))
    return [
        TeamMonth(
            team_id=team_id,
            team_name=name,
            gpu_hours=exact_sum(sums[team_id]["gpu_hours"]),
            compute_usd=exact_sum(sums[team_id]["compute_usd"]),
            egress_usd=exact_sum(sums[team_id]["egress_usd"]),
            idle_usd=exact_sum(sums[team_id]["idle_usd"]),
            unpriced_reasons=tuple(reasons[team_id]),
            as_of=as_of,
        )
        for team_id, name in teams
    ]
