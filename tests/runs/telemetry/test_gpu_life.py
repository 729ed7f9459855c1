"""Each GPU's hours summed on the write path (GpuLife): equal to its hour rollups, read one row a GPU (issue 30).

The run page's frame and an ended run's under-use flag read every hour of the run's GPUs from
GpuHour: 20,000 rows for 13 days of 64 GPUs, and more every hour. `store.refresh_hours` keeps
the sums by difference instead, so both read a row a GPU whatever the run's age.
"""

from __future__ import annotations

import importlib
import random
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Avg, Max
from django.test.utils import CaptureQueriesContext

from runs.choices import RunStatus
from runs.models import GpuHour, GpuLife, GpuSample, Node, Run
from runs.telemetry import charts, envelope, gpu_life, life, underuse
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def _stored(run: Run) -> dict:
    return {
        (row.run_id, row.node_id, row.gpu_index): (
            (row.hours, row.mean_hours, row.mean_sum, row.weight, row.weighted_sum),
            row.reported,
            row.means,
            row.power_limit_watts,
        )
        for row in GpuLife.objects.filter(run=run)
    }


def _from_hours(run: Run) -> dict:
    return {
        key: (tuple(getattr(sums, name) for name in gpu_life.SUMS), dict(sums.reported), sums.means, sums.power_limit)
        for key, sums in gpu_life.aggregate(GpuHour.objects.filter(run=run)).items()
    }


def _run(world: World, nodes: int = 2, **fields: object) -> tuple[Run, list[Node]]:
    run = make_run(world.vision, "life-1", num_accelerators=2 * nodes, gpus_per_node=2,
                   ended_at=T0 + timedelta(hours=4), **fields)  # fmt: skip
    attempt = run.attempts.get()
    return run, [attempt.nodes.get(), *(Node.objects.create(attempt=attempt, index=i) for i in range(1, nodes))]


def _sample(run: Run, node: Node, gpu: int, second: int) -> GpuSample:
    # Power only in the first hour, temperature only on GPU 1: the reported counts differ by hour and GPU.
    # The power limit drops after the first hour (an operator capped it): the highest stays.
    return GpuSample(
        run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=second),
        utilization_gpu=float((second * 7 + gpu * 13) % 101) if second % 11 else None,
        memory_used_bytes=2**30 + second, power_watts=300.0 + gpu if second < 3600 else None,
        temperature_c=60.0 + second % 5 if gpu == 1 else None,
        power_limit_watts=700.0 if second < 3600 else 500.0 + gpu,
    )  # fmt: skip


def test_ingest_keeps_each_gpus_sums_equal_to_its_hours_through_late_resent_and_shuffled_batches(
    world: World,
) -> None:
    run, nodes = _run(world)
    # Three hours of samples every 20 s, cut into batches of one node each, sent out of order,
    # some twice, one hour's batches arriving after the next hour's.
    batches = [
        [_sample(run, node, gpu, s) for gpu in range(2) for s in range(start, start + 600, 20)]
        for node in nodes for start in range(0, 3 * 3600, 600)
    ]  # fmt: skip
    order = list(range(len(batches)))
    random.Random(30).shuffle(order)
    order += order[:5]  # re-sent: adds nothing
    for i in order:
        store_gpu_samples(batches[i])
        assert _stored(run) == _from_hours(run)
    stored = _stored(run)
    assert len(stored) == 4 and all(sums[0][0] == 3 for sums in stored.values())
    # Power in one hour of each GPU, temperature in every hour of GPU 1 only.
    assert {key[2]: reported.get("power_watts") for key, (_, reported, _, _) in stored.items()} == {0: 1, 1: 1}
    assert {key[2]: reported.get("temperature_c") for key, (_, reported, _, _) in stored.items()} == {0: None, 1: 3}
    assert {limit for _, _, _, limit in stored.values()} == {700.0}
    # Each field's hour means summed in thousandths: power in one hour, temperature on GPU 1 only.
    assert {key[2]: means["power_watts"][0] for key, (_, _, means, _) in stored.items()} == {0: 1, 1: 1}
    assert {key[2]: means.get("temperature_c", [0])[0] for key, (_, _, means, _) in stored.items()} == {0: 0, 1: 3}
    assert all("utilization_gpu" not in means for _, _, means, _ in stored.values())
    # A rebuild from the hours finds what ingest kept.
    gpu_life.rebuild([run.pk])
    assert _stored(run) == stored


def test_the_frame_and_an_ended_runs_flag_read_a_row_a_gpu_and_answer_as_the_hours_do(world: World) -> None:
    run, nodes = _run(world, status=RunStatus.SUCCEEDED)
    # GPU 1 of node 1 idles: the lagging GPU over the run's whole life.
    store_gpu_samples([
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s),
                  utilization_gpu=5.0 if (node == nodes[1] and gpu == 1) else 90.0 + s % 7,
                  power_limit_watts=600.0 + 10 * gpu)
        for node in nodes for gpu in range(2) for s in range(0, 4 * 3600, 30)
    ])  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        found = life.life(run)
        flag = underuse.underuse(run, T0 + timedelta(hours=5))
        limit = charts.power_limit(run)
    assert not [q["sql"] for q in queries.captured_queries if '"runs_gpuhour"' in q["sql"]]
    assert limit == GpuHour.objects.filter(run=run).aggregate(m=Max("power_limit_watts"))["m"] == 610.0
    from_hours = life.tier(GpuHour, run)
    assert set(found.nodes) == set(from_hours.nodes) == {node.pk for node in nodes}
    for pk, node in found.nodes.items():
        assert node.rows == from_hours.nodes[pk].rows == 8
        assert node.signals == from_hours.nodes[pk].signals == {"utilization_gpu"}
        assert node.mean_utilization == pytest.approx(from_hours.nodes[pk].mean_utilization, abs=1e-6)
    assert flag is not None and flag.whole_life and flag.gpus == 4
    assert [gpu.message for gpu in flag.lagging] == ["GPU 1 on node 1 averaged 5% while the other 3 averaged 93%"]


def test_a_run_without_sums_is_read_from_its_minutes_and_rebuild_gives_them(world: World) -> None:
    run, nodes = _run(world)
    store_gpu_samples([_sample(run, nodes[0], 0, s) for s in range(0, 1200, 20)])
    GpuLife.objects.filter(run=run).delete()  # as hours written by COPY would leave it
    assert life.life(run).nodes.keys() == {nodes[0].pk}  # from the minutes
    assert gpu_life.rebuild([run.pk]) == 1
    assert _stored(run) == _from_hours(run)


def test_the_whole_life_panels_name_the_worst_gpu_from_a_row_a_gpu(world: World) -> None:
    """The "all" range: each GPU's mean over its life from GpuLife, what its hours average to, no hour read."""
    run, nodes = _run(world, status=RunStatus.SUCCEEDED)
    # GPU 1 of node 1 runs hot and idle; the rest alike.
    store_gpu_samples([
        GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=s),
                  temperature_c=88.5 if (node == nodes[1] and gpu == 1) else 61.0 + s % 3,
                  utilization_gpu=4.0 if (node == nodes[1] and gpu == 1) else 91.0 + s % 5,
                  memory_used_bytes=2**34 + 1000 * gpu + s)
        for node in nodes for gpu in range(2) for s in range(0, 4 * 3600, 60)
    ])  # fmt: skip
    fields = ["temperature_c", "utilization_gpu", "memory_used_bytes"]
    with CaptureQueriesContext(connection) as queries:
        found = envelope.read_envelopes(run, fields, width=500)
    assert not [q["sql"] for q in queries.captured_queries if '"runs_gpuhour"' in q["sql"]]
    assert found["temperature_c"].gpus == 4
    hot, idle = found["temperature_c"].worst, found["utilization_gpu"].worst
    assert hot is not None and idle is not None
    assert hot.name == idle.name == "node 1 · GPU 1"
    assert (hot.low, idle.low) == (False, True)
    # The same means as averaging the GPU's hour rollups.
    hours = GpuHour.objects.filter(run=run, node=nodes[1], gpu_index=1)
    assert hot.mean == pytest.approx(hours.aggregate(m=Avg("temperature_c_avg"))["m"], abs=1e-3)
    assert idle.mean == pytest.approx(hours.aggregate(m=Avg("utilization_gpu_avg"))["m"], abs=1e-6)
    others = GpuHour.objects.filter(run=run).exclude(node=nodes[1], gpu_index=1)
    per_gpu = others.values("node_id", "gpu_index").annotate(m=Avg("temperature_c_avg")).order_by()
    assert hot.others == pytest.approx(sum(row["m"] for row in per_gpu) / 3, abs=1e-3)
    # One node's life: its GPUs only.
    scoped = envelope.read_envelopes(run, ["temperature_c"], width=500, node_ids=[nodes[0].pk])
    assert scoped["temperature_c"].gpus == 2
    # A window, even the whole run's, is read from the rollups of the window as before.
    start, end = T0, T0 + timedelta(hours=4)
    with CaptureQueriesContext(connection) as queries:
        windowed = envelope.read_envelopes(run, fields, start, end, width=500)
    assert [q["sql"] for q in queries.captured_queries if '"runs_gpuhour"' in q["sql"]]
    assert windowed["temperature_c"].worst is not None and windowed["temperature_c"].worst.name == hot.name


def test_the_migration_fills_the_field_means_ingest_keeps(world: World) -> None:
    """runs/0027's backfill, run on rows whose means are cleared, gives what ingest kept (and rebuild computes)."""
    from django.apps import apps

    backfill = importlib.import_module("runs.migrations.0027_h39_gpu_life_means").backfill
    run, nodes = _run(world)
    store_gpu_samples([_sample(run, node, gpu, s) for node in nodes for gpu in range(2) for s in range(0, 7200, 30)])
    kept = _stored(run)
    assert all(means for _, _, means, _ in kept.values())
    GpuLife.objects.update(means={})
    backfill(apps, None)
    assert _stored(run) == kept == _from_hours(run)
