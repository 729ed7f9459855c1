"""A CPU-only cluster without an instance price shows a lower bound with its reason, never a bare $0.00.

The cluster is `databricks clusters get` of a running single-node i3.xlarge (12.2.x-cpu-ml),
restarted on 2023-09-27 (tests/data/databricks/cluster_get_running_restarted.json, SOURCES.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from billing.engine import cluster_costs
from billing.models import InstancePrice
from runs.collectors.run_records import cluster_fields
from runs.models import Cluster
from tests.conftest import TESTS, World

RECORD = json.loads((TESTS / "data" / "databricks" / "cluster_get_running_restarted.json").read_text())
NOW = datetime(2023, 9, 28, tzinfo=UTC)


def test_the_clusters_page_says_lower_bound_and_why_for_a_cpu_cluster_without_a_price(world: World) -> None:
    cluster = Cluster.objects.create(team=world.vision, cluster_id=RECORD["cluster_id"], **cluster_fields(RECORD))

    (cost,) = cluster_costs([cluster], now=NOW)
    assert not cost.has_gpus and cost.uptime_hours > 21
    assert (cost.figure.usd, cost.figure.kind) == (0, "lower bound")
    assert cost.figure.unpriced == (
        "no instance price for i3.xlarge driver + 0 x i3.xlarge in this region for part of the uptime",
    )

    page = world.client_for(world.alice).get("/runs/clusters/").content.decode()
    cpu = page.split('id="cpu-clusters"')[1].split("</section>")[0]
    assert '$0.00 <span class="badge badge-warn"' in cpu and "lower bound</span>" in cpu
    assert "no instance price for i3.xlarge driver + 0 x i3.xlarge" in cpu

    # Priced, it is an estimate with no badge.
    InstancePrice.objects.create(
        instance_type="i3.xlarge", region="", effective_from=datetime(2023, 1, 1, tzinfo=UTC), usd_per_hour="0.312"
    )
    cpu = world.client_for(world.alice).get("/runs/clusters/").content.decode().split('id="cpu-clusters"')[1]
    assert "lower bound" not in cpu.split("</section>")[0]
