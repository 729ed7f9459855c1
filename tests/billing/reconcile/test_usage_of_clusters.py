"""Usage rows of all-purpose and job clusters are linked to their clusters and runs.

`billing_usage_clusters.csv` is `system.billing.usage` in the shape of the AI Runtime export
beside it (same columns, the table's full `usage_metadata` key set), with classic compute rows:
`ALL_PURPOSE` rows naming only `usage_metadata.cluster_id` (and `node_type`), a `JOBS` row also
naming its `job_id` and `job_run_id` (tests/data/databricks/SOURCES.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

from billing.models import BilledUsage
from billing.reconcile import importing
from runs.choices import RunOrigin, RunSource
from runs.models import Cluster
from tests.conftest import TESTS, World, make_run

USAGE = TESTS / "data" / "databricks" / "billing_usage_clusters.csv"
ALL_PURPOSE = ("c1b2c3d4-0002-4000-8000-000000000001", "c1b2c3d4-0002-4000-8000-000000000002")
JOBS = "c1b2c3d4-0002-4000-8000-000000000003"


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 2, hour, minute, tzinfo=UTC)


def _import() -> importing.ImportResult:
    with USAGE.open(newline="") as usage:
        return importing.import_usage(usage)


def classic_run(world: World, external_id: str, cluster: Cluster, start: datetime, end: datetime) -> object:
    return make_run(
        world.vision, external_id, source=RunSource.CLASSIC, origin=RunOrigin.COLLECTOR, cluster=cluster,
        accelerator_type="", instance_type=cluster.node_type_id, started_at=start, ended_at=end,
    )  # fmt: skip


def test_cluster_rows_link_to_their_cluster_and_to_the_one_run_that_used_it(world: World) -> None:
    shared = Cluster.objects.create(team=world.vision, cluster_id="1102-080000-gpuap001", node_type_id="g5.12xlarge")
    job = Cluster.objects.create(team=world.vision, cluster_id="1102-090000-t4job001", node_type_id="g4dn.xlarge")
    # 9:00-10:00 only `alone` ran on the all-purpose cluster; 10:00-11:00 it and `second` both did.
    alone = classic_run(world, "7101", shared, at(9, 5), at(10, 30))
    classic_run(world, "7102", shared, at(10, 10), at(10, 50))
    t4 = classic_run(world, "12401", job, at(9), at(10))

    result = _import()

    assert result.ok and result.added == 3
    rows = {r.record_id: r for r in BilledUsage.objects.all()}
    assert {rid: (rows[rid].cluster_id, rows[rid].run_id) for rid in (*ALL_PURPOSE, JOBS)} == {
        ALL_PURPOSE[0]: (shared.pk, alone.pk),
        ALL_PURPOSE[1]: (shared.pk, None),  # two runs shared that hour: the cluster's row, no run's
        JOBS: (job.pk, t4.pk),  # its job_run_id, and its job cluster
    }
    assert rows[JOBS].databricks_cluster_id == "1102-090000-t4job001"


def test_a_row_that_arrives_before_its_cluster_is_linked_once_the_cluster_is_stored(world: World) -> None:
    assert _import().ok
    assert not BilledUsage.objects.filter(cluster__isnull=False).exists()

    shared = Cluster.objects.create(team=world.vision, cluster_id="1102-080000-gpuap001", node_type_id="g5.12xlarge")
    alone = classic_run(world, "7101", shared, at(9, 5), at(9, 55))
    # Re-importing the same file adds nothing and links what can now be linked.
    result = _import()

    assert (result.added, result.unchanged) == (0, 3)
    first = BilledUsage.objects.get(record_id=ALL_PURPOSE[0])
    assert (first.cluster_id, first.run_id) == (shared.pk, alone.pk)
    assert BilledUsage.objects.get(record_id=JOBS).cluster_id is None  # that job cluster is not stored


def test_a_run_of_another_origin_on_the_cluster_is_never_billed_the_clusters_row(world: World) -> None:
    shared = Cluster.objects.create(team=world.vision, cluster_id="1102-080000-gpuap001", node_type_id="g5.12xlarge")
    pushed = classic_run(world, "7101", shared, at(9, 5), at(9, 55))
    pushed.origin = RunOrigin.KEY
    pushed.save()

    assert _import().ok

    row = BilledUsage.objects.get(record_id=ALL_PURPOSE[0])
    assert (row.cluster_id, row.run_id) == (shared.pk, None)
