"""The envelope's live edge reads only the minutes compaction has not folded, through an exact index range (issue 30).

Compaction deletes the rows it folds; until vacuum has run their pages stay in the table. A
sequential scan of the hot table reads them all (11,475 pages against 806 for a 64-GPU run's
last 9 minutes), and so does a bitmap scan of a bare run or node index; the hot read goes
through the (node, ts) index, one query for every node and GPU, with sequential scans and
parallel workers turned off for that query alone (runs/telemetry/hot_reads.py).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import GpuSample, Node, Run
from runs.telemetry import blocks, envelope
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the plan and the planner setting exist only on PostgreSQL"
)

MINUTES = 20


def build(world: World, name: str, nodes: int) -> Run:
    """`nodes` x 8 GPUs every 5 s for 20 minutes; minutes 0-14 compacted, 15-19 hot."""
    run = make_run(world.vision, name, num_accelerators=8 * nodes, ended_at=T0 + timedelta(minutes=MINUTES))
    attempt = run.attempts.get()
    made = [attempt.nodes.get(), *(Node.objects.create(attempt=attempt, index=i) for i in range(1, nodes))]
    store_gpu_samples([
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s), utilization_gpu=30.0 + gpu)
        for node in made for gpu in range(8) for s in range(0, MINUTES * 60, 5)
    ])  # fmt: skip
    return run


def hot_reads(run: Run, minutes: int = 10) -> tuple[list[str], dict]:
    """(SQL of the reads of the hot table, the envelope) of the run's last `minutes` at 1,000 px: the raw tier."""
    end = T0 + timedelta(minutes=MINUTES) - timedelta(seconds=1)
    with CaptureQueriesContext(connection) as queries:
        found = envelope.read_envelopes(run, ["utilization_gpu"], end - timedelta(minutes=minutes), end, 1000)
    return [q["sql"] for q in queries.captured_queries if 'FROM "runs_gpusample" ' in q["sql"]], found


def test_the_live_edge_is_one_query_whatever_the_nodes_and_gpus(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 5
    small, big = build(world, "gpus-8", nodes=1), build(world, "gpus-64", nodes=8)
    blocks.compact_samples(now=T0 + timedelta(minutes=MINUTES))
    assert GpuSample.objects.filter(run=big).count() == 64 * 60  # minutes 15-19, every 5 s
    small_sql, small_env = hot_reads(small)
    big_sql, big_env = hot_reads(big)
    assert len(small_sql) == len(big_sql) == 1
    assert small_env["utilization_gpu"].tier == big_env["utilization_gpu"].tier == "raw"
    # Every sample of the window counted once: the blocks' minutes and the hot ones.
    assert sum(big_env["utilization_gpu"].low) / len(big_env["utilization_gpu"].low) == 30.0
    assert max(big_env["utilization_gpu"].high) == 37.0


@needs_postgresql
def test_the_hot_read_is_an_index_range_of_the_unfolded_minutes_and_leaves_the_planner_as_it_was(
    world: World, settings
) -> None:
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 5
    run = build(world, "gpus-64", nodes=8)
    blocks.compact_samples(now=T0 + timedelta(minutes=MINUTES))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_gpusample")
    with CaptureQueriesContext(connection) as queries:
        hot_reads(run)
    sql = [q["sql"] for q in queries.captured_queries]
    at = next(i for i, q in enumerate(sql) if 'FROM "runs_gpusample" ' in q)
    assert "set_config('enable_seqscan', 'off', true)" in sql[at - 1]
    assert "set_config('max_parallel_workers_per_gather', '0', true)" in sql[at - 1]
    with connection.cursor() as cursor:
        cursor.execute("SHOW enable_seqscan")
        assert cursor.fetchone()[0] == "on"  # not left off for the next query of the request
        cursor.execute("SAVEPOINT plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql[at])
        plan = json.dumps(cursor.fetchone()[0])
        cursor.execute("ROLLBACK TO SAVEPOINT plan")
    assert "Seq Scan" not in plan
    # Ranges of the (node, ts) index that start at the first minute compaction left: the
    # window's folded minutes and their dead rows are not walked.
    first_hot = (T0 + timedelta(minutes=15)).strftime("%Y-%m-%d %H:%M:%S")
    conditions = plan.split('"Index Cond": "')[1:]
    assert conditions and all(c.startswith("((ROW(node_id, ts) >= ROW(") for c in conditions), plan
    assert all(f"'{first_hot}" in c.split('"')[0] for c in conditions), plan
    assert (T0 + timedelta(minutes=10)).strftime("%Y-%m-%d %H:%M:%S") not in plan


@needs_postgresql
def test_the_hot_table_has_no_bare_run_or_node_index_for_the_planner_to_take() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'runs_gpusample'")
        indexes = dict(cursor.fetchall())
    assert "(node_id, ts)" in indexes["gpusample_node_ts_idx"]
    columns = {definition.split(" USING btree ")[1] for definition in indexes.values()}
    assert "(run_id)" not in columns and "(node_id)" not in columns, columns
