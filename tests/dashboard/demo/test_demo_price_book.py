"""The demo's price book prices every instance type the demo uses (issue 31).

The demo's classic runs (dashboard/demo/seed.py `_compute`) and its advice clusters
(dashboard/demo/clusters.py) name instance types; a type the shipped book lacked made every
classic run on it cost "$0.00" (a lower bound with no price). Each type must have a price in
force from before the demo's oldest run, and a classic run on it must cost more than nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from billing.engine import run_cost
from billing.models import InstancePrice
from billing.prices.pricebook import load_default_prices
from dashboard.demo import clusters
from dashboard.demo.seed import DAYS, build_plan
from runs.choices import RunSource, RunStatus
from tests.conftest import World, make_run

NOW = datetime(2026, 12, 3, 9, tzinfo=UTC)


def demo_instance_types() -> set[str]:
    """Every instance type a seeded demo names: planned runs, advice clusters (driver and workers), advice runs."""
    plan = build_plan(42, NOW)  # seed_demo's default seed and size
    found = {run.instance_type for run in plan.runs if run.instance_type}
    for cluster in clusters.CLUSTERS:
        found |= {cluster.fields.get("node_type_id", ""), cluster.fields.get("driver_node_type_id", "")}
    found |= {run.fields.get("instance_type", "") for run in clusters.RUNS}
    return found - {""}


def test_the_demo_names_classic_instance_types() -> None:
    # Guards the test below against an empty set: the demo plans classic runs on several types.
    assert {"g5.2xlarge", "p5.4xlarge", "p5.48xlarge", "p6-b300.48xlarge"} <= demo_instance_types()


@pytest.mark.django_db
def test_every_instance_type_the_demo_uses_has_a_price() -> None:
    load_default_prices()
    oldest = NOW - timedelta(days=DAYS + 1)
    priced = set(
        InstancePrice.objects.filter(region="", effective_from__lte=oldest).values_list("instance_type", flat=True)
    )
    assert demo_instance_types() - priced == set()


@pytest.mark.parametrize("instance_type", sorted(demo_instance_types()))
def test_a_failed_classic_run_on_each_demo_type_costs_more_than_nothing(world: World, instance_type: str) -> None:
    load_default_prices()
    run = make_run(
        world.vision, f"classic-{instance_type}", source=RunSource.CLASSIC, status=RunStatus.FAILED,
        instance_type=instance_type, accelerator_type="", num_accelerators=1, gpus_per_node=1,
    )  # fmt: skip
    cost = run_cost(run, now=NOW)
    assert cost.estimate.kind == "estimated", cost.estimate.label
    assert cost.estimate.usd > 0
