"""`field__any=[...]`: membership in a long list of values, as one array parameter on PostgreSQL.

`field__in=ids` binds one parameter per value: at 5,000 run ids (the failures overview prices
up to MAX_FAILURES runs) Django prepared each, psycopg split the statement around each, and
PostgreSQL parsed and planned 5,000 literals (~17 ms of planning alone). `field = ANY(%s)` with
the list as one array is the same test. Other databases take `IN` as before.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.models import Field
from django.db.models.lookups import In


@Field.register_lookup
class AnyOf(In):
    """`IN (...)` everywhere, `= ANY(array)` on PostgreSQL when given a list of values."""

    lookup_name = "any"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        if not isinstance(self.rhs, list | tuple | set | frozenset):  # a subquery or expression
            return super().as_sql(compiler, connection)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        field = self.lhs.output_field
        values = [field.get_db_prep_value(v, connection, prepared=True) for v in self.rhs if v is not None]
        if not values:
            raise EmptyResultSet
        return f"{lhs} = ANY(%s)", [*lhs_params, values]
