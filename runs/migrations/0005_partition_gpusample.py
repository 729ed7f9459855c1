"""PostgreSQL: make runs_gpusample a table partitioned by day on `ts`; SQLite: nothing.

Hand-written. The Django model is unchanged (it keeps `id` as its pk), so there are no state
operations and `makemigrations --check` stays clean. On PostgreSQL the table becomes:

    runs_gpusample            PARTITION BY RANGE (ts); PRIMARY KEY (id, ts), because a unique
                              index on a partitioned table must contain the partition key
    runs_gpusample_legacy     the old table, attached FROM (MINVALUE) TO (the midnight after
                              its newest row or today): its rows are not copied
    runs_gpusample_pYYYYMMDD  one per UTC day, from tomorrow for INITIAL_DAYS_AHEAD days
                              (runs.partitions keeps adding them)
    runs_gpusample_default    whatever no other partition takes, so an insert never fails

The steps live here rather than in runs.partitions so this migration keeps doing what it did
when it was written, whatever that module becomes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import migrations

TABLE = "runs_gpusample"
LEGACY = "runs_gpusample_legacy"
DEFAULT = "runs_gpusample_default"
INITIAL_DAYS_AHEAD = 7


def _literal(moment: datetime) -> str:
    """A UTC instant as a SQL literal: partition bounds and DDL take no bind parameters."""
    return f"'{moment.astimezone(UTC).isoformat()}'::timestamptz"


def _rows(cursor, sql: str, params: tuple = ()) -> list[tuple]:
    cursor.execute(sql, params)
    return cursor.fetchall()


def partition_gpusample(apps, schema_editor) -> None:
    """Swap the plain table for a partitioned one that has the old table as its first partition.

    1. Lock the table; stop if it is already partitioned (a re-run after a reverse no-op).
    2. Read what the new parent must keep: the next id the identity would hand out, the
       newest `ts`, and the definitions of the secondary indexes, unique and foreign-key
       constraints (introspected, so the columns and names Django chose carry over).
    3. Rename the old table to runs_gpusample_legacy, drop its identity (the parent owns the
       sequence now) and its single-column primary key, and rename its indexes out of the way.
    4. Create the partitioned parent LIKE the old table (same columns in the same order,
       defaults, CHECKs), with identity starting at that next id, PRIMARY KEY (id, ts), and
       the captured indexes and constraints under their original names.
    5. Add a CHECK on the legacy table's `ts` range and attach it: PostgreSQL validates the
       range from the CHECK instead of rescanning; the equal indexes and foreign keys are
       adopted rather than rebuilt; only the (id, ts) key is built. Then drop the CHECK.
    6. Create the daily partitions ahead and the DEFAULT partition.
    """
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        ((relkind,),) = _rows(cursor, "SELECT relkind FROM pg_class WHERE oid = %s::regclass", (TABLE,))
        if relkind == "p":
            return

        ((next_id,),) = _rows(cursor, "SELECT nextval(pg_get_serial_sequence(%s, 'id'))", (TABLE,))
        ((newest,),) = _rows(cursor, f"SELECT max(ts) FROM {TABLE}")  # noqa: S608 (constant)
        # Index definitions, read while the table still has its own name so they replay verbatim
        # on the new parent; constraint-backed indexes come back with their constraints.
        index_sql = [
            sql
            for (sql,) in _rows(
                cursor,
                "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "WHERE i.indrelid = %s::regclass AND NOT EXISTS "
                "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)",
                (TABLE,),
            )
        ]
        constraints = _rows(
            cursor,
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype IN ('u', 'f') ORDER BY contype DESC, conname",
            (TABLE,),
        )
        ((pkey,),) = _rows(
            cursor, "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'", (TABLE,)
        )
        indexes = [
            name
            for (name,) in _rows(
                cursor, "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass", (TABLE,)
            )
        ]

        cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {LEGACY}")
        cursor.execute(f"ALTER TABLE {LEGACY} ALTER COLUMN id DROP IDENTITY")
        cursor.execute(f'ALTER TABLE {LEGACY} DROP CONSTRAINT "{pkey}"')
        for name in indexes:
            if name != pkey:
                # Index names are schema-wide: the parent's must be free. 63 = NAMEDATALEN - 1.
                cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{("legacy_" + name)[:63]}"')

        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {LEGACY} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE) "
            "PARTITION BY RANGE (ts)"
        )
        cursor.execute(
            f"ALTER TABLE {TABLE} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {int(next_id)})"
        )
        cursor.execute(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{pkey}" PRIMARY KEY (id, ts)')
        for name, definition in constraints:
            cursor.execute(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{name}" {definition}')
        for sql in index_sql:
            cursor.execute(sql)

        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        upper = today + timedelta(days=1)
        if newest is not None and newest >= upper:
            upper = newest.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
        cursor.execute(f"ALTER TABLE {LEGACY} ADD CONSTRAINT gpusample_legacy_range CHECK (ts < {_literal(upper)})")
        cursor.execute(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {LEGACY} FOR VALUES FROM (MINVALUE) TO ({_literal(upper)})"
        )
        cursor.execute(f"ALTER TABLE {LEGACY} DROP CONSTRAINT gpusample_legacy_range")

        for day in range(INITIAL_DAYS_AHEAD):
            start = upper + timedelta(days=day)
            cursor.execute(
                f"CREATE TABLE {TABLE}_p{start:%Y%m%d} PARTITION OF {TABLE} "
                f"FOR VALUES FROM ({_literal(start)}) TO ({_literal(start + timedelta(days=1))})"
            )
        cursor.execute(f"CREATE TABLE {DEFAULT} PARTITION OF {TABLE} DEFAULT")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0004_failure_analysis_postmortem"),
    ]

    operations = [
        # Reverse is a no-op: the partitioned table serves the 0004 model unchanged (same
        # columns, constraints and index names), and a forward re-run sees it and stops.
        migrations.RunPython(partition_gpusample, migrations.RunPython.noop, elidable=False),
    ]
