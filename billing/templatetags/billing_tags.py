"""Template tags for cost breakdowns on pages billing/ does not own (the run page)."""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.utils import timezone

from billing.costs import BYTES_PER_GB
from billing.reconcile import BilledFigure, billed_for_run
from billing.reports import decimal_str
from billing.run_costs import RunBreakdown, breakdowns_for_runs
from runs.models import Run

register = template.Library()


@register.simple_tag
def run_cost_breakdown(run: Run) -> RunBreakdown:
    """Classic cluster, idle and per-interval cost of `run` (a constant handful of queries)."""
    return breakdowns_for_runs([run], now=timezone.now())[run.pk]


@register.filter
def gigabytes(num_bytes: int) -> str:
    """Bytes as decimal GB (10^9, as egress is priced), to three places: 1234567890 -> '1.235'."""
    return f"{num_bytes / BYTES_PER_GB:,.3f}"


@register.filter
def normalize(value: Decimal) -> str:
    """A price without trailing zeros: Decimal('0.020000') -> '0.02'."""
    return decimal_str(value)


@register.simple_tag
def run_billed(run: Run) -> BilledFigure | None:
    """What the provider billed for `run` (imported usage records), or None before any arrive."""
    return billed_for_run(run)
