"""The rollups' natural keys are (run, time, node, GPU): a run's minutes or hours in a time
window, and its newest minute, are read as one range of that index, not a scan of the run."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from runs.models import GpuHour, GpuMinute
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def key_name(model) -> str:
    """The natural key's index as the plan names it (SQLite names a table's UNIQUE its autoindex)."""
    if connection.vendor == "postgresql":
        return f"{model._meta.model_name}_natural_key"
    return f"sqlite_autoindex_{model._meta.db_table}_1"


def plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table would be scanned whole
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.parametrize(("model", "field"), [(GpuMinute, "minute"), (GpuHour, "hour")])
def test_a_runs_window_is_one_range_of_the_natural_key(world: World, model, field: str) -> None:
    run = make_run(world.vision)
    text = plan(model.objects.filter(run=run, **{f"{field}__gte": T0 - timedelta(hours=1)}).values(field))
    assert key_name(model) in text, text
    if connection.vendor == "postgresql":
        assert f"run_id = {run.pk}" in text and f"{field} >=" in text.split("Index Cond:")[1], text
    else:
        assert f"(run_id=? AND {field}>?)" in text, text


def test_a_runs_newest_minute_is_read_backward_from_the_key(world: World) -> None:
    run = make_run(world.vision)
    text = plan(GpuMinute.objects.filter(run=run).order_by("-minute").values("minute")[:1])
    assert key_name(GpuMinute) in text, text
    assert "Sort" not in text and "TEMP B-TREE" not in text, text


def test_the_runs_own_index_is_gone() -> None:
    # The natural key starts with run_id, so a separate run_id index is only write cost.
    for model in (GpuMinute, GpuHour):
        with connection.cursor() as cursor:
            constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
        run_only = [name for name, c in constraints.items() if c["columns"] == ["run_id"] and c["index"]]
        assert run_only == [], (model.__name__, run_only)
