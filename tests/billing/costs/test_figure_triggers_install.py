"""`post_migrate` puts the cost figures' triggers back only where they are missing or out of date.

`post_migrate` follows every `migrate` and also every flush of a transactional test, where the
triggers are all in place already: there `figure_triggers.install` makes no trigger again (on
SQLite a dropped and remade trigger is a schema change every connection reads again). A table
with a column added since still gets its update trigger made again with that column, so a write
to the new column alone puts the run's figure out of date (billing.costs.figure_triggers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.sql import emit_post_migrate_signal
from django.db import connection

from billing.costs import figure_triggers
from billing.models import RunCostFigure
from runs.models import Attempt
from tests.conftest import World, make_run


def trigger_ddl_during(action: Callable[[], None]) -> list[str]:
    """The CREATE / DROP TRIGGER statements run while `action` runs."""
    seen: list[str] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if "CREATE TRIGGER" in sql or "DROP TRIGGER" in sql:
            seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        action()
    return seen


def post_migrate() -> None:
    emit_post_migrate_signal(verbosity=0, interactive=False, db=connection.alias)


def test_post_migrate_with_every_trigger_in_place_makes_none_again(db: None) -> None:
    names = {name for _, name in figure_triggers.trigger_names()}
    assert figure_triggers.installed(connection) == names
    assert trigger_ddl_during(post_migrate) == []
    assert figure_triggers.installed(connection) == names


def test_post_migrate_makes_again_only_the_missing_trigger(db: None) -> None:
    table, name = figure_triggers.trigger_names()[4]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {name}" if connection.vendor == "sqlite" else f"DROP TRIGGER {name} ON {table}")
    made = [sql for sql in trigger_ddl_during(post_migrate) if sql.startswith("CREATE TRIGGER")]
    assert len(made) == 1 and made[0].startswith(f"CREATE TRIGGER {name} ")
    assert figure_triggers.installed(connection) == {name for _, name in figure_triggers.trigger_names()}


def test_a_column_added_later_counts_once_post_migrate_ran(world: World) -> None:
    table = Attempt._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} ADD COLUMN h37b_extra integer NULL")
    post_migrate()
    run = make_run(world.vision)  # after the ALTER: PostgreSQL alters no table with pending FK checks
    before = RunCostFigure.objects.get(run=run).version
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET h37b_extra = 1 WHERE run_id = %s", [run.pk])  # noqa: S608
    assert RunCostFigure.objects.get(run=run).version > before
