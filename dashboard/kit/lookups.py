"""`field__any=[...]`: membership in a long list of values, as one array parameter on PostgreSQL.

`field__in=ids` binds one parameter per value: at 5,000 run ids (the failures overview prices
up to MAX_FAILURES runs) Django prepared each, psycopg split the statement around each, and
PostgreSQL parsed and planned 5,000 literals (~17 ms of planning alone). `field = ANY(%s)` with
the list as one array is the same test. Other databases, and a subquery, take `IN` as before.
On a foreign key (`run__any=...`, `run_id__any=...`) the values are ids or model instances,
as for `run__in`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.models import Field, ForeignObject
from django.db.models.fields.related_lookups import RelatedIn
from django.db.models.lookups import In


def _any_sql(lookup: In, compiler: Any, connection: Any) -> tuple[str, list[Any]] | None:
    """`lhs = ANY(%s)` with the prepared values as one list; None when the rhs is not a list."""
    if not isinstance(lookup.rhs, list | tuple | set | frozenset):  # a subquery or an expression
        return None
    lhs, lhs_params = lookup.process_lhs(compiler, connection)
    field = lookup.lhs.output_field
    values = [field.get_db_prep_value(v, connection, prepared=True) for v in lookup.rhs if v is not None]
    if not values:
        raise EmptyResultSet
    return f"{lhs} = ANY(%s)", [*lhs_params, values]


@Field.register_lookup
class AnyOf(In):
    """`IN (...)` everywhere, `= ANY(array)` on PostgreSQL when given a list of values."""

    lookup_name = "any"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, Sequence[Any]]:
        return _any_sql(self, compiler, connection) or super().as_sql(compiler, connection)


@ForeignObject.register_lookup
class RelatedAnyOf(RelatedIn):
    """`AnyOf` on a relation: model instances or ids, normalized as `__in` does them."""

    lookup_name = "any"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, Sequence[Any]]:
        if len(self.lhs.output_field.get_path_info()[-1].target_fields) != 1:  # a multi-column relation
            return super().as_sql(compiler, connection)
        return _any_sql(self, compiler, connection) or super().as_sql(compiler, connection)
