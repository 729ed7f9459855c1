"""runs/telemetry/partitions.py and migration 0005: the raw samples partitioned by day on PostgreSQL.

The PostgreSQL tests work at dates far after the test database was migrated (FUTURE), where
only the DEFAULT partition exists until a test creates daily ones, so they control every
partition they touch. Their DDL rolls back with the test's transaction, except in the one
test that needs a second connection to see it; that one drops what it made.
"""

from __future__ import annotations

import importlib
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from dashboard.schedule import BEAT_SCHEDULE
from runs.models import GpuHour, GpuMinute, GpuSample, Node, Run
from runs.tasks import maintain_telemetry_partitions
from runs.telemetry import blocks, partitions
from runs.telemetry.retention import prune_raw_samples
from runs.telemetry.store import store_gpu_samples
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db
needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="table partitioning exists only on PostgreSQL; SQLite has one table"
)

FUTURE = datetime(2031, 6, 10, tzinfo=UTC)  # a midnight, long after any partition the migration made
DAY = timedelta(days=1)


def _samples(run: Run, start: datetime, count: int, step: timedelta) -> list[GpuSample]:
    node = Node.objects.get(attempt__run=run)
    return [
        GpuSample(run=run, node=node, gpu_index=0, ts=start + i * step, utilization_gpu=float(i % 100))
        for i in range(count)
    ]


def _rows_by_table() -> Counter[str]:
    """Where each stored sample physically is: partition name -> rows."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text, count(*) FROM {partitions.TABLE} GROUP BY 1")  # noqa: S608
        return Counter(dict(cursor.fetchall()))


def _fire_deferred_checks() -> None:
    """Run the inserts' deferred foreign-key checks now, as their commit would in production.

    The test's transaction never commits, and PostgreSQL refuses to DROP a table that still
    has trigger events pending in the current transaction.
    """
    connection.check_constraints()


def _names() -> list[str]:
    return [p.name for p in partitions.list_partitions()]


def test_beat_keeps_partitions_on_the_collect_queue(settings) -> None:
    entry = BEAT_SCHEDULE["maintain-telemetry-partitions"]
    assert entry["task"] == maintain_telemetry_partitions.name == "runs.maintain_telemetry_partitions"
    assert settings.CELERY_TASK_ROUTES["runs.maintain_*"] == {"queue": "collect"}


@pytest.mark.skipif(connection.vendor == "postgresql", reason="checks the SQLite no-op; PostgreSQL is tested below")
def test_sqlite_has_no_partitions_and_upkeep_is_a_no_op(world: World) -> None:
    run = make_run(world.vision)
    store_gpu_samples(_samples(run, FUTURE, 10, timedelta(hours=1)))
    assert maintain_telemetry_partitions.apply().get() == 0
    assert partitions.list_partitions() == []
    assert partitions.drop_partitions_before(FUTURE + 30 * DAY) == []
    assert GpuSample.objects.count() == 10


@needs_postgresql
def test_migrated_table_is_partitioned_with_legacy_and_default(db: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [partitions.TABLE])
        assert cursor.fetchone() == ("p",)
        cursor.execute(
            "SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass AND c.relname = %s",
            [partitions.TABLE, partitions.DEFAULT_PARTITION],
        )
        assert cursor.fetchone() == (1,)
        # A unique key on a partitioned table must hold the partition key: (id, ts).
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
            [partitions.TABLE],
        )
        assert cursor.fetchone() == ("PRIMARY KEY (id, ts)",)
    legacy, *daily = partitions.list_partitions()
    assert (legacy.name, legacy.start) == ("runs_gpusample_legacy", None)
    assert daily and daily[0].start == legacy.end
    assert all(p.end - p.start == DAY for p in daily)


@needs_postgresql
def test_ensure_creates_the_window_and_days_ahead_once(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 2
    now = FUTURE + timedelta(hours=15)

    created = partitions.ensure_partitions(now=now, days_ahead=3)

    # From the day holding the cutoff (FUTURE - 2 days + 15 h) to three days after today.
    assert created == [partitions.partition_name(FUTURE + d * DAY) for d in range(-2, 4)]
    assert partitions.ensure_partitions(now=now, days_ahead=3) == []
    by_name = {p.name: p for p in partitions.list_partitions()}
    assert (by_name[created[0]].start, by_name[created[0]].end) == (FUTURE - 2 * DAY, FUTURE - DAY)
    # A sample inside the new range lands in its day's partition, not in DEFAULT.
    run = make_run(world.vision)
    store_gpu_samples(_samples(run, FUTURE + timedelta(hours=1), 3, timedelta(minutes=1)))
    assert _rows_by_table() == {partitions.partition_name(FUTURE): 3}


@needs_postgresql
def test_samples_in_default_move_into_the_partition_made_for_their_day(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 1
    run = make_run(world.vision)
    early = _samples(run, FUTURE + timedelta(hours=6), 120, timedelta(minutes=1))  # no partition yet
    assert store_gpu_samples(early).inserted == 120
    assert _rows_by_table() == {partitions.DEFAULT_PARTITION: 120}
    ids = set(GpuSample.objects.values_list("id", flat=True))
    minutes, hours = GpuMinute.objects.count(), GpuHour.objects.count()

    created = partitions.ensure_partitions(now=FUTURE, days_ahead=1)

    day = partitions.partition_name(FUTURE)
    assert day in created
    assert _rows_by_table() == {day: 120}
    assert set(GpuSample.objects.values_list("id", flat=True)) == ids
    assert (GpuMinute.objects.count(), GpuHour.objects.count()) == (minutes, hours)
    # The natural key still holds after the move: a resend is all duplicates, ON CONFLICT included.
    resent = store_gpu_samples(_samples(run, FUTURE + timedelta(hours=6), 121, timedelta(minutes=1)))
    assert (resent.inserted, resent.duplicates) == (1, 120)
    assert _rows_by_table() == {day: 121}


@needs_postgresql
def test_prune_drops_whole_old_days_and_deletes_the_partial_one_in_batches(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 2
    run = make_run(world.vision)
    partitions.ensure_partitions(now=FUTURE + 2 * DAY, days_ahead=1)  # days FUTURE .. FUTURE + 3
    store_gpu_samples(_samples(run, FUTURE, 4 * 24, timedelta(hours=1)))  # one an hour, four days
    _fire_deferred_checks()
    minutes, hours = GpuMinute.objects.count(), GpuHour.objects.count()
    now = FUTURE + 3 * DAY + timedelta(hours=12)  # cutoff: FUTURE + 1 day + 12 h

    result = prune_raw_samples(now=now, batch_size=5)

    first, second = partitions.partition_name(FUTURE), partitions.partition_name(FUTURE + DAY)
    # FUTURE's day is the only one of ours wholly before the cutoff; the migration's partitions
    # (years before FUTURE) are past retention too, and go with it.
    assert first in result.partitions_dropped and second not in result.partitions_dropped
    assert {p.name for p in partitions.list_partitions() if p.end <= result.cutoff} == set()
    assert (result.deleted, result.batches) == (12, 3)  # 00:00-11:00 of the cutoff's day: 5 + 5 + 2
    assert first not in _names() and second in _names()
    assert not GpuSample.objects.filter(ts__lt=result.cutoff).exists()
    assert GpuSample.objects.count() == 4 * 24 - 24 - 12
    assert (GpuMinute.objects.count(), GpuHour.objects.count()) == (minutes, hours)  # rollups stay

    # A late sample for the dropped day is still accepted (DEFAULT), then goes with the next pass,
    # and no partition is made again for a day past retention.
    late = store_gpu_samples(_samples(run, FUTURE + timedelta(minutes=30), 1, timedelta(0)))
    assert late.inserted == 1 and _rows_by_table()[partitions.DEFAULT_PARTITION] == 1
    _fire_deferred_checks()
    assert first not in partitions.ensure_partitions(now=now, days_ahead=1)
    again = prune_raw_samples(now=now + DAY)
    assert again.partitions_dropped == (second,) and again.deleted == 1 + 12
    assert partitions.DEFAULT_PARTITION not in _rows_by_table()


@needs_postgresql
def test_a_partition_whose_lock_is_held_is_left_and_its_rows_still_go(world: World, settings, monkeypatch) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 1
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "100ms")
    run = make_run(world.vision)
    partitions.ensure_partitions(now=FUTURE + DAY, days_ahead=0)  # FUTURE, FUTURE + 1 day
    store_gpu_samples(_samples(run, FUTURE, 24, timedelta(hours=1)))
    _fire_deferred_checks()
    now = FUTURE + 2 * DAY + timedelta(hours=1)
    # A long report query on a second connection holds ACCESS SHARE on the parent until it
    # ends: DETACH's ACCESS EXCLUSIVE must wait for it, a batched DELETE need not. ONLY, because
    # this test's own open transaction holds the partitions it attached.
    reader = connection.copy()
    try:
        reader.set_autocommit(False)
        with reader.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '10s'")
            cursor.execute(f"LOCK TABLE ONLY {partitions.TABLE} IN ACCESS SHARE MODE")
        result = prune_raw_samples(now=now)
        assert result.partitions_dropped == ()
        assert result.deleted == 24
        assert partitions.partition_name(FUTURE) in _names()
    finally:
        reader.rollback()
        reader.close()
    assert partitions.partition_name(FUTURE) in prune_raw_samples(now=now).partitions_dropped


@needs_postgresql
def test_migration_partitions_a_table_that_has_rows(world: World) -> None:
    """Rebuild 0004's plain table, fill it, run 0005's forward step: every row stays, in place."""
    migration = importlib.import_module("runs.migrations.0005_partition_gpusample")
    old_state = MigrationLoader(connection).project_state(("runs", "0004_failure_analysis_postmortem"))
    run = make_run(world.vision)
    today = partitions.day_start(datetime.now(UTC))
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partitions.TABLE}")  # rolled back with the test
    with connection.schema_editor() as editor:
        old_model = old_state.apps.get_model("runs", "GpuSample")
        editor.create_model(old_model)
        # The columns added since (0013's NVLink), which today's store writes: 0005 keeps any column.
        for name in blocks.ADDED_IN_V2:
            editor.add_field(old_model, GpuSample._meta.get_field(name))
    old = _samples(run, today - 20 * DAY, 30, DAY)  # 20 days ago to 9 days ahead (a skewed clock)
    assert store_gpu_samples(old).inserted == 30
    _fire_deferred_checks()
    before = dict(GpuSample.objects.values_list("id", "ts"))

    with connection.schema_editor() as editor:
        migration.partition_gpusample(None, editor)
        migration.partition_gpusample(None, editor)  # a second run sees the job done

    legacy, *daily = partitions.list_partitions()
    assert (legacy.name, legacy.start, legacy.end) == ("runs_gpusample_legacy", None, today + 10 * DAY)
    assert [p.start for p in daily] == [today + (10 + d) * DAY for d in range(migration.INITIAL_DAYS_AHEAD)]
    assert dict(GpuSample.objects.values_list("id", "ts")) == before
    assert _rows_by_table() == {"runs_gpusample_legacy": 30}
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [partitions.TABLE])
        names = {name for (name,) in cursor.fetchall()}
    assert {"runs_gpusample_pkey", "gpusample_natural_key", "gpusample_ts_idx"} <= names
    # Old keys still conflict, new rows get ids after the old ones and go to their day.
    resent = store_gpu_samples(_samples(run, today - 20 * DAY, 31, DAY))
    assert (resent.inserted, resent.duplicates) == (1, 30)
    newest = GpuSample.objects.get(ts=today + 10 * DAY)
    assert newest.id > max(before)
    assert _rows_by_table()[partitions.partition_name(today + 10 * DAY)] == 1
