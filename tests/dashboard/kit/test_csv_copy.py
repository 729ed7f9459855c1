"""The run list's CSV written by PostgreSQL (COPY) is the file the Python writer writes, byte for byte.

On PostgreSQL `/runs/?format=csv` has COPY write its rows from the `cell()` rules in SQL
(`csv_export.sql_cell`, `Run.duration_seconds_sql`); these tests put hostile cells through both
writers and compare the bytes, so the two cannot drift apart. The embedded default (SQLite) takes
the Python path, which tests/billing/costs/test_csv_exports.py covers.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
import time_machine
from django.core.signals import request_finished
from django.db import close_old_connections, connection, transaction
from django.db.models import TextField
from django.db.models.expressions import RawSQL
from django.test.utils import CaptureQueriesContext

from billing.models import AcceleratorPrice
from dashboard.kit.csv_export import COPY_WORK_MEM, STREAM_CHUNK_ROWS, copy_streaming_response, sql_cell
from runs.choices import RunStatus
from runs.models import GpuSample, Run
from runs.telemetry.store import store_gpu_samples
from runs.views.lists import CSV_HEADER, DEFAULT_SORT, filter_runs, runs_csv, sort_runs
from tests.conftest import T0, World, make_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="COPY ... TO STDOUT is PostgreSQL's; on SQLite the run list's CSV has only the Python writer",
    ),
]
NOW = T0 + timedelta(hours=3, microseconds=250_001)

# Text a remote system or a user may put in a run: formulas, CSV's own characters, line breaks,
# empty strings, non-ASCII, COPY's end-of-data marker.
HOSTILE = [
    "=HYPERLINK(\"http://evil\")", "+1", "-1+2", "@SUM(A1)", "\tlead", "\rlead", 'say "hi"', "a,b", "two\nlines",
    "crlf\r\nend", "", " spaced ", "ünïcødé ✓ 日本", "\\.", "'=already", "end=", "trailing\n",
]  # fmt: skip


def both(runs, now=NOW, in_index_order=False) -> tuple[bytes, bytes]:
    """The same queryset written by COPY and by the Python writer."""
    by_copy = b"".join(
        runs_csv(runs, now, by_database=True, in_index_order=in_index_order, team_ids=None).streaming_content
    )
    by_python = b"".join(runs_csv(runs, now, by_database=False, team_ids=None).streaming_content)
    return by_copy, by_python


def hostile_runs(world: World) -> None:
    for i, text in enumerate(HOSTILE):
        make_run(
            world.vision, f"{text}-{i}" if text else f"empty-{i}", experiment_name=text, creator=text,
            region=text, home_region="us-west-2", mlflow_run_id=text,
            submitted_at=T0 + timedelta(microseconds=i * 137_019), started_at=T0 + timedelta(seconds=i),
            ended_at=T0 + timedelta(hours=1, microseconds=(i % 3) * 999_999),
        )  # fmt: skip


def test_hostile_text_is_written_the_same(world: World) -> None:
    hostile_runs(world)
    by_copy, by_python = both(Run.objects.order_by("pk"))
    assert by_copy.split(b"\r\n") == by_python.split(b"\r\n")
    rows = list(csv.reader(io.StringIO(by_copy.decode(), newline="")))
    assert rows[0] == CSV_HEADER and len(rows) == len(HOSTILE) + 1
    # What a spreadsheet reads back: formulas behind an apostrophe, the rest exactly as stored.
    names = [row[CSV_HEADER.index("experiment_name")] for row in rows[1:]]
    assert names[:6] == ["'" + text for text in HOSTILE[:6]]
    assert names[6:] == HOSTILE[6:]


def test_times_and_durations_are_the_same(world: World) -> None:
    """Microseconds written only when not zero, running runs up to `now`, a run not started
    yet empty, an end stored before the start clamped to 0 as `Run.duration` does."""
    make_run(world.vision, "whole-seconds")
    micro_end = T0 + timedelta(days=3, microseconds=999_999)
    make_run(world.vision, "micro", started_at=T0 + timedelta(microseconds=1), ended_at=micro_end)
    make_run(world.vision, "running", status=RunStatus.RUNNING, started_at=T0 - timedelta(days=400), ended_at=None)
    make_run(world.vision, "queued", status=RunStatus.QUEUED, started_at=None, ended_at=None)
    make_run(world.vision, "backwards", ended_at=T0 - timedelta(seconds=5))
    leap = T0.replace(year=2024, month=2, day=28)
    make_run(world.vision, "leap", started_at=leap, ended_at=leap + timedelta(days=2, seconds=1))
    # Databricks times are milliseconds: the fraction is written as long as it needs, no longer.
    make_run(world.vision, "millis", started_at=T0 + timedelta(milliseconds=123),
             ended_at=T0 + timedelta(hours=2, milliseconds=500))  # fmt: skip
    make_run(world.vision, "tenth-micro", started_at=T0 + timedelta(microseconds=10))
    by_copy, by_python = both(Run.objects.order_by("external_id"))
    assert by_copy.split(b"\r\n") == by_python.split(b"\r\n")
    rows = {row["external_id"]: row for row in csv.DictReader(io.StringIO(by_copy.decode(), newline=""))}
    assert rows["micro"]["started_at"].endswith(".000001+00:00") and rows["whole-seconds"]["started_at"].endswith(
        ":00+00:00"
    )
    assert rows["millis"]["started_at"] == "2026-11-02T09:00:00.123+00:00"
    assert rows["millis"]["ended_at"] == "2026-11-02T11:00:00.5+00:00"
    assert rows["tenth-micro"]["started_at"] == "2026-11-02T09:00:00.00001+00:00"
    assert rows["micro"]["ended_at"].endswith(".999999+00:00")
    assert rows["micro"]["duration_seconds"] == str(3 * 86400)
    assert rows["running"]["ended_at"] == "" and rows["running"]["duration_seconds"] == str(
        int((NOW - (T0 - timedelta(days=400))).total_seconds())
    )
    assert rows["queued"]["started_at"] == "" and rows["queued"]["duration_seconds"] == ""
    assert rows["backwards"]["duration_seconds"] == "0"
    for run in Run.objects.exclude(started_at=None).exclude(status=RunStatus.RUNNING):
        assert rows[run.external_id]["duration_seconds"] == str(int(run.duration.total_seconds()))


@pytest.mark.django_db(transaction=True)  # autocommit, as a request runs: the download's transaction is its own
def test_the_servers_date_style_does_not_change_the_file(world: World) -> None:
    # The COPY reads PostgreSQL's timestamp text, which DateStyle shapes ('02/11/2026 09:00:00.123
    # UTC' under SQL, DMY): the download sets ISO for its own transaction, whatever the session has.
    make_run(world.vision, "millis", started_at=T0 + timedelta(milliseconds=123))
    runs = Run.objects.order_by("external_id")
    by_python = b"".join(runs_csv(runs, NOW, by_database=False, team_ids=None).streaming_content)
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_parallel_workers_per_gather")
        parallel = cursor.fetchone()[0]
        cursor.execute("SET DateStyle = 'SQL, DMY'")
        try:
            by_copy = b"".join(
                runs_csv(runs, NOW, by_database=True, in_index_order=True, team_ids=None).streaming_content
            )
            cursor.execute("SHOW DateStyle")
            assert cursor.fetchone()[0] == "SQL, DMY"  # only the download's transaction had ISO
            cursor.execute("SHOW work_mem")
            assert cursor.fetchone()[0] != COPY_WORK_MEM  # and its sort memory
            cursor.execute("SHOW max_parallel_workers_per_gather")
            assert cursor.fetchone()[0] == parallel  # and its planner setting
        finally:
            cursor.execute("RESET DateStyle")
    assert by_copy == by_python and b"2026-11-02T09:00:00.123+00:00" in by_copy


def test_the_tables_utilization_and_cost_cells_are_written_the_same(world: World) -> None:
    """The glance cells (runs.glance.CsvCells) follow COPY's rows: floats, money, times and empty cells
    as the Python writer writes them, header and chunks included."""
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="2.375"
    )
    running = make_run(world.vision, "running", status=RunStatus.RUNNING, ended_at=None, experiment_name="=x,y")
    make_run(world.vision, "unpriced", region="sa-east-1")
    make_run(world.vision, "quiet", started_at=None, ended_at=None, status=RunStatus.QUEUED)
    node = running.attempts.get().nodes.get()
    store_gpu_samples(
        [GpuSample(run=running, node=node, gpu_index=g, ts=NOW - timedelta(minutes=2, seconds=s),
                   utilization_gpu=33.3 + g) for g in range(3) for s in (1, 7, 13)]
    )  # fmt: skip
    by_copy, by_python = both(Run.objects.order_by("external_id"))
    assert by_copy == by_python
    rows = {row["external_id"]: row for row in csv.DictReader(io.StringIO(by_copy.decode(), newline=""))}
    assert list(rows["running"])[-5:] == ["gpu_utilization_percent", "last_sample_at", "cost_usd", "cost_kind",
                                          "billed_usd"]  # fmt: skip
    assert float(rows["running"]["gpu_utilization_percent"]) == pytest.approx(34.3)
    assert rows["running"]["cost_usd"] and rows["unpriced"]["cost_kind"] == "lower bound"
    assert rows["quiet"]["gpu_utilization_percent"] == rows["quiet"]["last_sample_at"] == ""


def test_a_long_download_comes_in_the_same_chunks(world: World) -> None:
    Run.objects.bulk_create(
        Run(team=world.vision, external_id=f"run-{i:04d}", status=RunStatus.SUCCEEDED, experiment_name=f"=exp-{i}",
            submitted_at=T0 + timedelta(milliseconds=i))
        for i in range(STREAM_CHUNK_ROWS + 10)
    )  # fmt: skip
    runs = Run.objects.order_by("external_id")
    copy_chunks = list(runs_csv(runs, NOW, by_database=True, team_ids=None).streaming_content)
    python_chunks = list(runs_csv(runs, NOW, by_database=False, team_ids=None).streaming_content)
    assert len(copy_chunks) == len(python_chunks) == 2
    assert b"".join(copy_chunks) == b"".join(python_chunks)


def test_the_page_uses_copy_as_one_query_and_keeps_to_the_team(world: World) -> None:
    make_run(world.vision, "vision-run", experiment_name="=mine")
    make_run(world.nlp, "nlp-run", experiment_name="theirs")
    client = world.client_for(world.alice)
    with time_machine.travel(NOW, tick=False), CaptureQueriesContext(connection) as captured:
        response = client.get("/runs/", {"format": "csv", "sort": "-started_at"})
        body = b"".join(response.streaming_content)
    copies = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("COPY (")]
    assert len(copies) == 1 and "TO STDOUT (FORMAT csv)" in copies[0]
    assert response["Content-Disposition"] == f'attachment; filename="runs-{NOW:%Y-%m-%d}.csv"'
    rows = list(csv.DictReader(io.StringIO(body.decode(), newline="")))
    assert [(r["external_id"], r["team"], r["experiment_name"]) for r in rows] == [("vision-run", "vision", "'=mine")]


def test_a_download_left_half_read_frees_the_connection(world: World) -> None:
    """A browser that stops reading closes the stream mid-COPY; the connection answers the next query."""
    for i in range(STREAM_CHUNK_ROWS + 10):
        Run.objects.create(team=world.vision, external_id=f"bulk-{i}", status=RunStatus.SUCCEEDED)
    response = runs_csv(Run.objects.order_by("pk"), NOW, by_database=True, team_ids=None)
    assert next(iter(response.streaming_content)).startswith(b"external_id,status,")
    # The browser went away: the WSGI server closes the response mid-COPY. request_finished would
    # also close this test's connection (its transaction is not autocommit): the test client
    # silences it the same way.
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    assert Run.objects.filter(external_id="bulk-5").count() == 1


def test_an_unknown_column_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="no SQL cell for parameters"):
        sql_cell(Run.objects.all(), "parameters")


@pytest.mark.parametrize(
    "filters",
    [
        {"q": "%'_\\"},  # LIKE's own characters and a quote, bound into the COPY statement
        {"q": "evil", "status": RunStatus.FAILED},
        {"sweep": "sweep-1", "submitted_from": (T0 - timedelta(days=1)).date()},
        {},  # no parameters at all
    ],
)
def test_the_run_list_filters_write_the_same_rows(world: World, filters: dict) -> None:
    """The queryset the page builds (filters bound client-side into COPY's text) selects what
    the Python writer's rows select, in the same order."""
    make_run(world.vision, "pct-%'_\\", experiment_name="=evil%'_\\", status=RunStatus.FAILED)
    make_run(world.vision, "sweep-it", parameters={"sweep": True, "sweep_run_id": "sweep-1"})
    make_run(world.vision, "plain", submitted_at=T0 + timedelta(hours=1))
    make_run(world.nlp, "other-team", experiment_name="evil", status=RunStatus.FAILED)
    runs, _ = sort_runs(filter_runs(Run.objects.for_user(world.alice), filters), DEFAULT_SORT)
    by_copy, by_python = both(runs, in_index_order=True)  # the default order: the COPY in one process
    assert both(runs)[0] == by_copy  # and with parallel workers allowed
    assert by_copy.split(b"\r\n") == by_python.split(b"\r\n")
    ids = [row["external_id"] for row in csv.DictReader(io.StringIO(by_copy.decode(), newline=""))]
    assert "other-team" not in ids and ids == [run.external_id for run in runs], (
        "the COPY wrote other rows than the page's queryset"
    )
    assert ids  # every case selects something


def test_the_default_order_is_read_from_an_index_without_sorting(world: World) -> None:
    """Newest first, the id breaking ties (`sort_runs`): run_submitted_id_idx holds that whole
    order, so the COPY reads the rows in it and sorts nothing. An index on the time alone leaves
    the ties to a sort, and a tie-break turned the other way a whole sort."""
    for i in range(40):
        make_run(world.vision, f"run-{i}", submitted_at=T0 + timedelta(minutes=i // 3))  # ties on the time
    runs, _ = sort_runs(Run.objects.all(), DEFAULT_SORT)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is otherwise read whole
        plan = runs.explain()
    assert "run_submitted_id_idx" in plan and "Sort" not in plan, plan


def setting_in_copy(in_index_order: bool) -> list[str]:
    """max_parallel_workers_per_gather as the COPY's own query reads it, one row a run."""
    setting = RawSQL("current_setting('max_parallel_workers_per_gather')", [], output_field=TextField())
    response = copy_streaming_response(
        "x.csv", ["setting"], Run.objects.values_list(setting), in_index_order=in_index_order
    )
    return b"".join(response.streaming_content).decode().split("\r\n")[1:-1]


@pytest.mark.django_db(transaction=True)  # autocommit, as a request runs: the download's transaction is its own
def test_a_copy_in_index_order_runs_without_parallel_workers(world: World) -> None:
    """The COPY of rows in an index's order runs in one process: parallel workers would each sort
    their formatted rows for the leader to merge. Other orders keep the server's setting."""
    make_run(world.vision, "one")
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_parallel_workers_per_gather")
        server = cursor.fetchone()[0]
    assert server != "0", "the test needs a server that allows parallel workers"
    assert setting_in_copy(in_index_order=True) == ["0"]
    assert setting_in_copy(in_index_order=False) == [server]


@pytest.mark.parametrize(
    ("query", "in_one_process"),
    [
        ({}, True),  # every visible run, newest first: the index's order
        ({"submitted_from": "2026-11-01", "submitted_to": "2026-11-30"}, True),  # a range of the index
        ({"status": RunStatus.FAILED}, False),  # fewer rows to sort, a condition to share out
        ({"q": "run"}, False),
        ({"sort": "experiment"}, False),  # an order no index holds
        ({"sort": "submitted"}, False),  # oldest first: the id's tie-break still runs newest first
        ({"status": "not-a-status"}, True),  # a filter that did not validate is not applied
    ],
)
@pytest.mark.django_db(transaction=True)
def test_the_page_reads_the_index_order_in_one_process_only_unfiltered(
    world: World, query: dict, in_one_process: bool
) -> None:
    make_run(world.vision, "run-1", status=RunStatus.FAILED)
    client = world.client_for(world.alice)
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/runs/", {"format": "csv", **query})
        rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode(), newline="")))
    settings = [q["sql"] for q in captured.captured_queries if "set_config(" in q["sql"]]
    assert sum("set_config('DateStyle'" in sql for sql in settings) == 1
    serial = any("set_config('max_parallel_workers_per_gather', '0', true)" in sql for sql in settings)
    assert serial is in_one_process, settings
    assert [row["external_id"] for row in rows] == ["run-1"]  # every case selects the run
