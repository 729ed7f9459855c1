"""The hot table is read as exact (node, time) ranges of its (node_id, ts) index, whatever the planner's statistics.

A run's live edge sits in the same minutes as every other running run's. With `ts` bounds of
its own the read could be planned on the table's `ts` index, filtering every run's rows of the
window; it was whenever PostgreSQL's statistics predated the rows (bench/run_page.py: 34.7 ms
against 13.8 ms beside another team's 126,600 hot rows). Row-value ranges leave the (node_id, ts)
index as the only one that can serve the read.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import GpuSample, Node, Run
from runs.telemetry import blocks, envelope, hot_reads
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the plan and the planner settings exist only on PostgreSQL"
)


def _run(world: World, name: str, nodes: int, seconds: range) -> tuple[Run, list[Node]]:
    run = make_run(world.vision, name, num_accelerators=8 * nodes, ended_at=T0 + timedelta(hours=1))
    attempt = run.attempts.get()
    made = [attempt.nodes.get(), *(Node.objects.create(attempt=attempt, index=i) for i in range(1, nodes))]
    store_gpu_samples([
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s), utilization_gpu=float(s % 100))
        for node in made for gpu in range(8) for s in seconds
    ])  # fmt: skip
    return run, made


def test_each_span_is_its_node_from_a_up_to_b_excluded(world: World) -> None:
    _, (first, second) = _run(world, "two-nodes", 2, range(0, 120))
    other, (elsewhere,) = _run(world, "beside", 1, range(0, 120))
    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    spans = [(first.pk, at(10), at(20)), (second.pk, at(50), at(51)), (elsewhere.pk, at(119), at(500))]
    found = set(GpuSample.objects.filter(hot_reads.span_filter(spans)).values_list("node_id", "gpu_index", "ts"))
    expected = {
        (node, gpu, at(s))
        for node, seconds in ((first.pk, range(10, 20)), (second.pk, range(50, 51)), (elsewhere.pk, range(119, 120)))
        for gpu in range(8) for s in seconds
    }  # fmt: skip
    assert found == expected
    # The first instant is in, the end is not, at microsecond resolution.
    tick = timedelta(microseconds=1)
    tight = [(first.pk, at(10), at(10) + tick), (first.pk, at(30) - tick, at(30))]
    assert GpuSample.objects.filter(hot_reads.span_filter(tight)).count() == 8
    assert not GpuSample.objects.filter(hot_reads.span_filter([])).exists()
    assert GpuSample.objects.filter(run=other).count() == 8 * 120


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SAVEPOINT plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        plan = json.dumps(cursor.fetchone()[0])
        cursor.execute("ROLLBACK TO SAVEPOINT plan")
    return plan


def _index_names(plan: str) -> set[str]:
    return {part.split('"')[0] for part in plan.split('"Index Name": "')[1:]}


@needs_postgresql
def test_statistics_older_than_the_rows_cannot_put_the_read_on_the_time_index(world: World) -> None:
    # Statistics taken while the table held one run's rows: its nodes look like every row.
    run, _ = _run(world, "own", 8, range(0, 600, 2))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_gpusample")
    # Then the same minutes of other runs arrive, and no ANALYZE has run since.
    for i in range(4):
        _run(world, f"others-{i}", 8, range(0, 600, 2))
    end = T0 + timedelta(seconds=599)
    with CaptureQueriesContext(connection) as queries:
        envelope.read_envelopes(run, ["utilization_gpu"], end - timedelta(minutes=9), end, 1000)
        blocks.raw_rows(run.pk, end - timedelta(minutes=9), end, ["utilization_gpu"])
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if 'FROM "runs_gpusample" ' in q["sql"] and '"runs_gpusample"."ts") >= (' in q["sql"]
    ]
    assert len(reads) == 2, [q["sql"] for q in queries.captured_queries]
    for sql in reads:
        plan = _plan(sql)
        names = _index_names(plan)
        # Only (node_id, ts) indexes: not `ts` alone, not the natural key's run prefix.
        assert names and all(("node_id_ts" in n or "node_ts" in n) and "run_id" not in n for n in names), plan
        assert "Seq Scan" not in plan


@needs_postgresql
def test_the_settings_come_back_as_they_were_after_the_read_inside_a_transaction() -> None:
    with connection.cursor() as cursor:
        # The test runs inside a transaction: what the request had set stays set after the read.
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 1")
        with hot_reads.index_ranges():
            cursor.execute("SHOW enable_seqscan")
            assert cursor.fetchone()[0] == "off"
            cursor.execute("SHOW max_parallel_workers_per_gather")
            assert cursor.fetchone()[0] == "0"
        cursor.execute("SHOW enable_seqscan")
        assert cursor.fetchone()[0] == "on"
        cursor.execute("SHOW max_parallel_workers_per_gather")
        assert cursor.fetchone()[0] == "1"


def test_many_spans_are_one_expression_with_their_values_bound(world: World) -> None:
    """201 one-second spans: two queries (HOT_SPANS_PER_QUERY), four bound values a span, every row found once."""
    run, (node,) = _run(world, "many-spans", 1, range(0, 600))
    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    spans = [(run.pk, node.pk, at(2 * i), at(2 * i + 1)) for i in range(201)]
    reads = hot_reads.hot_rows(spans, at(0), at(600))
    assert len(reads) == 2
    found: list[tuple[int, object]] = []
    for read in reads:
        sql, params = read.values_list("gpu_index", "ts").query.sql_with_params()
        assert sql.count(" OR ") == (hot_reads.HOT_SPANS_PER_QUERY if read is reads[0] else 1) - 1
        # Four values a span, then the run guard's `run_id + 0 IN (run)`.
        assert len(params) == 4 * sql.count(">= (%s, %s)") + 2
        found.extend(read.values_list("gpu_index", "ts"))
    assert sorted(found, key=lambda row: (row[1], row[0])) == [(g, at(2 * i)) for i in range(201) for g in range(8)]
