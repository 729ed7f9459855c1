"""Template filters for money on pages billing/ does not own. No tag computes money (issue 17)."""

from __future__ import annotations

from decimal import Decimal

from django import template

from billing.costs.reports import decimal_str
from billing.prices.money import BYTES_PER_GB, format_usd

register = template.Library()


@register.filter
def gigabytes(num_bytes: int) -> str:
    """Bytes as decimal GB (10^9, as egress is priced), to three places: 1234567890 -> '1.235'."""
    return f"{num_bytes / BYTES_PER_GB:,.3f}"


@register.filter
def normalize(value: Decimal) -> str:
    """A price without trailing zeros: Decimal('0.020000') -> '0.02'."""
    return decimal_str(value)


@register.filter
def usd(value: Decimal | None) -> str:
    """Money as every page shows it (`billing.prices.money.format_usd`): '$1,234.57', half up to the cent."""
    return format_usd(value)
