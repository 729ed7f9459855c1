"""Issue 16, classic clusters: uptime and worker counts from real Clusters API outputs.

Fixtures are published outputs (tests/data/databricks/SOURCES.md): a RUNNING cluster created
in September 2023 and restarted twelve days later, a finished job cluster, and the API
reference's `clusters/events` example.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from billing.costs import rollups
from billing.costs.uptime import cluster_uptime
from billing.engine import cluster_costs, run_costs
from billing.models import CostDaily, InstancePrice
from runs.choices import RunSource
from runs.collectors.cluster_events import collect_events, parse_events, store_events
from runs.collectors.run_records import cluster_fields
from runs.models import Cluster, ClusterEvent
from runs.models.uptime import stretches
from tests.conftest import TESTS, World, make_run

DATA = TESTS / "data" / "databricks"
BOOK = datetime(2020, 1, 1, tzinfo=UTC)


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _cluster(world: World, record: dict) -> Cluster:
    return Cluster.objects.create(team=world.vision, cluster_id=record["cluster_id"], **cluster_fields(record))


def test_running_cluster_is_up_since_its_restart_not_its_creation(world: World) -> None:
    record = _load("cluster_get_running_restarted.json")
    cluster = _cluster(world, record)
    restarted = datetime(2023, 9, 27, 2, 10, 35, 64000, tzinfo=UTC)  # last_restarted_time 1695780635064
    assert cluster.start_time == datetime(2023, 9, 15, 2, 16, 16, 80000, tzinfo=UTC)  # the creation request
    assert cluster.last_restarted_time == restarted
    now = restarted + timedelta(hours=10)
    assert stretches(cluster, [], now) == [(restarted, now)]
    InstancePrice.objects.create(instance_type="i3.xlarge", region="", effective_from=BOOK, usd_per_hour="0.312")
    (cost,) = cluster_costs([cluster], now=now)
    # Single node: the driver alone, 10 h x $0.312. From start_time it would be 298 h, $93.07.
    assert cost.uptime_hours == Decimal(10)
    assert cost.uptime_cost == Decimal("3.12")
    # i3.xlarge carries no GPU: never GPU time, and listed apart on the GPU clusters page.
    assert not cost.has_gpus and cost.gpu_hours == 0 and cost.unknown_gpu_hours == 0


def test_cpu_clusters_are_listed_apart(world: World) -> None:
    _cluster(world, _load("cluster_get_running_restarted.json"))
    gpu = _load("clusters_list.json")[0]
    _cluster(world, gpu)
    response = world.client_for(world.sam).get(reverse("cluster_list"))
    assert [row["cost"].cluster.cluster_id for row in response.context["rows"]] == [gpu["cluster_id"]]
    assert [row["cost"].cluster.cluster_id for row in response.context["cpu_rows"]] == ["0915-021615-dvxnyad4"]
    assert 'id="cpu-clusters"' in response.content.decode()


def test_finished_job_cluster_is_billed_from_start_to_termination(world: World) -> None:
    cluster = _cluster(world, _load("cluster_get_job_terminated.json"))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    started = datetime(2023, 4, 11, 21, 47, 34, 358000, tzinfo=UTC)
    ended = datetime(2023, 4, 11, 21, 49, 51, 560000, tzinfo=UTC)
    assert stretches(cluster, [], now) == [(started, ended)]
    # One i3.4xlarge worker (num_workers 1, fixed size: no estimate) and an i3.xlarge driver.
    (uptime,) = cluster_uptime([cluster], now=now).values()
    assert [(p.workers, p.estimated) for p in uptime.pieces] == [(1, False)]


def test_events_from_the_api_reference_set_uptime_and_workers(world: World) -> None:
    payload = _load("cluster_events.json")
    cluster = Cluster.objects.create(team=world.vision, cluster_id="1202-211320-brick1", node_type_id="g5.12xlarge",
                                     driver_node_type_id="g5.xlarge", num_workers=8)  # fmt: skip
    read = parse_events(payload, "1202-211320-brick1")
    assert read.problems == []
    assert store_events(cluster, read.events) == 3
    assert store_events(cluster, read.events) == 0  # a re-read adds nothing
    restarting = datetime.fromtimestamp(1533225298406 / 1000, tz=UTC)
    running = datetime.fromtimestamp(1534358289590 / 1000, tz=UTC)
    terminating = datetime.fromtimestamp(1534371918659 / 1000, tz=UTC)
    (uptime,) = cluster_uptime([cluster], now=datetime(2026, 1, 1, tzinfo=UTC)).values()
    assert uptime.stretches == [(restarting, terminating)]
    # Before RUNNING reported 2 workers the fixed size (8) holds; from then on, 2.
    assert [(p.start, p.end, p.workers) for p in uptime.pieces] == [
        (restarting, running, 8), (running, terminating, 2),
    ]  # fmt: skip


def test_a_run_on_a_cluster_with_no_uptime_known_is_billed_for_its_attempts(world: World) -> None:
    # No events, no last_restarted_time: only start_time, which is not an uptime start.
    InstancePrice.objects.create(instance_type="g5.12xlarge", region="", effective_from=BOOK, usd_per_hour="5.00")
    cluster = Cluster.objects.create(team=world.vision, cluster_id="x", node_type_id="g5.12xlarge", single_node=True,
                                     start_time=datetime(2021, 1, 4, tzinfo=UTC))  # fmt: skip
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="")
    (uptime,) = cluster_uptime([cluster]).values()
    assert uptime.cost == Decimal("5.00")  # its one hour, not five years
    assert any("lower bound" in note for note in uptime.notes)
    html = world.client_for(world.sam).get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "lower bound" in html


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"events": [{"cluster_id": "other", "timestamp": 1534371918659, "type": "RUNNING"}]}, "belongs to cluster"),
        ([{"timestamp": "yesterday", "type": "RUNNING"}], "'timestamp' must be epoch milliseconds"),
        ([{"timestamp": 1534371918659, "type": 7}], "'type' must be an event type"),
        ([{"timestamp": 1534371918659, "type": "RUNNING", "details": []}], "'details' must be an object"),
        ("RUNNING", "expected a list of events"),
    ],
)
def test_events_that_are_not_of_the_api_shape_are_named(payload: object, problem: str) -> None:
    read = parse_events(payload, "1202-211320-brick1")
    assert read.events == [] and problem in read.problems[0]


def test_import_cluster_events_command(world: World, tmp_path: Path) -> None:
    Cluster.objects.create(team=world.vision, cluster_id="1202-211320-brick1", node_type_id="g5.12xlarge")
    out = io.StringIO()
    call_command("import_cluster_events", "1202-211320-brick1", str(DATA / "cluster_events.json"), stdout=out)
    assert "3 new of 3 events, 0 skipped" in out.getvalue()
    assert ClusterEvent.objects.count() == 3
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="not JSON \\(line 1"):
        call_command("import_cluster_events", "1202-211320-brick1", str(bad))
    with pytest.raises(CommandError, match="no cluster 'missing'"):
        call_command("import_cluster_events", "missing", str(bad))


def test_the_run_source_reads_each_clusters_events_with_the_cli(world: World, settings) -> None:
    """`AIRBOARD_CLUSTER_EVENTS_COMMAND` runs per cluster (the stand-in CLI prints the recorded events)."""
    cli = TESTS / "bin" / "databricks"
    settings.AIRBOARD_CLUSTER_EVENTS_COMMAND = f"{cli} clusters events {{cluster_id}} -o json"
    known = Cluster.objects.create(team=world.vision, cluster_id="1202-211320-brick1", node_type_id="g5.12xlarge")
    unknown = Cluster.objects.create(team=world.vision, cluster_id="0000-000000-gone", node_type_id="g5.12xlarge")
    lines = collect_events([known, unknown], settings.AIRBOARD_CLUSTER_EVENTS_COMMAND, timeout=30)
    assert known.events.count() == 3 and unknown.events.count() == 0
    assert any("0000-000000-gone" in line and "does not exist" in line for line in lines)
    assert lines[-1] == "cluster events: 3 new"
    assert collect_events([known], settings.AIRBOARD_CLUSTER_EVENTS_COMMAND, timeout=30)[-1] == "cluster events: 0 new"


def test_an_estimated_worker_count_ends_at_the_first_report(world: World) -> None:
    # Autoscale 2-8: estimated at 2 until a RUNNING event reports 2, then 5 after a resize.
    t0 = datetime(2026, 11, 2, 9, tzinfo=UTC)
    cluster = Cluster.objects.create(team=world.vision, cluster_id="a", node_type_id="g5.12xlarge",
                                     autoscale_min_workers=2, autoscale_max_workers=8)  # fmt: skip
    for minutes, kind, details in (
        (0, "STARTING", {}),
        (10, "RUNNING", {"current_num_workers": 2}),
        (30, "UPSIZE_COMPLETED", {"current_num_workers": 5}),
        (60, "TERMINATING", {}),
    ):
        ClusterEvent.objects.create(cluster=cluster, ts=t0 + timedelta(minutes=minutes), kind=kind, details=details)
    (uptime,) = cluster_uptime([cluster], now=t0 + timedelta(days=1)).values()
    assert [(p.workers, p.estimated) for p in uptime.pieces] == [(2, True), (2, False), (5, False)]
    assert uptime.billed_as == "g5.12xlarge driver + 2-5 (estimated) x g5.12xlarge"


def test_a_run_on_a_cpu_cluster_is_billed_but_never_gpu_time(world: World) -> None:
    record = _load("cluster_get_running_restarted.json")  # i3.xlarge: no GPU
    cluster = _cluster(world, record)
    InstancePrice.objects.create(instance_type="i3.xlarge", region="", effective_from=BOOK, usd_per_hour="0.312")
    restarted = cluster.last_restarted_time
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                   started_at=restarted, ended_at=restarted + timedelta(hours=2))  # fmt: skip
    now = restarted + timedelta(hours=10)
    breakdown = run_costs([run], now=now)[run.pk].breakdown
    assert breakdown.compute == Decimal("3.12")  # the cluster's 10 h, all its own
    assert breakdown.gpu_hours == 0
    rollups.recompute_days({d.day for d in breakdown.days}, now=now)
    assert rollups.totals(CostDaily.objects.all())["gpu_hours"] == 0
