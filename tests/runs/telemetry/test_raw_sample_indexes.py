"""The raw sample table keeps only the indexes something reads: each one is paid for by every
sample the ingest inserts (issue 34). Its run_id index went (runs.0021): the natural key
(run, node, GPU, ts) leads with the run, and a run's samples are read as one range of it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from runs.models import GpuSample
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def test_the_raw_table_has_no_run_only_index() -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, GpuSample._meta.db_table)
    run_only = [name for name, c in constraints.items() if c["columns"] == ["run_id"] and c["index"]]
    assert run_only == []
    assert any(c["columns"][:1] == ["run_id"] and c["unique"] for c in constraints.values())


def test_a_runs_samples_are_read_through_the_natural_key(world: World) -> None:
    run = make_run(world.vision)
    query = GpuSample.objects.filter(run=run, ts__gte=T0 - timedelta(hours=1)).values("ts")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table would be scanned whole
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        text = "\n".join(str(row[-1]) for row in cursor.fetchall())
    if connection.vendor == "postgresql":
        assert "natural_key" in text or "run_id_node_id_gpu_index_ts_key" in text, text
    else:
        assert f"sqlite_autoindex_{GpuSample._meta.db_table}_1" in text, text
