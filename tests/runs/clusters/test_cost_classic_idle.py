"""Classic cluster uptime cost, idle GPU cost, negotiated prices and egress processing fees.

Prices are made up for easy arithmetic; every expected figure is worked out by hand.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing.choices import PriceKind
from billing.costs.run_costs import breakdowns_for_runs, idle_hours
from billing.costs.serverless import PricePeriod, estimate_run_cost
from billing.costs.uptime import combined_rate
from billing.models import AcceleratorPrice, EgressPrice, EgressRecord, InstancePrice
from runs.choices import RunSource
from runs.models import Attempt, Cluster, GpuMinute, Node
from tests.conftest import T0, World, make_run

BOOK = datetime(2026, 1, 1, tzinfo=UTC)


def _instance(instance_type: str, usd: str, region: str = "", at: datetime = BOOK) -> None:
    InstancePrice.objects.create(instance_type=instance_type, region=region, effective_from=at, usd_per_hour=usd)


def test_classic_cluster_bills_uptime_of_driver_and_workers(world: World) -> None:
    # Driver g5.xlarge $1.00/h + 2 workers p4d.24xlarge $10.00/h = $21.00/h, for 3 h of uptime.
    _instance("g5.xlarge", "1.00")
    _instance("p4d.24xlarge", "10.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-1", node_type_id="p4d.24xlarge", driver_node_type_id="g5.xlarge",
        num_workers=2, region="us-west-2", last_restarted_time=T0 - timedelta(hours=1),
        terminated_time=T0 + timedelta(hours=2),
    )  # fmt: skip
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster, num_accelerators=16, accelerator_type="")
    cost = breakdowns_for_runs([run], now=T0 + timedelta(days=1))[run.pk]
    assert cost.classic
    assert cost.compute == Decimal("63.00")
    assert cost.gpu_hours == Decimal(3 * 16)
    assert [i.label for i in cost.intervals] == ["cluster uptime"]
    assert cost.unpriced_reasons == ()


def test_classic_cluster_price_change_and_region_specific_price(world: World) -> None:
    # The region's own price ($2) wins over the any-region one ($5); it drops to $1 at T0+1h.
    _instance("g5.12xlarge", "5.00")
    _instance("g5.12xlarge", "2.00", region="us-west-2")
    _instance("g5.12xlarge", "1.00", region="us-west-2", at=T0 + timedelta(hours=1))
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="c-2", node_type_id="g5.12xlarge", num_workers=0, single_node=True,
        region="us-west-2", last_restarted_time=T0, terminated_time=T0 + timedelta(hours=3),
    )  # fmt: skip
    run = make_run(world.vision, source=RunSource.CLASSIC, cluster=cluster)
    # Driver only (single node): 1 h x $2 + 2 h x $1.
    assert breakdowns_for_runs([run], now=T0 + timedelta(days=1))[run.pk].compute == Decimal("4.00")


def test_classic_run_without_cluster_uses_instance_type_and_node_count(world: World) -> None:
    _instance("p5.48xlarge", "40.00")
    run = make_run(
        world.vision, source=RunSource.CLASSIC, instance_type="p5.48xlarge", num_accelerators=16, gpus_per_node=8
    )
    cost = breakdowns_for_runs([run], now=T0 + timedelta(days=1))[run.pk]
    assert cost.compute == Decimal("80.00")  # 2 nodes x 1 h x $40
    assert cost.billed_as == "2 x p5.48xlarge"


def test_classic_run_without_instance_price_is_flagged(world: World) -> None:
    run = make_run(world.vision, source=RunSource.CLASSIC, instance_type="p5.48xlarge")
    cost = breakdowns_for_runs([run], now=T0 + timedelta(days=1))[run.pk]
    assert cost.compute == 0
    assert "no instance price" in cost.unpriced_reasons[0]


def test_idle_cost_counts_minutes_below_threshold_while_billed(world: World, settings) -> None:
    settings.AIRBOARD_IDLE_UTILIZATION_PERCENT = 5
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="6.00"
    )
    run = make_run(world.vision)  # T0 .. T0+1h, 8 GPUs
    node = Node.objects.get(attempt__run=run)
    minutes = [
        (0, T0, 0.0),  # idle
        (1, T0, 4.9),  # idle
        (2, T0, 5.0),  # busy: not below the threshold
        (0, T0 + timedelta(minutes=1), 1.0),  # idle
        (0, T0 + timedelta(hours=1), 0.0),  # after the attempt ended: not billed
        (3, T0 + timedelta(minutes=2), None),  # no reading: never counted as idle
    ]
    for gpu, minute, util in minutes:
        GpuMinute.objects.create(run=run, node=node, gpu_index=gpu, minute=minute, utilization_gpu_max=util)
    cost = breakdowns_for_runs([run], now=T0 + timedelta(days=1))[run.pk]
    # 3 idle GPU-minutes = 0.05 GPU-hours (exact) x $6 = $0.30.
    assert cost.idle_gpu_hours == Decimal("0.05")
    assert cost.idle == Decimal("0.30")
    assert cost.compute == Decimal("48.00")  # idle is part of compute, not added to it
    assert cost.total == estimate_run_cost(run, now=T0 + timedelta(days=1)).total
    assert cost.intervals[0].idle == Decimal("0.30")


def test_idle_hours_round_once_per_group() -> None:
    assert idle_hours(1) == Decimal("0.016666667")
    assert idle_hours(60) == Decimal(1)


def test_negotiated_price_replaces_list_price(world: World) -> None:
    for kind, usd in ((PriceKind.LIST, "6.00"), (PriceKind.NEGOTIATED, "4.00")):
        AcceleratorPrice.objects.create(
            accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour=usd, kind=kind
        )
    run = make_run(world.vision)
    assert estimate_run_cost(run, now=T0 + timedelta(days=1)).compute == Decimal("32.00")


def test_egress_processing_fee_adds_per_gb(world: World) -> None:
    EgressPrice.objects.create(
        source_region="us-west-2", destination_region="us-east-1", effective_from=BOOK,
        usd_per_gb="0.02", usd_per_gb_processing="0.045",
    )  # fmt: skip
    run = make_run(world.vision)
    EgressRecord.objects.create(run=run, source_region="us-west-2", destination_region="us-east-1", bytes=10**10, ts=T0)
    assert estimate_run_cost(run, now=T0 + timedelta(days=1)).egress == Decimal("0.65")


def test_combined_rate_starts_when_every_part_is_priced() -> None:
    early, late = BOOK, BOOK + timedelta(days=10)
    rate = combined_rate([PricePeriod(early, Decimal(1))], [PricePeriod(late, Decimal(3))], 2)
    assert rate == [PricePeriod(late, Decimal(7))]


def test_attempts_of_serverless_run_each_billed(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="1.00"
    )
    run = make_run(world.vision)
    Attempt.objects.create(run=run, number=2, started_at=T0 + timedelta(hours=2), ended_at=T0 + timedelta(hours=3))
    cost = breakdowns_for_runs([run], now=T0 + timedelta(days=1))[run.pk]
    assert [i.compute for i in cost.intervals] == [Decimal(8), Decimal(8)]


def test_run_page_shows_the_breakdown(world: World) -> None:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=BOOK, usd_per_hour="1.00"
    )
    run = make_run(world.vision)
    body = world.client_for(world.alice).get(f"/runs/{run.pk}/").content.decode()
    assert "cost-breakdown" in body and "Attempt 1" in body and "$8.00" in body


def _shared_cluster(world: World, start: datetime, end: datetime) -> Cluster:
    _instance("g5.12xlarge", "10.00")
    return Cluster.objects.create(
        team=world.vision, cluster_id="shared", node_type_id="g5.12xlarge", num_workers=0, single_node=True,
        region="us-west-2", last_restarted_time=start, terminated_time=end,
    )  # fmt: skip


def _classic_run(world: World, name: str, cluster: Cluster, start: datetime, end: datetime):
    return make_run(world.vision, name, source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                    num_accelerators=4, started_at=start, ended_at=end)  # fmt: skip


def test_a_shared_cluster_is_billed_once_split_by_who_was_running(world: World) -> None:
    # $10/h, up from T0-1h to T0+4h: $50 in all. A runs T0..T0+2h, B runs T0+1h..T0+4h.
    # Nobody [-1, 0): half each. A alone [0, 1). Both [1, 2): half each. B alone [2, 4).
    cluster = _shared_cluster(world, T0 - timedelta(hours=1), T0 + timedelta(hours=4))
    a = _classic_run(world, "a", cluster, T0, T0 + timedelta(hours=2))
    b = _classic_run(world, "b", cluster, T0 + timedelta(hours=1), T0 + timedelta(hours=4))
    costs = breakdowns_for_runs([a, b], now=T0 + timedelta(days=1))
    assert (costs[a.pk].compute, costs[b.pk].compute) == (Decimal("20.00"), Decimal("30.00"))
    assert costs[a.pk].gpu_hours == Decimal(2 * 4)
    assert costs[a.pk].billed_as.endswith("its uptime shared by 2 runs")
    # Priced alone (a page showing one run), a run still gets only its share.
    assert breakdowns_for_runs([b], now=T0 + timedelta(days=1))[b.pk].compute == Decimal("30.00")
    # The cluster page's uptime cost is what the runs' shares add up to.
    from billing.engine import cluster_costs

    assert cluster_costs([cluster], now=T0 + timedelta(days=1))[0].uptime_cost == Decimal("50.00")


def test_shares_that_do_not_divide_evenly_still_add_up_exactly(world: World) -> None:
    from billing.costs import rollups
    from billing.models import CostDaily

    # Three runs through one hour at $10/h: 1e9 quanta of 1e-9 h do not split in three.
    cluster = _shared_cluster(world, T0, T0 + timedelta(hours=1))
    runs = [_classic_run(world, name, cluster, T0, T0 + timedelta(hours=1)) for name in ("x", "y", "z")]
    costs = breakdowns_for_runs(runs, now=T0 + timedelta(days=1))
    shares = sorted(c.compute for c in costs.values())
    assert shares == [Decimal("3.33333333"), Decimal("3.33333333"), Decimal("3.33333334")]
    assert sum(shares) == Decimal("10.00")
    rollups.recompute_days([T0.date()], now=T0 + timedelta(days=1))
    assert rollups.totals(CostDaily.objects.all())["compute_usd"] == Decimal("10.00")
