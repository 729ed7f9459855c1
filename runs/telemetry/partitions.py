"""PostgreSQL: the daily partitions of the raw GPU sample tables; on SQLite every call is a no-op.

Two tables are partitioned the same way, by UTC day: `runs_gpusample` (hot rows, on `ts`) and
`runs_gpusampleblock` (compacted minutes, on `minute`, migration 0007, which has no legacy
partition). Every function takes the table as a `PartitionedTable`; the default is the first.

Migration 0005 made `runs_gpusample` a table partitioned by range of `ts`: the pre-partitioning
rows sit in `runs_gpusample_legacy` (MINVALUE up to the midnight after the migration), one
partition per UTC day follows (`runs_gpusample_pYYYYMMDD`), and `runs_gpusample_default`
takes any row no other partition does, so an insert never fails for lack of a partition.

Retention (runs/telemetry/retention.py) drops whole partitions older than the window instead of
deleting their rows. PostgreSQL's `DETACH PARTITION ... CONCURRENTLY` is refused while a
DEFAULT partition exists (and cannot run in a transaction block), so the detach here is the
plain one: metadata only, but it needs an ACCESS EXCLUSIVE lock on the parent. Every DDL
statement therefore runs under a short `lock_timeout`: queued behind a long reader, an
ACCESS EXCLUSIVE request would block every insert and chart query that arrives after it, so
it gives up instead, and the next pass (or the batched delete behind it) does the work.

Creating a day's partition uses CREATE TABLE + ATTACH PARTITION rather than
`CREATE TABLE ... PARTITION OF`: ATTACH takes SHARE UPDATE EXCLUSIVE on the parent, so
ingest and reads go on meanwhile. PostgreSQL refuses to attach a range the DEFAULT partition
holds rows of (samples that arrived early, or while the beat was down), so those rows are
moved into the new partition in the same transaction.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from runs.models import GpuSample, GpuSampleBlock

logger = logging.getLogger(__name__)

TABLE = GpuSample._meta.db_table
DEFAULT_PARTITION = f"{TABLE}_default"
ONE_DAY = timedelta(days=1)
# How long a partition DDL statement waits for its lock before giving up (see the docstring).
LOCK_TIMEOUT = "5s"
# pg_advisory_xact_lock key: serialises partition changes across workers and a doubled beat.
ADVISORY_LOCK_KEY = 0x6770_5061  # "gpPa"
_BOUND = re.compile(r"FOR VALUES FROM \((?P<start>[^)]*)\) TO \((?P<end>[^)]*)\)")


@dataclass(frozen=True)
class PartitionedTable:
    """A table partitioned by UTC day on `column`, with a DEFAULT partition."""

    model: type[Model]
    column: str

    @property
    def name(self) -> str:
        return self.model._meta.db_table

    @property
    def default(self) -> str:
        return f"{self.name}_default"


RAW = PartitionedTable(GpuSample, "ts")
BLOCKS = PartitionedTable(GpuSampleBlock, "minute")
ALL_TABLES = (RAW, BLOCKS)


@dataclass(frozen=True)
class Partition:
    """One range partition of the raw table; None stands for MINVALUE / MAXVALUE."""

    name: str
    start: datetime | None
    end: datetime | None

    def overlaps(self, start: datetime, end: datetime) -> bool:
        return (self.start is None or self.start < end) and (self.end is None or start < self.end)


def supported() -> bool:
    """Partitioning exists only on PostgreSQL; SQLite keeps one plain table."""
    return connection.vendor == "postgresql"


def day_start(moment: datetime) -> datetime:
    """The UTC midnight at or before `moment`: partitions are UTC days."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def partition_name(day: datetime, table: PartitionedTable = RAW) -> str:
    return f"{table.name}_p{day:%Y%m%d}"


def _bound(text: str) -> datetime | None:
    text = text.strip()
    if text.upper() in ("MINVALUE", "MAXVALUE"):
        return None
    # pg_get_expr quotes the literal in the session's time zone (UTC for Django's connections).
    return datetime.fromisoformat(text.strip("'"))


def _literal(moment: datetime) -> str:
    """A UTC instant as a SQL literal: partition bounds take no bind parameters."""
    return f"'{moment.astimezone(UTC).isoformat()}'::timestamptz"


def list_partitions(table: PartitionedTable = RAW) -> list[Partition]:
    """The range partitions of the raw table, oldest first (the DEFAULT partition is not one)."""
    if not supported():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [table.name],
        )
        rows = cursor.fetchall()
    partitions = []
    for name, bound in rows:
        match = _BOUND.search(bound)
        if match:
            partitions.append(Partition(name, _bound(match["start"]), _bound(match["end"])))
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(partitions, key=lambda p: p.start or epoch)


def _lock_for_ddl(cursor, lock_timeout: str | None = None) -> None:
    """Bound this transaction's lock waits, then queue behind any other partition change."""
    cursor.execute(f"SET LOCAL lock_timeout = '{lock_timeout or LOCK_TIMEOUT}'")
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])


def ensure_partitions(
    now: datetime | None = None, days_ahead: int | None = None, table: PartitionedTable = RAW
) -> list[str]:
    """Create the missing daily partitions from the retention cutoff's day to `days_ahead` days on.

    1. The days wanted: every UTC day from the one holding the raw-retention cutoff (its later
       hours are still inside the window, so a late sample for them belongs in a real
       partition) to today + `days_ahead` (AIRBOARD_TELEMETRY_PARTITION_DAYS_AHEAD).
    2. Skip each day an existing partition already covers (the legacy one covers many).
    3. Create the rest one transaction each (`_create_day`), so a lock wait or a failure costs
       one day, not the pass; the next pass retries what is still missing.
    Returns the names created. Idempotent: a second pass, or a second worker, creates nothing.
    """
    if not supported():
        return []
    now = now or timezone.now()
    ahead = settings.AIRBOARD_TELEMETRY_PARTITION_DAYS_AHEAD if days_ahead is None else days_ahead
    first = day_start(now - timedelta(days=settings.AIRBOARD_TELEMETRY_RAW_DAYS))
    last = day_start(now) + timedelta(days=ahead)
    existing = list_partitions(table)
    created = []
    day = first
    while day <= last:
        if not any(p.overlaps(day, day + ONE_DAY) for p in existing):
            name = _create_day(day, table)
            if name:
                created.append(name)
        day += ONE_DAY
    return created


def _create_day(day: datetime, table: PartitionedTable = RAW) -> str | None:
    """Create and attach the partition for one UTC day, moving in any of its rows DEFAULT holds.

    1. Take the advisory lock and look again: another worker may have just made it.
    2. Lock DEFAULT against writes (reads go on), so no sample for this day can land there
       between the move and the attach, which would make PostgreSQL refuse the attach.
    3. Create the table LIKE the parent (columns, defaults, CHECKs; no identity: rows only
       arrive through the parent), move the day's rows out of DEFAULT into it in one
       statement, and attach it. ATTACH builds the partition's indexes and checks its
       foreign keys, which is cheap on an empty or nearly empty table.
    Returns the name, or None when the day was covered by the time the lock was granted.
    """
    name = partition_name(day, table)
    end = day + ONE_DAY
    parent, default, key = table.name, table.default, table.column
    columns = ", ".join(cast(str, f.column) for f in table.model._meta.concrete_fields)  # concrete: a column each
    with transaction.atomic(), connection.cursor() as cursor:
        _lock_for_ddl(cursor)
        if any(p.overlaps(day, end) for p in list_partitions(table)):
            return None
        cursor.execute(f"LOCK TABLE {default} IN EXCLUSIVE MODE")
        cursor.execute(
            f"CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)"
        )
        # Only our own names and formatted UTC literals are interpolated.
        cursor.execute(
            f"WITH moved AS (DELETE FROM {default} WHERE {key} >= {_literal(day)} AND {key} < {_literal(end)} "  # noqa: S608
            f"RETURNING {columns}) INSERT INTO {name} ({columns}) SELECT {columns} FROM moved"
        )
        moved = cursor.rowcount
        cursor.execute(
            f"ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES FROM ({_literal(day)}) TO ({_literal(end)})"
        )
    if moved:
        logger.info("created %s and moved %d rows into it from %s", name, moved, default)
    return name


def drop_partitions_before(
    cutoff: datetime, lock_timeout: str | None = None, table: PartitionedTable = RAW
) -> list[str]:
    """Detach and drop every range partition whose rows are all older than `cutoff`.

    A partition qualifies when its upper bound is at or before the cutoff (every `ts` in it is
    below the bound). Each goes in a transaction of its own: DETACH, then DROP TABLE. One that
    cannot get its lock within `lock_timeout` (default LOCK_TIMEOUT) is left for the next pass; its rows are still
    removed by the batched delete that follows in `prune_raw_samples`, so retention holds.
    Returns the names dropped.
    """
    if not supported():
        return []
    dropped = []
    for partition in list_partitions(table):
        if partition.end is None or partition.end > cutoff:
            continue
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                _lock_for_ddl(cursor, lock_timeout)
                cursor.execute(f"ALTER TABLE {table.name} DETACH PARTITION {partition.name}")
                cursor.execute(f"DROP TABLE {partition.name}")
        except OperationalError as error:  # lock_timeout: a long query holds the table
            logger.warning("left partition %s for the next pass: %s", partition.name, error)
            continue
        dropped.append(partition.name)
    return dropped
