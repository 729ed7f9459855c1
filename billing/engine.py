"""The one function that answers what a run cost: `run_costs` (and `run_cost` for one run).

The estimate is `billing.costs.run_costs.breakdowns_for_runs` (serverless accelerator-hours, a share
of classic cluster uptime, egress, idle GPUs), the same the rollups write, so a run page adds
up to what the cost pages show. Where the provider's usage records are linked to the run, the
billed figure comes from `billing.reconcile` beside it. Pages and template tags compute no money.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from billing.costs.run_costs import RunBreakdown, breakdowns_for_runs
from billing.prices.money import BILLED, Figure, utc
from billing.reconcile.matching import BilledFigure, per_run
from runs.models import Run


@dataclass(frozen=True)
class RunCostAnswer:
    """A run's estimate (`breakdown`) and, when usage records are linked, what was billed."""

    breakdown: RunBreakdown
    billed: BilledFigure | None

    @property
    def estimate(self) -> Figure:
        return self.breakdown.figure

    @property
    def billed_figure(self) -> Figure | None:
        if self.billed is None:
            return None
        unpriced = (f"{self.billed.unpriced} usage record(s) without a list price",) if self.billed.unpriced else ()
        return Figure(self.billed.billed, BILLED, self.breakdown.as_of, unpriced)


def run_costs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunCostAnswer]:
    """Each run's cost answer, keyed by run id, in a constant number of queries."""
    runs = list(runs)
    as_of = utc(now or timezone.now(), "now")
    breakdowns = breakdowns_for_runs(runs, now=as_of)
    billed = per_run(runs, now=as_of) if runs else {}
    return {
        run.pk: RunCostAnswer(breakdowns[run.pk], billed[run.pk] if billed[run.pk].records else None) for run in runs
    }


def run_cost(run: Run, now: datetime | None = None) -> RunCostAnswer:
    """`run_costs` for one run: what the run page shows."""
    return run_costs([run], now=now)[run.pk]
