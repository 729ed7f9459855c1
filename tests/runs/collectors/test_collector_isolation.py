"""Every collector pass isolates its items (issue 33): a bad item is skipped, counted and named
for staff on the collectors page, and the rest of the pass, every other team's items, goes on.

Each case is what a member of another team (or a broken source) put in front of a pass on
4ab1749, where it ended the pass for everyone.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shlex
import socket
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from billing.costs.uptime import cluster_uptime
from billing.models import BilledUsage
from runs.choices import RunStatus
from runs.collectors.cluster_events import collect_events
from runs.models import Cluster, ClusterEvent, CollectorState, RunEvent
from runs.models.uptime import MAX_CLUSTER_WORKERS
from tests.conftest import T0, World, make_run, serverless_api
from tests.runs.collectors.test_collect_logs import collect, stored, write

pytestmark = pytest.mark.django_db


def collectors_csv(world: World, user: object) -> dict[str, dict[str, str]]:
    text = world.client_for(user).get("/collectors/", {"format": "csv"}).content.decode()
    return {row["name"]: row for row in csv.DictReader(io.StringIO(text))}


# --- the log directory and the log command ---------------------------------------------------------


def test_a_socket_in_the_shared_log_directory_skips_that_file_only(world: World, tmp_path: Path, settings) -> None:
    # A short root: a UNIX socket's path is limited to 107 bytes.
    root = Path(f"/tmp/h33-{tmp_path.name[-12:]}")
    root.mkdir()
    settings.AIRBOARD_LOG_SOURCE_DIR, settings.AIRBOARD_LOG_SOURCE_COMMAND = str(root), ""
    theirs = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    mine = make_run(world.nlp, "2001", status=RunStatus.RUNNING, ended_at=None)
    (root / "1001" / "1").mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(root / "1001" / "1" / "0.log"))
        write(root / "2001" / "1" / "0.log", "step 1\n")
        # An attempt number no column holds: its node cannot be stored (OverflowError, DataError).
        write(root / "1001" / ("9" * 25) / "0.log", "x\n")
        collect()
    finally:
        listener.close()
        for path in sorted(root.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        root.rmdir()
    assert stored(mine) == "step 1\n" and stored(theirs) == ""
    state = CollectorState.objects.get(name="logs")
    assert state.last_error == "" and state.last_success_at is not None
    assert state.refused_total == 2 and state.last_refusal.startswith("2 skipped: ")
    assert "1001/1/0.log: cannot read" in state.last_refusal and f"1001/{'9' * 25}/0.log: " in state.last_refusal
    staff = world.client_for(world.sam).get("/collectors/").content.decode()
    assert "1001/1/0.log" in staff
    # Members see neither the names (paths and run ids of every team) nor the count.
    member = world.client_for(world.charlie).get("/collectors/").content.decode()
    assert "1001/1/0.log" not in member
    assert collectors_csv(world, world.charlie)["logs"]["refused_total"] == ""
    assert collectors_csv(world, world.sam)["logs"]["refused_total"] == "2"


@pytest.fixture
def remote(settings, tmp_path: Path) -> Path:
    """A log command that prints `<remote>/<run id>/<attempt>/<node>.log`."""
    root = tmp_path / "remote"
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    settings.AIRBOARD_LOG_SOURCE_COMMAND = f"cat {shlex.quote(str(root))}/{{run_id}}/{{attempt}}/{{node}}.log"
    return root


def test_a_log_line_shaped_like_the_cli_json_is_plain_text(world: World, remote: Path) -> None:
    theirs = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    mine = make_run(world.nlp, "2001", status=RunStatus.RUNNING, ended_at=None)
    line = '{"type": "LOG", "node": "zz", "line": "hello"}\n'
    write(remote / "1001" / "1" / "0.log", line)
    write(remote / "2001" / "1" / "0.log", "step 1\n")
    collect()
    assert stored(theirs) == line  # the team's own line, kept as it was printed
    assert stored(mine) == "step 1\n"
    assert CollectorState.objects.get(name="logs").last_error == ""


def test_a_logs_endpoint_that_repeats_its_page_token_is_read_once(world: World, tmp_path: Path, settings) -> None:
    page = {"log_records": [{"time_unix_nano": "1", "body": "only line", "node_index": 0}], "next_page_token": "again"}
    (tmp_path / "page.json").write_text(json.dumps(page))
    calls = tmp_path / "calls"
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    settings.AIRBOARD_LOG_SOURCE_COMMAND = (
        f'sh -c \'echo "$1" >> "$2"; cat "$3"\' sh {{page_token}} {shlex.quote(str(calls))} '
        f"{shlex.quote(str(tmp_path / 'page.json'))}"
    )
    run = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    collect()
    assert calls.read_text().splitlines() == ["", "again"]  # 200 calls on 4ab1749
    assert stored(run) == "only line\n"  # 200 copies on 4ab1749
    state = CollectorState.objects.get(name="logs")
    assert state.refused_total == 1 and "repeated page token 'again'" in state.last_refusal


# --- cluster events ----------------------------------------------------------------------------------


def events_command(tmp_path: Path, events: list[dict]) -> str:
    path = tmp_path / "events.json"
    # Python writes NaN as the bare token NaN, as a source's JSON (and Python's json) may carry it.
    path.write_text(json.dumps(events))
    return f"cat {shlex.quote(str(path))}"


def test_an_event_with_nan_details_is_skipped_and_the_others_are_stored(world: World, tmp_path: Path) -> None:
    cluster = Cluster.objects.create(team=world.vision, cluster_id="c-1", node_type_id="g5.12xlarge")
    ms = int(T0.timestamp() * 1000)
    command = events_command(tmp_path, [
        {"timestamp": ms, "type": "RUNNING", "details": {"current_num_workers": 2}},
        {"timestamp": ms + 1000, "type": "RESIZING", "details": {"target_num_workers": math.nan}},
        {"timestamp": ms + 2000, "type": "UPSIZE_COMPLETED", "details": {"current_num_workers": 10**30}},
        {"timestamp": ms + 3000, "type": "TERMINATING", "details": {"reason": {"code": "USER_REQUEST"}}},
    ])  # fmt: skip
    skipped: list[tuple[str, str]] = []
    lines = collect_events([cluster], command, 10, skip=lambda what, why: skipped.append((what, why)))
    assert sorted(ClusterEvent.objects.values_list("kind", flat=True)) == ["RUNNING", "TERMINATING"]
    assert skipped == [
        ("cluster c-1 events", "event 2: 'details' holds NaN or Infinity"),
        ("cluster c-1 events", f"event 3: 'current_num_workers' must be a worker count from 0 to "
                               f"{MAX_CLUSTER_WORKERS:,}, got '{10**30}'"),
    ]  # fmt: skip
    assert lines == ["cluster events: 2 new"]


def test_a_stored_absurd_worker_count_never_stops_the_cost_engine(world: World) -> None:
    """10^30 workers in a stored event froze every team's rollup (decimal.InvalidOperation)."""
    from billing.models import InstancePrice

    InstancePrice.objects.create(
        instance_type="g5.12xlarge", region="", effective_from=datetime(2020, 1, 1, tzinfo=UTC), usd_per_hour="5"
    )
    cluster = Cluster.objects.create(team=world.vision, cluster_id="c-1", node_type_id="g5.12xlarge", num_workers=2)
    ClusterEvent.objects.create(cluster=cluster, ts=T0, kind="RUNNING", details={"current_num_workers": 10**30})
    ClusterEvent.objects.create(cluster=cluster, ts=T0 + timedelta(hours=1), kind="TERMINATED")
    (uptime,) = cluster_uptime([cluster], now=T0 + timedelta(days=1)).values()
    assert [p.workers for p in uptime.pieces] == [2]  # the count is not believed: the cluster's own
    assert uptime.cost == Decimal("15.00")  # driver + 2 workers, one hour at $5


# --- the node agent -------------------------------------------------------------------------------


def test_an_agent_event_with_nan_details_loses_only_itself(world: World) -> None:
    """The agent's door (?bad_rows=drop): an event the database cannot hold is dropped and named alone."""
    run = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    ts = (T0 + timedelta(minutes=5)).isoformat()
    body = {
        "source": "nvml", "samples": [{"run": "1001", "run_source": "serverless", "gpu": 0, "ts": ts,
                                        "utilization_gpu": 99.0, "host": "gpu-node-9"}],
        "events": [
            {"kind": "xid", "run": "1001", "gpu": 0, "ts": ts, "message": "Xid 79", "details": {"xid": math.nan}},
            {"kind": "gpu_lost", "run": "1001", "gpu": 1, "ts": ts, "message": "fell off the bus\x00"},
            {"kind": "xid", "run": "1001", "gpu": 2, "ts": ts, "message": "Xid 48", "details": {"xid": 48}},
        ],
    }  # fmt: skip
    response = serverless_api(world).post(
        "/api/v1/gpu-samples?bad_rows=drop", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 202, response.content
    out = response.json()
    assert list(RunEvent.objects.filter(run=run).values_list("gpu_index", flat=True)) == [2]
    assert (out["dropped_events"], out["rows"]) == (2, 1)
    assert any(p.startswith("events[0]") for p in out["problems"]), out["problems"]


# --- billed usage ------------------------------------------------------------------------------------


def test_a_usage_row_of_1e30_is_a_named_row_error_not_a_traceback(world: World, tmp_path: Path) -> None:
    usage = tmp_path / "usage.csv"
    usage.write_text(
        "record_id,usage_start_time,usage_end_time,usage_date,sku_name,usage_quantity,usage_unit\n"
        "r1,2026-11-02T09:00:00Z,2026-11-02T10:00:00Z,2026-11-02,SERVERLESS_GPU,1e30,DBU\n"
        "r2,2026-11-02T09:00:00Z,2026-11-02T10:00:00Z,2026-11-02,SERVERLESS_GPU,12.5,DBU\n"
    )
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 bad row; nothing was written"):
        call_command("import_usage", str(usage), stderr=err)
    assert "line 2: usage_quantity '1e30' is out of range" in err.getvalue()
    assert not BilledUsage.objects.exists()
