"""Classic clusters: uptime cost, busy/idle/unknown GPU-hours, the serverless what-if, and the pages."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from billing.costs.clusters import serverless_equivalent
from billing.engine import cluster_costs, team_totals
from billing.models import AcceleratorPrice, InstancePrice
from runs.choices import RunSource
from runs.clusters.facts import access_mode, instance_gpus
from runs.models import Cluster, ClusterEvent, GpuMinute, Node
from tests.conftest import T0, World, make_run

NOW = T0 + timedelta(days=1)


def _price(instance_type: str, usd: str) -> None:
    InstancePrice.objects.create(instance_type=instance_type, effective_from=T0 - timedelta(days=30), usd_per_hour=usd)


def _g5_cluster(world: World) -> Cluster:
    """g5.xlarge driver ($1/h, 1 GPU) + 2 x g5.12xlarge ($4/h, 4 GPUs): $9/h, 9 GPUs; up 3 hours."""
    _price("g5.xlarge", "1.00")
    _price("g5.12xlarge", "4.00")
    c = Cluster.objects.create(
        team=world.vision, cluster_id="vision-g5", name="vision-g5", spark_version="15.4.x-gpu-ml-scala2.12",
        node_type_id="g5.12xlarge", driver_node_type_id="g5.xlarge", num_workers=2, region="us-west-2",
        data_security_mode="SINGLE_USER", single_user_name="alice@example.com", start_time=T0,
        terminated_time=T0 + timedelta(hours=3),
    )  # fmt: skip
    ClusterEvent.objects.create(cluster=c, ts=T0, kind="STARTING")
    ClusterEvent.objects.create(cluster=c, ts=T0 + timedelta(hours=3), kind="TERMINATED")
    run = make_run(world.vision, "vision-g5-run", source=RunSource.CLASSIC, cluster=c)
    node = Node.objects.get(attempt__run=run)
    rows = [
        # 60 minutes x 4 GPUs busy = 4 GPU-hours; 30 minutes x 2 GPUs idle = 1 GPU-hour.
        *(GpuMinute(run=run, node=node, gpu_index=g, minute=T0 + timedelta(minutes=m), utilization_gpu_max=80)
          for m in range(60) for g in range(4)),
        *(GpuMinute(run=run, node=node, gpu_index=g, minute=T0 + timedelta(minutes=60 + m), utilization_gpu_max=1)
          for m in range(30) for g in range(4, 6)),
        # Outside the uptime: not counted.
        GpuMinute(run=run, node=node, gpu_index=0, minute=T0 + timedelta(hours=5), utilization_gpu_max=90),
    ]  # fmt: skip
    GpuMinute.objects.bulk_create(rows)
    return c


def test_instance_types_map_to_gpus_and_serverless_shapes() -> None:
    assert instance_gpus("g5.12xlarge").count == 4 and instance_gpus("g5.xlarge").model == "A10"
    assert serverless_equivalent("g5.2xlarge") == "GPU_1xA10"
    assert serverless_equivalent("p5.48xlarge") == "GPU_8xH100"
    assert serverless_equivalent("a3-highgpu-1g") == "GPU_1xH100"
    assert serverless_equivalent("p4d.24xlarge") is None
    assert instance_gpus("i3.xlarge") is None and serverless_equivalent("i3.xlarge") is None


def test_cluster_cost_hand_computed(world: World) -> None:
    c = _g5_cluster(world)
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_1xA10", region="us-west-2", effective_from=T0 - timedelta(days=30), usd_per_hour="1.10"
    )
    (cost,) = cluster_costs([c], now=NOW)
    assert cost.uptime_hours == Decimal("3")
    assert cost.uptime_cost == Decimal("27.00")  # 3 h x ($1 + 2 x $4)
    assert cost.gpus == 9
    assert cost.gpu_hours == Decimal("27")
    assert cost.busy_gpu_hours == Decimal("4")
    assert cost.idle_gpu_hours == Decimal("1")
    assert cost.unknown_gpu_hours == Decimal("22")
    assert cost.idle_cost == Decimal("1.00")  # 1 GPU-h x $4.00 / 4 GPUs
    assert cost.serverless_shape == "GPU_1xA10"
    assert cost.what_if_cost == Decimal("4.40")  # 4 busy GPU-h x $1.10
    assert cost.what_if_saving == Decimal("22.60")
    (team,) = team_totals([cost])
    assert (team.team, team.uptime_cost, team.what_if_saving, team.without_equivalent) == (
        "vision", Decimal("27.00"), Decimal("22.60"), 0
    )  # fmt: skip
    assert access_mode(c) == "dedicated to alice@example.com"


def test_what_if_without_serverless_equivalent(world: World) -> None:
    _price("p4d.24xlarge", "14.75")
    c = Cluster.objects.create(
        team=world.vision, cluster_id="a100", node_type_id="p4d.24xlarge", driver_node_type_id="p4d.24xlarge",
        single_node=True, region="us-west-2", last_restarted_time=T0, terminated_time=T0 + timedelta(hours=2),
    )  # fmt: skip
    (cost,) = cluster_costs([c], now=NOW)
    assert cost.uptime_cost == Decimal("29.50")  # no events: last_restarted_time to terminated_time, driver only
    assert cost.what_if_cost is None and cost.what_if_saving is None
    assert "no serverless equivalent for p4d.24xlarge" in cost.notes
    (team,) = team_totals([cost])
    assert team.without_equivalent == 1 and team.what_if_cost == 0


def test_what_if_without_a_price_says_so(world: World) -> None:
    c = _g5_cluster(world)
    (cost,) = cluster_costs([c], now=NOW)
    assert cost.what_if_cost == 0
    assert any("no serverless GPU_1xA10 price" in note for note in cost.notes)


def test_pages_are_team_scoped(world: World) -> None:
    c = _g5_cluster(world)
    alice = world.client_for(world.alice).get("/runs/clusters/")
    assert alice.status_code == 200 and "vision-g5" in alice.content.decode()
    assert "$27.00" in alice.content.decode()
    charlie = world.client_for(world.charlie)
    assert "vision-g5" not in charlie.get("/runs/clusters/").content.decode()
    assert charlie.get(f"/runs/clusters/{c.pk}/").status_code == 404
    detail = world.client_for(world.bob).get(f"/runs/clusters/{c.pk}/")
    assert detail.status_code == 200 and "TERMINATED" in detail.content.decode()
    assert "vision-g5" in world.client_for(world.sam).get("/runs/clusters/").content.decode()


def test_advice_page_is_team_scoped(world: World) -> None:
    Cluster.objects.create(team=world.vision, cluster_id="vision-photon", name="vision-photon",
                           runtime_engine="PHOTON", node_type_id="g5.xlarge")  # fmt: skip
    assert "vision-photon" in world.client_for(world.alice).get("/runs/advice/").content.decode()
    body = world.client_for(world.charlie).get("/runs/advice/").content.decode()
    assert "vision-photon" not in body and "No findings" in body


def test_cluster_list_queries_do_not_grow_with_clusters(world: World, django_assert_max_num_queries) -> None:
    for i in range(5):
        Cluster.objects.create(team=world.vision, cluster_id=f"c{i}", node_type_id="g5.xlarge", start_time=T0)
    client = world.client_for(world.alice)
    with django_assert_max_num_queries(15):
        assert client.get("/runs/clusters/").status_code == 200
