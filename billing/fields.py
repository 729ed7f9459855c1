"""An exact decimal column: NUMERIC on PostgreSQL, text on SQLite.

Django's DecimalField on SQLite goes through REAL (15 significant digits), and rollups of the
exact cost engine carry up to 15 decimal places: a stored day of spend must add up to the
per-run figures to the last digit, so SQLite keeps the decimal as its text.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, Inexact, localcontext
from typing import Any

from django.db import models


class ExactDecimalField(models.Field):
    """A Decimal stored without rounding; values that need rounding to fit are refused."""

    description = "Exact decimal (numeric on PostgreSQL, text on SQLite)"

    def __init__(self, *args: Any, max_digits: int = 38, decimal_places: int = 15, **kwargs: Any) -> None:
        self.max_digits, self.decimal_places = max_digits, decimal_places
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> tuple[str, str, Sequence[Any], dict[str, Any]]:
        name, path, args, kwargs = super().deconstruct()
        kwargs["max_digits"], kwargs["decimal_places"] = self.max_digits, self.decimal_places
        return name, path, args, kwargs

    def get_internal_type(self) -> str:
        # Not "DecimalField": that would bring SQLite's float converter back.
        return "ExactDecimalField"

    def db_type(self, connection: Any) -> str:
        if connection.vendor == "sqlite":
            return "text"
        return f"numeric({self.max_digits}, {self.decimal_places})"

    def to_python(self, value: Any) -> Decimal | None:
        if value is None or isinstance(value, Decimal):
            return value
        return Decimal(str(value))

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Decimal | None:
        return self.to_python(value)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        value = self.to_python(value)
        if value is None:
            return None
        with localcontext() as ctx:
            ctx.prec = self.max_digits
            ctx.traps[Inexact] = True
            value = value.quantize(Decimal(1).scaleb(-self.decimal_places))
        return format(value, "f") if connection.vendor == "sqlite" else value
