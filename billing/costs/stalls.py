"""What stalled GPUs have cost so far: the priced part of `runs.telemetry.stalls`.

runs finds the stalls (which GPUs, since when, up to which sample); this prices them as the
cost engine prices a GPU-hour. runs reads it through `billing.engine.stall_costs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal

from billing.costs.run_costs import gpu_hour_prices
from billing.prices.money import billed_hours, exact_product, exact_sum, to_cents
from runs.models import Run

Span = tuple[datetime, datetime]


def stall_costs(stalls: Sequence[tuple[Run, Iterable[Span]]], now: datetime) -> list[Decimal | None]:
    """The cost so far of each (run, stalled GPUs' (since, until) spans), in order; None where the
    run's accelerator has no price.

    Cost = stalled GPU-hours (exact, `billing.prices.money.billed_hours`) x the price of one
    GPU-hour of the run in force at `now` (`billing.costs.run_costs.gpu_hour_prices`: the
    accelerator-hour price of a serverless run, the worker instance price per GPU of a classic
    one), to the cent. One price query for all the runs.
    """
    runs = list({run.pk: run for run, _ in stalls}.values())
    prices = gpu_hour_prices(runs, now) if runs else {}
    costs: list[Decimal | None] = []
    for run, spans in stalls:
        price = prices[run.pk].at(now)
        hours = exact_sum(billed_hours(since, until) for since, until in spans)
        costs.append(None if price is None else to_cents(exact_product(hours, price)))
    return costs
