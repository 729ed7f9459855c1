"""The rollup keys travel to PostgreSQL as array text: every key reads back as it was sent."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone

import pytest
from django.db import connection

from runs.telemetry.upsert_sql import array_text, keys_cte
from tests.conftest import T0

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the arrays are PostgreSQL's; SQLite binds VALUES"),
]
COLUMNS = (("run_id", "bigint"), ("node_id", "bigint"), ("gpu_index", "integer"), ("bucket", "timestamptz"))


def test_keys_read_back_exactly_as_sent() -> None:
    east = timezone(timedelta(hours=5, minutes=30))
    keys = [
        (1, 2**62, 0, T0),
        (7, 8, 255, T0.replace(microsecond=123456)),
        (9, 10, 3, (T0 + timedelta(minutes=1)).astimezone(east)),  # another offset, the same instant kind
    ]
    cte, params = keys_cte(COLUMNS, keys, timedelta(minutes=1))
    with connection.cursor() as cursor:
        cursor.execute(f"{cte} SELECT run_id, node_id, gpu_index, bucket, bucket_end FROM k", params)  # noqa: S608
        got = cursor.fetchall()
    assert got == [(*key, key[3] + timedelta(minutes=1)) for key in keys]
    assert all(row[3].utcoffset() == timedelta(0) for row in got)  # the instants, in the session's UTC


def test_array_text_spells_integers_and_times() -> None:
    assert array_text([1, -2, 2**63 - 1]) == "{1,-2,9223372036854775807}"
    assert array_text([T0]) == '{"2026-11-02T09:00:00+00:00"}'
    assert array_text([]) == "{}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::timestamptz[] = %s::timestamptz[]", [array_text([T0]), [T0.astimezone(UTC)]])
        assert cursor.fetchone() == (True,)
