"""The database itself marks a stored run cost figure out of date, on every write it rests on.

A run's stored figure (`RunCostFigure`, billing.costs.figures) is the engine's answer as long as
nothing it was priced from changes: the run's own row, its attempts (started, ended, added,
removed), its egress records and its billed usage records (imported, linked, unlinked), and the
price book (kept beside the figure and compared on read). Those rows are written from many
places (the collectors' and the push API's ingest, bulk `update()`s, egress derivation, usage
imports and reconcile linking, the admin, demo data), some with `bulk_create` or `update()`, which
send no Django signal. So the database does it: a trigger on each of those tables bumps the run's
`RunCostFigure.version` in the same transaction as the write, whichever code wrote it, and a
figure is read only while the version it was priced at (`priced_version`) is still the version.

- Every run has a row, from its insert on (no figure until the pass prices it), so the runs
  without a usable figure are read from this table alone (`figures.unusable`); a write to a
  run without one makes it (version 1), so a pass pricing that run at the same time stores a
  figure already out of date (the pass reads the versions before it prices: `figures.versions`).
- An update bumps only when a column other than `updated_at` changed (PostgreSQL: the rows
  compared whole as JSON, so a column added later counts too; SQLite: the columns the table has
  when the triggers are installed, which `install` does after every `migrate`).
- A run deleted takes its figure row with it (an attempt deleted first may have bumped it).

PostgreSQL: statement triggers over transition tables, one upsert a statement however many rows
(`bulk_create` of 100,000 attempts included). SQLite (development and tests): row triggers.
`install` is idempotent: migration billing 0018 runs it, and `post_migrate` runs it again, since
a later migration that rebuilds one of these tables on SQLite (how SQLite alters a column) drops
its triggers.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from billing.models import BilledUsage, EgressRecord, RunCostFigure
from runs.models import Attempt, Run

# The models' own table names, no input of anyone's.
RUNS = Run._meta.db_table
FIGURES = RunCostFigure._meta.db_table
# Tables a run's figure rests on and the column naming the run: (table, run column).
WATCHED = (
    (RUNS, "id"),
    (Attempt._meta.db_table, "run_id"),
    (EgressRecord._meta.db_table, "run_id"),
    (BilledUsage._meta.db_table, "run_id"),
)
# Columns whose change alone is no change to what the figure rests on.
IGNORED = ("updated_at",)
PREFIX = "airboard_cost_inputs"


def trigger_names() -> list[tuple[str, str]]:
    """(table, trigger name) of every trigger `install` makes on either backend."""
    return [(table, f"{PREFIX}_{event}_{table}") for table, _ in WATCHED for event in ("ins", "upd", "del")]


# --- PostgreSQL ----------------------------------------------------------------------------------

_PG_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION {PREFIX}_bump(ids bigint[]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO {FIGURES} AS f (run_id, version, kind, price_book)
    SELECT r.id, 1, '', '' FROM {RUNS} r WHERE r.id = ANY(ids) ORDER BY r.id
    ON CONFLICT (run_id) DO UPDATE SET version = f.version + 1
$$;
CREATE OR REPLACE FUNCTION {PREFIX}_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {PREFIX}_bump(ARRAY(SELECT DISTINCT run_id FROM new_rows));
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION {PREFIX}_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {PREFIX}_bump(ARRAY(SELECT DISTINCT run_id FROM old_rows));
    RETURN NULL;
END $$;
-- TG_ARGV[0]: the column naming the run. Both the old and the new run of a row that changed.
CREATE OR REPLACE FUNCTION {PREFIX}_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {PREFIX}_bump(ARRAY(
        SELECT DISTINCT (side ->> TG_ARGV[0])::bigint
        FROM (SELECT to_jsonb(o) AS a, to_jsonb(n) AS b FROM old_rows o JOIN new_rows n ON n.id = o.id) pair,
             LATERAL (VALUES (a), (b)) AS sides (side)
        WHERE a - '{{{",".join(IGNORED)}}}'::text[] IS DISTINCT FROM b - '{{{",".join(IGNORED)}}}'::text[]
    ));
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION {PREFIX}_run_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {PREFIX}_bump(ARRAY(SELECT id FROM new_rows));
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION {PREFIX}_run_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {FIGURES} WHERE run_id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;
"""  # noqa: S608 (the models' own table names)


def _pg_triggers(table: str, column: str) -> dict[str, str]:
    """Trigger name -> its CREATE TRIGGER statement, for one watched table."""
    name = f"{PREFIX}_{{}}_{table}"
    out = {
        name.format("upd"): (
            f"CREATE TRIGGER {name.format('upd')} AFTER UPDATE ON {table}"
            " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_updated('{column}')"
        ),
    }
    if column == "id":  # the run's own row: a row from its start, none once it is gone
        out[name.format("ins")] = (
            f"CREATE TRIGGER {name.format('ins')} AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_run_inserted()"
        )
        out[name.format("del")] = (
            f"CREATE TRIGGER {name.format('del')} AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_run_deleted()"
        )
        return out
    out[name.format("ins")] = (
        f"CREATE TRIGGER {name.format('ins')} AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows"
        f" FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_inserted()"
    )
    out[name.format("del")] = (
        f"CREATE TRIGGER {name.format('del')} AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows"
        f" FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_deleted()"
    )
    return out


def _install_pg(cursor: Any) -> None:
    cursor.execute(_PG_FUNCTIONS)
    for table, column in WATCHED:
        for name, create in _pg_triggers(table, column).items():
            # Created once and left in place: a trigger dropped and made again on a live
            # database would let a write through in between.
            cursor.execute(
                "SELECT 1 FROM pg_trigger WHERE tgname = %s AND tgrelid = %s::regclass AND NOT tgisinternal",
                [name, table],
            )
            if cursor.fetchone() is None:
                cursor.execute(create)


def _uninstall_pg(cursor: Any) -> None:
    for table, name in trigger_names():
        cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
    for function in ("updated()", "inserted()", "deleted()", "run_inserted()", "run_deleted()", "bump(bigint[])"):
        cursor.execute(f"DROP FUNCTION IF EXISTS {PREFIX}_{function}")


# --- SQLite ---------------------------------------------------------------------------------------


def _sqlite_bump(run: str) -> str:
    return (
        f"INSERT INTO {FIGURES} (run_id, version, kind, price_book) SELECT id, 1, '', '' FROM {RUNS}"  # noqa: S608
        f" WHERE id = {run} ON CONFLICT (run_id) DO UPDATE SET version = version + 1;"
    )


def _sqlite_triggers(cursor: Any, connection: Any, table: str, column: str) -> dict[str, str]:
    columns = [c for c in _column_names(cursor, connection, table) if c not in IGNORED]
    changed = f"({', '.join(f'OLD.{c}' for c in columns)}) IS NOT ({', '.join(f'NEW.{c}' for c in columns)})"
    name = f"{PREFIX}_{{}}_{table}"
    if column == "id":
        return {
            name.format("ins"): (
                f"CREATE TRIGGER {name.format('ins')} AFTER INSERT ON {table} BEGIN {_sqlite_bump('NEW.id')} END"
            ),
            name.format("upd"): (
                f"CREATE TRIGGER {name.format('upd')} AFTER UPDATE ON {table} WHEN {changed}"
                f" BEGIN {_sqlite_bump('NEW.id')} END"
            ),
            name.format("del"): (
                f"CREATE TRIGGER {name.format('del')} AFTER DELETE ON {table}"  # noqa: S608
                f" BEGIN DELETE FROM {FIGURES} WHERE run_id = OLD.id; END"
            ),
        }
    return {
        name.format("ins"): (
            f"CREATE TRIGGER {name.format('ins')} AFTER INSERT ON {table} BEGIN {_sqlite_bump(f'NEW.{column}')} END"
        ),
        name.format("upd"): (
            f"CREATE TRIGGER {name.format('upd')} AFTER UPDATE ON {table} WHEN {changed}"
            f" BEGIN {_sqlite_bump(f'OLD.{column}')} {_sqlite_bump(f'NEW.{column}')} END"
        ),
        name.format("del"): (
            f"CREATE TRIGGER {name.format('del')} AFTER DELETE ON {table} BEGIN {_sqlite_bump(f'OLD.{column}')} END"
        ),
    }


def _install_sqlite(cursor: Any, connection: Any) -> None:
    # Made again where missing or made from other columns than the tables have now (no concurrent
    # writers here); left alone where already as wanted, since post_migrate also follows every flush
    # of a transactional test, and a schema change makes every connection read the schema again.
    cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s", [f"{PREFIX}%"])
    present = dict(cursor.fetchall())
    for table, column in WATCHED:
        for name, create in _sqlite_triggers(cursor, connection, table, column).items():
            if present.get(name) != create:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
                cursor.execute(create)


def _uninstall_sqlite(cursor: Any) -> None:
    for _, name in trigger_names():
        cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


# --- Both -----------------------------------------------------------------------------------------


def ready(connection: Any) -> bool:
    """Whether the schema has what the triggers write (billing 0018 applied: a figure's `version`)."""
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        if not {FIGURES, *(table for table, _ in WATCHED)} <= tables:
            return False
        return "version" in _column_names(cursor, connection, FIGURES)


def _column_names(cursor: Any, connection: Any, table: str) -> list[str]:
    """A table's column names in order. On SQLite read from `PRAGMA table_info` alone: Django's
    `get_table_description` also parses the table's SQL for collations (sqlparse, ~30 ms a table),
    and `install` runs after every flush of a transactional test."""
    if connection.vendor == "sqlite":
        cursor.execute(f"PRAGMA table_info({connection.ops.quote_name(table)})")
        return [row[1] for row in cursor.fetchall()]
    return [c.name for c in connection.introspection.get_table_description(cursor, table)]


def install(connection: Any) -> None:
    """Make the triggers (and PostgreSQL's functions) where missing; nothing when the schema lacks them."""
    if connection.vendor not in ("postgresql", "sqlite") or not ready(connection):
        return
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _install_pg(cursor)
        else:
            _install_sqlite(cursor, connection)
        # Every run has a row from then on (the insert trigger): the runs without a usable figure
        # are found from the figures' side (`figures.unusable`), never by reading every run.
        cursor.execute(
            f"INSERT INTO {FIGURES} (run_id, version, kind, price_book) SELECT r.id, 0, '', '' FROM {RUNS} r"  # noqa: S608
            f" WHERE NOT EXISTS (SELECT 1 FROM {FIGURES} f WHERE f.run_id = r.id)"
        )


def uninstall(connection: Any) -> None:
    """Drop what `install` made (migrating billing back before 0018)."""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _uninstall_pg(cursor)
        elif connection.vendor == "sqlite":
            _uninstall_sqlite(cursor)


def installed(connection: Any) -> set[str]:
    """The names of `install`'s triggers present in the database."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE %s AND NOT tgisinternal", [f"{PREFIX}%"])
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s", [f"{PREFIX}%"])
        return {row[0] for row in cursor.fetchall()}
