"""What a run cost: its estimate and, where usage records are linked, what was billed.

`run_costs` (and `run_cost` for one run) is the one answer; runs and the pages ask for it
through `billing.engine`, billing's own modules (the policy split) here, below the door.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from billing.costs.run_costs import RunBreakdown, breakdowns_for_runs
from billing.prices.money import BILLED, Figure, utc
from billing.reconcile.compare import BilledFigure, per_run
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

    def as_json(self) -> dict[str, Any]:
        """The API's `cost`: the run page's figure. `usd`, `kind` (estimated or lower bound),
        `reasons` (what is unpriced or counted at its least) and `as_of` are the estimate's;
        `billed` is the linked usage records' figure, null until one is imported."""
        estimate = self.estimate.as_json()
        billed = self.billed_figure
        return {
            "usd": estimate["usd"],
            "kind": estimate["kind"],
            "reasons": estimate["unpriced"],
            "as_of": estimate["as_of"],
            "running": self.breakdown.running,
            # billed_figure is None exactly when self.billed is.
            "billed": None
            if billed is None or self.billed is None
            else billed.as_json() | {"records": self.billed.records},
        }


def run_costs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunCostAnswer]:
    """Each run's cost answer, keyed by run id, in a constant number of queries."""
    runs = list(runs)
    as_of = utc(now or timezone.now(), "now")
    breakdowns = breakdowns_for_runs(runs, now=as_of)
    billed = per_run(runs, now=as_of, breakdowns=breakdowns) if runs else {}
    return {
        run.pk: RunCostAnswer(breakdowns[run.pk], billed[run.pk] if billed[run.pk].records else None) for run in runs
    }


def run_cost(run: Run, now: datetime | None = None) -> RunCostAnswer:
    """`run_costs` for one run: what the run page shows."""
    return run_costs([run], now=now)[run.pk]
