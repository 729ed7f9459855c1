"""Issue 17: one cost engine, one number. The four disagreements it names, each on the surfaces
that disagreed, and the month of a team read from every surface at one instant.

Prices are made up for easy arithmetic; each expected figure is worked out by hand beside it.
"""

from __future__ import annotations

import csv
import inspect
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from billing.costs import rollups
from billing.models import AcceleratorPrice, CostDailyTeam, InstancePrice, UsagePolicy
from billing.prices.money import to_cents
from dashboard.management.commands import runall
from runs.choices import RunSource, RunStatus
from runs.models import Cluster, ClusterEvent, GpuMinute, Node, Run
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=1)  # 2026-11-03 09:00 UTC
METRICS_TOKEN = "metrics-token-for-tests"
MONEY = re.compile(r"\$([0-9,]+\.[0-9]{2})")


def _instance(instance_type: str, usd: str) -> None:
    InstancePrice.objects.create(instance_type=instance_type, region="", effective_from=BOOK, usd_per_hour=usd)


def _up(cluster: Cluster, start: datetime, end: datetime | None = None, workers: int = 0) -> Cluster:
    """Lifecycle events of one stretch, shaped as `databricks clusters events` reports them
    (tests/data/databricks/SOURCES.md): RUNNING with the worker count, TERMINATING with a reason."""
    ClusterEvent.objects.create(cluster=cluster, ts=start, kind="RUNNING",
                                details={"current_num_workers": workers, "target_num_workers": workers})  # fmt: skip
    if end is not None:
        ClusterEvent.objects.create(cluster=cluster, ts=end, kind="TERMINATING",
                                    details={"reason": {"code": "INACTIVITY"}})  # fmt: skip
    return cluster


def _field(row: object, name: str) -> object:
    # The overview's rows were dicts before issue 17; reading either keeps the old code failing
    # on its numbers, not on a KeyError.
    return row[name] if isinstance(row, dict) else getattr(row, name)


def overview_usd(world: World, team_name: str) -> Decimal:
    rows = [row.month for row in world.client_for(world.sam).get("/").context["team_spend"]]
    return next(Decimal(_field(r, "usd")) for r in rows if _field(r, "team_name") == team_name)


def costs_page_usd(world: World, team) -> Decimal:
    query = f"start={NOW:%Y-%m}-01&end={NOW:%Y-%m-%d}&team={team.pk}"
    return world.client_for(world.sam).get(f"/costs/?{query}").context["total"]["total_usd"]


def api_usd(world: World, team) -> Decimal:
    body = world.api(team, role="read").get(f"/api/v1/costs?group_by=team&from={NOW:%Y-%m}-01&to={NOW:%Y-%m-%d}")
    assert body.status_code == 200, body.content
    return Decimal(body.json()["total_usd"])


def metrics_usd(settings, team_name: str) -> Decimal:
    settings.AIRBOARD_METRICS_TOKEN = METRICS_TOKEN
    text = Client(headers={"authorization": f"Bearer {METRICS_TOKEN}"}).get("/metrics").content.decode()
    values = [
        Decimal(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("airboard_spend_month_to_date_usd{") and f'team="{team_name}"' in line
    ]
    return sum(values, Decimal(0))


def policy_usd(world: World, policy: UsagePolicy) -> Decimal:
    return world.client_for(world.sam).get(reverse("policy_detail", args=[policy.pk])).context["status"].spend


def run_page_usd(world: World, run: Run) -> Decimal:
    html = world.client_for(world.sam).get(reverse("run_detail", args=[run.pk])).content.decode()
    total = re.search(r'class="cost-total">\$([0-9,]+\.[0-9]{2})', html)
    assert total, "the run page shows no total"
    return Decimal(total[1].replace(",", ""))


def cluster_page_usd(world: World, cluster: Cluster) -> Decimal:
    # Shown to the cent; the exact figure carries the 1e-9 h quanta of the uptime split.
    response = world.client_for(world.sam).get(reverse("cluster_detail", args=[cluster.pk]))
    return cents(response.context["cost"].uptime_cost)


def cents(value: Decimal) -> Decimal:
    return to_cents(Decimal(value))  # as pages show it


# --- 1. The overview priced a classic run as accelerator-hours; /costs/ billed uptime ------------


def test_overview_and_costs_page_agree_on_a_classic_run(world: World, settings) -> None:
    # The run says GPU_8xH100 (priced $1/accelerator-hour: 8 x 2 h = $16 as accelerator-hours),
    # but it ran on a classic cluster billed by uptime: p4d.24xlarge driver only, $10/h x 3 h = $30.
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour="1.00")  # fmt: skip
    _instance("p4d.24xlarge", "10.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-1", node_type_id="p4d.24xlarge", single_node=True, region="us-west-2",
        terminated_time=T0 + timedelta(hours=2),
    )  # fmt: skip
    _up(cluster, T0 - timedelta(hours=1), T0 + timedelta(hours=2))
    make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, ended_at=T0 + timedelta(hours=2))
    with time_machine.travel(NOW, tick=False):
        rollups.refresh_changed()
        assert overview_usd(world, "vision") == Decimal("30.00")
        assert costs_page_usd(world, world.vision) == Decimal("30.00")


# --- 2. A cluster that stopped and restarted: $18 on the cluster page, $54 as the run's share -----


def _restarted_cluster(world: World) -> tuple[Cluster, Run]:
    # $6/h driver only. Created (start_time) at T0-5h, up [T0, T0+1h) and [T0+2h, T0+4h): 3 h, $18.
    # start_time to terminated_time would be 9 h, $54.
    _instance("g5.12xlarge", "6.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="restarted", node_type_id="g5.12xlarge", single_node=True, region="us-west-2",
        start_time=T0 - timedelta(hours=5), terminated_time=T0 + timedelta(hours=4), state="TERMINATED",
    )  # fmt: skip
    # Event shapes of `databricks clusters events` (tests/data/databricks/SOURCES.md).
    for kind, at, details in (
        ("STARTING", T0 - timedelta(minutes=5), {"user": "alice@example.com"}),
        ("RUNNING", T0, {"current_num_workers": 0, "target_num_workers": 0}),
        ("TERMINATING", T0 + timedelta(hours=1), {"reason": {"code": "INACTIVITY"}}),
        ("RESTARTING", T0 + timedelta(hours=2), {"user": "alice@example.com"}),
        ("RUNNING", T0 + timedelta(hours=2, minutes=5), {"current_num_workers": 0, "target_num_workers": 0}),
        ("TERMINATING", T0 + timedelta(hours=4), {"reason": {"code": "USER_REQUEST"}}),
    ):
        ClusterEvent.objects.create(cluster=cluster, ts=at, kind=kind, details=details)
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                   started_at=T0, ended_at=T0 + timedelta(hours=4))  # fmt: skip
    return cluster, run


def test_restarted_cluster_costs_the_same_on_its_page_and_as_its_run(world: World) -> None:
    cluster, run = _restarted_cluster(world)
    with time_machine.travel(NOW, tick=False):
        # STARTING at T0-5min opens the first stretch: 65 min + 2 h = 3 h 5 min x $6 = $18.50.
        assert cluster_page_usd(world, cluster) == Decimal("18.50")
        assert run_page_usd(world, run) == Decimal("18.50")


# --- 3. An autoscaling cluster with num_workers 0: $9 on the cluster page, $1 billed -------------


def test_autoscaling_cluster_bills_the_same_workers_everywhere(world: World) -> None:
    # Driver $1/h + autoscale minimum 4 workers x $2/h = $9/h, for 1 h.
    _instance("g5.xlarge", "1.00")
    _instance("g5.2xlarge", "2.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="autoscale", node_type_id="g5.2xlarge", driver_node_type_id="g5.xlarge",
        num_workers=0, autoscale_min_workers=4, autoscale_max_workers=8, region="us-west-2",
        start_time=T0, terminated_time=T0 + timedelta(hours=1),
    )  # fmt: skip
    # Up for an hour; no event reports a worker count.
    ClusterEvent.objects.create(cluster=cluster, ts=T0, kind="STARTING", details={"user": "alice@example.com"})
    ClusterEvent.objects.create(cluster=cluster, ts=T0 + timedelta(hours=1), kind="TERMINATING",
                                details={"reason": {"code": "USER_REQUEST"}})  # fmt: skip
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="")
    with time_machine.travel(NOW, tick=False):
        assert cluster_page_usd(world, cluster) == Decimal("9.00")
        assert run_page_usd(world, run) == Decimal("9.00")
        page = world.client_for(world.sam).get(reverse("run_detail", args=[run.pk])).content.decode()
        assert "autoscale minimum" in page  # the worker count is stated as an estimate


def test_resize_events_set_the_worker_count(world: World) -> None:
    # Same prices; up 2 h; a resize reports 8 workers after the first hour: $9 + $17 = $26.
    _instance("g5.xlarge", "1.00")
    _instance("g5.2xlarge", "2.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="resized", node_type_id="g5.2xlarge", driver_node_type_id="g5.xlarge",
        autoscale_min_workers=4, autoscale_max_workers=8, region="us-west-2", terminated_time=T0 + timedelta(hours=2),
    )  # fmt: skip
    ClusterEvent.objects.create(cluster=cluster, ts=T0, kind="RUNNING", details={"current_num_workers": 4})
    ClusterEvent.objects.create(cluster=cluster, ts=T0 + timedelta(hours=1), kind="UPSIZE_COMPLETED",
                                details={"current_num_workers": 8, "target_num_workers": 8})  # fmt: skip
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                   ended_at=T0 + timedelta(hours=2))  # fmt: skip
    with time_machine.travel(NOW, tick=False):
        assert cluster_page_usd(world, cluster) == Decimal("26.00")
        assert run_page_usd(world, run) == Decimal("26.00")
        # Every worker count was reported: an estimate, not a lower bound.
        html = world.client_for(world.sam).get(reverse("run_detail", args=[run.pk])).content.decode()
        assert ">estimated, as of 2026-11-03 09:00 UTC<" in html and "lower bound" not in html


# --- 4. The run page mixed two engines: a fully priced classic run said "lower bound" ------------


def test_fully_priced_classic_run_is_not_a_lower_bound(world: World) -> None:
    _instance("p4d.24xlarge", "10.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-4", node_type_id="p4d.24xlarge", single_node=True, region="us-west-2",
        start_time=T0, terminated_time=T0 + timedelta(hours=1),
    )  # fmt: skip
    _up(cluster, T0, T0 + timedelta(hours=1))
    # GPU_8xH100 has no accelerator price here: irrelevant to a run billed by instance uptime.
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster)
    with time_machine.travel(NOW, tick=False):
        html = world.client_for(world.sam).get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "Lower bound" not in html and "lower bound" not in html
    assert ">estimated, as of 2026-11-03 09:00 UTC<" in html
    assert run_page_usd(world, run) == Decimal("10.00")


# --- Idle: $0 on /costs/, $27.52 on the clusters page ---------------------------------------


def test_idle_gpus_of_a_classic_run_cost_the_same_on_costs_and_the_clusters_page(world: World) -> None:
    # g5.12xlarge carries 4 A10 GPUs at $8/h: $2 per GPU-hour. 30 idle GPU-minutes = $1.00.
    _instance("g5.12xlarge", "8.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="idle", node_type_id="g5.12xlarge", single_node=True, region="us-west-2",
        terminated_time=T0 + timedelta(hours=1),
    )  # fmt: skip
    _up(cluster, T0, T0 + timedelta(hours=1))
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="", num_accelerators=4)
    node = Node.objects.get(attempt__run=run)
    for m in range(30):
        GpuMinute.objects.create(run=run, node=node, gpu_index=m % 4, minute=T0 + timedelta(minutes=m // 4),
                                 utilization_gpu_max=0.0)  # fmt: skip
    with time_machine.travel(NOW, tick=False):
        rollups.refresh_changed()
        query = f"start={NOW:%Y-%m}-01&end={NOW:%Y-%m-%d}"
        costs = world.client_for(world.sam).get(f"/costs/?{query}").context["total"]
        page = world.client_for(world.sam).get(reverse("cluster_detail", args=[cluster.pk])).context["cost"]
    assert cents(costs["idle_usd"]) == cents(page.idle_cost) == Decimal("1.00")
    assert costs["idle_gpu_hours"] == page.idle_gpu_hours == Decimal("0.5")


# --- The same month everywhere --------------------------------------------------------------


@pytest.fixture
def workspace(world: World) -> dict[str, object]:
    """Serverless runs (one retried, one running), a shared classic cluster, and a policy."""
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour="2.50")  # fmt: skip
    _instance("g5.12xlarge", "7.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="shared", node_type_id="g5.12xlarge", single_node=True, region="us-west-2",
        start_time=T0 - timedelta(days=30),
    )  # fmt: skip
    _up(cluster, T0 - timedelta(hours=1))  # still up
    runs = [
        make_run(world.vision, "done", usage_policy_name="research"),
        make_run(world.vision, "live", status=RunStatus.RUNNING, ended_at=None, usage_policy_name="research"),
        make_run(world.vision, "a", source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                 usage_policy_name="research"),
        make_run(world.vision, "b", source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                 started_at=T0 + timedelta(minutes=30), ended_at=T0 + timedelta(hours=3),
                 usage_policy_name="research"),
    ]  # fmt: skip
    Run.objects.filter(pk=runs[1].pk).update(status=RunStatus.RUNNING)
    runs[1].attempts.update(ended_at=None)
    policy = UsagePolicy.objects.create(name="research", budget_usd=Decimal("100000"))
    policy.teams.add(world.vision)
    return {"runs": runs, "cluster": cluster, "policy": policy}


def test_a_teams_month_is_one_number_on_every_surface(world: World, workspace: dict, settings) -> None:
    # Rolled up an hour ago; the live run and the cluster still up accrue since then.
    with time_machine.travel(NOW - timedelta(hours=1), tick=False):
        rollups.refresh_changed()
    with time_machine.travel(NOW, tick=False):
        overview = overview_usd(world, "vision")
        figures = {
            "/costs/": costs_page_usd(world, world.vision),
            "api": api_usd(world, world.vision),
            "metrics": metrics_usd(settings, "vision"),
            "policy": world.client_for(world.sam)
            .get(reverse("policy_detail", args=[workspace["policy"].pk]))
            .context["status"]
            .spend,
            "run pages": sum(run_page_usd(world, run) for run in workspace["runs"]),
        }
    assert overview > 0
    for name, value in figures.items():
        # Run pages are each rounded to the cent before they are added up.
        tolerance = Decimal("0.01") * len(workspace["runs"]) if name == "run pages" else Decimal(0)
        assert abs(cents(value) - cents(overview)) <= tolerance, (name, value, overview)


def test_seeding_the_demo_rolls_its_costs_up(world: World) -> None:
    out = io.StringIO()
    call_command("seed_demo", "--runs", "6", "--without-advice-examples", stdout=out)
    assert "Cost rollup:" in out.getvalue()
    assert CostDailyTeam.objects.exists()  # the cost pages have rows before beat's first pass


def test_runall_rolls_costs_up_before_it_serves() -> None:
    source = inspect.getsource(runall.Command.handle)
    assert source.index('call_command("refresh_costs")') < source.index("subprocess.Popen")


def test_every_surface_says_what_its_figure_is(world: World) -> None:
    AcceleratorPrice.objects.create(accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK,
                                    usd_per_hour="1.00")  # fmt: skip
    make_run(world.vision, "priced")
    make_run(world.vision, "brazil", region="sa-east-1")  # no price there: the month is a lower bound
    UsagePolicy.objects.create(name="research", budget_usd=Decimal("100")).teams.add(world.vision)
    client = world.client_for(world.alice)
    with time_machine.travel(NOW, tick=False):
        rollups.refresh_changed()
        lower = "lower bound (no price for GPU_8xH100 in sa-east-1), as of 2026-11-03 09:00 UTC"
        body = world.api(world.vision, role="read").get("/api/v1/costs?from=2026-11-01").json()
        assert (body["kind"], body["unpriced"]) == ("lower bound", ["no price for GPU_8xH100 in sa-east-1"])
        assert body["as_of"].startswith("2026-11-03T09:00:00")
        exports = {
            "/costs/": client.get("/costs/", {"format": "csv", "start": "2026-11-01", "table": "experiments"}),
            "overview": client.get("/", {"format": "csv", "table": "spend"}),
        }
        for name, response in exports.items():
            rows = list(csv.DictReader(io.StringIO(response.content.decode())))
            assert rows and {row["figure"] for row in rows} == {lower}, name
        policy_csv = list(csv.DictReader(io.StringIO(client.get(reverse("policy_list"), {"format": "csv"})
                                                     .content.decode())))  # fmt: skip
        assert policy_csv[0]["spend_figure"] == "estimated, as of 2026-11-03 09:00 UTC"
        html = client.get("/").content.decode()
        assert "lower bound: no price for GPU_8xH100 in sa-east-1, as of 2026-11-03 09:00 UTC" in html
