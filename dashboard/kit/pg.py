"""PostgreSQL session settings the pages rely on, applied when a connection opens.

JIT off: the pages' queries are short, and compiling cost more than it saved. At 100,000 runs
the fleet page's hour grouping (over jit_above_cost) spent 234 ms of its 358 compiling; 214 ms
without. A plain `SET` after connecting rather than a libpq `options` startup parameter: that
would replace an operator's PGOPTIONS, and PgBouncer refuses startup parameters it does not
track. A `jit` named in DATABASE_URL's `?options=` is the operator's choice and is left alone.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper


def session_settings(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """`connection_created` receiver: JIT off on a new PostgreSQL connection."""
    if connection.vendor != "postgresql":
        return
    if "jit" in str(connection.settings_dict.get("OPTIONS", {}).get("options", "")):
        return
    with connection.cursor() as cursor:
        cursor.execute("SET jit = off")
