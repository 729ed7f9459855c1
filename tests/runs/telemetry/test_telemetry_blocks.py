"""runs/telemetry/blocks.py: compacted minutes are lossless, chart and stall the same, and stay idempotent."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from runs import ingest, ingest_process
from runs.choices import BatchKind, BatchStatus
from runs.models import GpuHour, GpuMinute, GpuSample, GpuSampleBlock, IngestBatch, Node, Run
from runs.telemetry import blocks, charts, partitions, stalls
from runs.telemetry.blocks import compact_samples, decode_block, encode_block
from runs.telemetry.retention import prune_raw_samples
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, TESTS, World, make_run

pytestmark = pytest.mark.django_db
needs_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="table partitioning exists only on PostgreSQL; SQLite has one table"
)
DAY = timedelta(days=1)

# Long after T0: every minute of the tests is past the compaction cutoff.
LATER = T0 + timedelta(days=1)


def _sample(run: Run, node: Node, gpu: int, second: float, util: float, **extra) -> GpuSample:
    # Values in the units and steps NVML reports (runs/telemetry/importers/dmon.py, agent/nvml.py): integer
    # percent, milliwatts as watts, MiB-aligned bytes, MHz, KB/s; GPM activity as a float.
    values = dict(  # noqa: C408 (keyword form: the field names read as GpuSample's)
        utilization_gpu=util, utilization_memory=util / 2, memory_used_bytes=61_000 * 2**20 + int(util) * 2**20,
        memory_total_bytes=81_559 * 2**20, power_watts=round(300 + util * 3.217, 3), power_limit_watts=700.0,
        temperature_c=60.0 + util // 10, sm_clock_mhz=1980.0, mem_clock_mhz=2619.0, sm_active=util * 0.8731,
        tensor_active=util * 0.4117, throttle_reasons=0, ecc_corrected=0, ecc_uncorrected=0,
        pcie_tx_kbps=1_200.0 + util, pcie_rx_kbps=900.0, nvlink_tx_kbps=util * 1_843_200.0, nvlink_rx_kbps=None,
    )  # fmt: skip
    return GpuSample(run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=second), **(values | extra))


def _columns(samples: list[GpuSample]) -> list[tuple]:
    return [(s.ts, *(getattr(s, name) for name in blocks.VALUE_FIELDS)) for s in samples]


def test_encode_decode_is_lossless_with_gaps_sub_second_stamps_and_processes() -> None:
    count = 45
    gpus = [0] * 20 + [1] * 25
    rng = random.Random(3)
    offsets = sorted(rng.sample(range(60_000_000), 20)) + sorted(rng.sample(range(60_000_000), 25))  # irregular
    columns: dict[str, list] = {name: [None] * count for name in blocks.VALUE_FIELDS}
    columns["utilization_gpu"] = [float(i % 7) if i % 5 else None for i in range(count)]
    columns["power_watts"] = [312.456 + i / 1000 for i in range(count)]
    columns["memory_used_bytes"] = [2**40 + i if i % 3 else None for i in range(count)]  # ints with gaps
    columns["throttle_reasons"] = [4] * count  # constant
    columns["power_limit_watts"] = [0.0] * 44 + [-0.0]  # not constant: the sign of zero is kept
    processes = [[{"pid": 7, "used_memory_bytes": 1024, "run": "r-1"}] if i == 2 else None for i in range(count)]
    processes[3] = []  # a sample whose GPU ran no process is not one that was not asked

    data = encode_block(gpus, offsets, columns, processes)
    decoded = decode_block(data)
    some = decode_block(data, fields=["memory_used_bytes"])  # the others are skipped, not decompressed
    assert some.columns["memory_used_bytes"] == columns["memory_used_bytes"]
    assert some.columns["power_watts"] == [None] * count and some.processes == [None] * count

    assert (decoded.gpus, decoded.offsets_us) == (gpus, offsets)
    assert decoded.columns == columns
    assert [math.copysign(1.0, v) for v in decoded.columns["power_limit_watts"]][-2:] == [1.0, -1.0]
    assert decoded.processes == processes


def test_a_version_1_block_written_before_nvlink_still_decodes() -> None:
    # Written by the version 1 codec (commit 9a5f403's encode_block, over GpuSample's fields then):
    # two GPUs, three seconds, a gap, a constant, an int column with a null, one process list.
    data = (TESTS / "data" / "telemetry" / "gpusampleblock_v1.bin").read_bytes()
    assert data[0] == 1
    decoded = decode_block(data)
    assert (decoded.gpus, decoded.offsets_us) == ([0, 0, 0, 1, 1, 1], [0, 1_000_000, 2_000_000] * 2)
    assert decoded.columns["utilization_gpu"] == [97.0, 98.0, None, 41.0, 42.0, 43.0]
    assert decoded.columns["power_watts"] == [650.5, 651.25, 649.0, 300.0, 301.5, 299.75]
    assert decoded.columns["memory_total_bytes"] == [81_559 * 2**20] * 6
    assert decoded.columns["throttle_reasons"] == [4, 4, 0, 0, None, 0]
    assert decoded.columns["pcie_rx_kbps"] == [21846 * 1024.0] * 3 + [6849 * 1024.0] * 3
    assert decoded.processes[0] == [{"pid": 4242, "used_memory_bytes": 3 * 2**30}]
    # Fields added in version 2 were never stored: missing, not zero.
    for name in blocks.ADDED_IN_V2:
        assert decoded.columns[name] == [None] * 6
    assert set(decoded.columns) == set(blocks.VALUE_FIELDS)
    # Reading one field skips the others in a version 1 layout too.
    assert decode_block(data, fields=["throttle_reasons"]).columns["throttle_reasons"] == [4, 4, 0, 0, None, 0]
    # Re-encoded (a reopened and re-folded minute), it is written as the current version, losslessly.
    again = encode_block(decoded.gpus, decoded.offsets_us, decoded.columns, decoded.processes)
    assert again[0] == blocks.FORMAT_VERSION == 2
    assert decode_block(again).columns == decoded.columns


def test_a_version_1_block_in_the_table_reopens_and_charts(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 10
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    data = (TESTS / "data" / "telemetry" / "gpusampleblock_v1.bin").read_bytes()
    GpuSampleBlock.objects.create(run=run, node=node, minute=T0, samples=6, data=data)
    rows = blocks.raw_rows(run.pk, T0, T0 + timedelta(minutes=1), ["utilization_gpu", "nvlink_tx_kbps"])
    assert [(r[1], r[3], r[4]) for r in rows][:3] == [(0, 97.0, None), (0, 98.0, None), (0, None, None)]
    # A late sample for that minute reopens the v1 block into rows, then it folds again as v2.
    store_gpu_samples([_sample(run, node, 0, 30, 55.0)])
    assert GpuSampleBlock.objects.count() == 0 and GpuSample.objects.count() == 7
    assert GpuSample.objects.get(gpu_index=0, ts=T0).power_watts == 650.5
    assert GpuSample.objects.get(gpu_index=0, ts=T0 + timedelta(seconds=30)).nvlink_tx_kbps == 55.0 * 1_843_200.0
    compact_samples(now=LATER)
    (block,) = GpuSampleBlock.objects.all()
    assert bytes(block.data)[0] == 2 and block.samples == 7


def test_compaction_folds_closed_minutes_and_charts_the_same(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = 10
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    rng = random.Random(11)
    # 5 minutes on 2 GPUs at 1 Hz, one spike to 100 that a min/max chart must keep.
    samples = [_sample(run, node, g, s, float(rng.randrange(20, 60))) for g in range(2) for s in range(300)]
    samples[137] = _sample(run, node, 0, 137, 100.0, processes=[{"pid": 9, "used_memory_bytes": 5}])
    store_gpu_samples(samples)
    end = T0 + timedelta(seconds=299)
    before = charts.gpu_series(run, "utilization_gpu", T0, end)
    power_before = charts.gpu_series(run, "power_watts", T0, end)
    rollups = list(GpuMinute.objects.order_by("id").values())

    result = compact_samples(now=LATER)

    assert (result.minutes, result.samples, result.blocks) == (5, 600, 5)  # one block a node-minute
    assert GpuSample.objects.count() == 0 and GpuSampleBlock.objects.count() == 5
    after = charts.gpu_series(run, "utilization_gpu", T0, end)
    assert [(s.name, s.x, s.y, s.tier) for s in after] == [(s.name, s.x, s.y, s.tier) for s in before]
    assert max(after[0].y) == 100.0
    assert [s.y for s in charts.gpu_series(run, "power_watts", T0, end)] == [s.y for s in power_before]
    # Every stored value comes back exactly, processes included.
    rows = blocks.raw_rows(run.pk, T0, end, [*blocks.VALUE_FIELDS, "processes"])
    stored = sorted(samples, key=lambda s: (s.gpu_index, s.ts))
    assert [row[2:-1] for row in rows] == _columns(stored)
    assert [row[-1] for row in rows] == [s.processes for s in stored]
    assert list(GpuMinute.objects.order_by("id").values()) == rollups  # rollups untouched
    assert compact_samples(now=LATER).samples == 0  # idempotent


def test_a_late_sample_reopens_its_minute_and_a_resent_one_is_a_duplicate(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples([_sample(run, node, g, s, 40.0 + g) for g in (0, 1) for s in range(0, 120, 2)])  # even seconds
    compact_samples(now=LATER)
    assert GpuSample.objects.count() == 0
    other_gpu = GpuMinute.objects.filter(gpu_index=1).order_by("minute").values()
    other_before = list(other_gpu)

    resent = store_gpu_samples([_sample(run, node, 0, 10, 99.0)])
    assert (resent.inserted, resent.duplicates) == (0, 1)
    late = store_gpu_samples([_sample(run, node, 0, 11, 99.0), _sample(run, node, 0, 12, 99.0)])
    assert (late.inserted, late.duplicates) == (1, 1)

    minute = GpuMinute.objects.get(run=run, gpu_index=0, minute=T0)
    assert (minute.samples, minute.utilization_gpu_max) == (31, 99.0)  # rebuilt from the whole minute
    assert GpuHour.objects.get(run=run, gpu_index=0).samples == 61
    compact_samples(now=LATER)
    # The node-minute went back whole and came back whole: the other GPU lost nothing.
    assert GpuSampleBlock.objects.get(minute=T0).samples == 31 + 30
    assert list(other_gpu) == other_before
    first_minute = T0 + timedelta(seconds=59)
    values = [row[3] for row in blocks.raw_rows(run.pk, T0, first_minute, ["utilization_gpu"], gpu_index=0)]
    assert values.count(99.0) == 1 and len(values) == 31
    assert len(blocks.raw_rows(run.pk, T0, first_minute, ["utilization_gpu"], gpu_index=1)) == 30


def test_a_row_written_beside_a_block_is_merged_by_the_next_pass_and_the_block_wins(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples([_sample(run, node, 0, s, 40.0) for s in range(60)])
    compact_samples(now=LATER)
    # Written past store_sample_rows (a restore): rows beside the block, one at a stored instant.
    GpuSample.objects.bulk_create([_sample(run, node, 0, 5, 77.0), _sample(run, node, 0, 5.5, 66.0)])
    # Readers take a covered minute from its block alone: the hot table is not read there.
    values = [row[3] for row in blocks.raw_rows(run.pk, T0, T0 + timedelta(seconds=59), ["utilization_gpu"])]
    assert values == [40.0] * 60

    compact_samples(now=LATER)

    assert GpuSample.objects.count() == 0 and GpuSampleBlock.objects.get().samples == 61
    values = [row[3] for row in blocks.raw_rows(run.pk, T0, T0 + timedelta(seconds=59), ["utilization_gpu"])]
    assert len(values) == 61 and 77.0 not in values and 66.0 in values


def test_stalls_read_compacted_minutes(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    # 20 minutes hung: utilisation pinned, SM idle, power low (the stall signature).
    store_gpu_samples([_sample(run, node, 0, s, 100.0, sm_active=1.0, power_watts=90.0) for s in range(0, 1200, 5)])
    now = T0 + timedelta(seconds=1195)
    found = stalls.gpu_stalls(run, now=now)
    compact_samples(now=now + timedelta(minutes=11))
    assert GpuSampleBlock.objects.exists() and not GpuSample.objects.exists()
    assert stalls.gpu_stalls(run, now=now) == found and found


def test_retention_drops_old_blocks_and_minutes_and_keeps_hours(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 14
    settings.AIRBOARD_TELEMETRY_MINUTE_DAYS = 20  # T0 is more than 20 days before the real now
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples([_sample(run, node, 0, s, 50.0) for s in range(0, 7200, 10)])
    assert compact_samples(now=LATER).minutes == blocks.MINUTES_PER_PASS  # a pass is bounded
    assert compact_samples(now=LATER, max_minutes=1000).minutes == 120 - blocks.MINUTES_PER_PASS
    hours = list(GpuHour.objects.values())

    kept = prune_raw_samples(now=T0 + timedelta(days=14, minutes=30))
    assert kept.blocks_deleted == 29 and GpuSampleBlock.objects.count() == 91  # minutes 0..28 whole
    assert kept.minutes_deleted == 0

    gone = prune_raw_samples(now=T0 + timedelta(days=21))
    assert (gone.blocks_deleted, gone.minutes_deleted) == (91, 120)
    assert not GpuSampleBlock.objects.exists() and not GpuMinute.objects.exists()
    assert list(GpuHour.objects.values()) == hours
    # The run still charts, from its hours, with no range given (its extent comes from them).
    series = charts.gpu_series(run, "utilization_gpu")
    assert series and {s.tier for s in series} == {"hour"} and len(series[0].x) == 2
    # A sample for a pruned hour does not rebuild that hour from what little is left.
    store_gpu_samples([_sample(run, node, 0, 3, 99.0)])
    assert list(GpuHour.objects.values()) == hours


@needs_postgresql
def test_blocks_live_in_daily_partitions_and_go_whole(world: World, settings) -> None:
    settings.AIRBOARD_TELEMETRY_RAW_DAYS = 1
    future = datetime(2031, 6, 10, tzinfo=UTC)  # a midnight after any partition the migration made
    made = partitions.ensure_partitions(now=future, days_ahead=0, table=partitions.BLOCKS)
    assert made == [partitions.partition_name(future - DAY, partitions.BLOCKS), "runs_gpusampleblock_p20310610"]
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    start = future + timedelta(hours=1)
    store_gpu_samples([GpuSample(run=run, node=node, gpu_index=0, ts=start + timedelta(seconds=s)) for s in range(120)])
    compact_samples(now=start + timedelta(hours=1))
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text, count(*) FROM runs_gpusampleblock GROUP BY 1")
        assert dict(cursor.fetchall()) == {"runs_gpusampleblock_p20310610": 2}
    connection.check_constraints()  # the inserts' deferred FK checks, as a commit would (see test_partitions)

    result = prune_raw_samples(now=future + 2 * DAY + timedelta(hours=1))

    assert "runs_gpusampleblock_p20310610" in result.block_partitions_dropped
    assert not GpuSampleBlock.objects.exists() and result.blocks_deleted == 0


def test_a_stored_batch_drops_its_rows_and_a_resend_is_still_a_duplicate(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    rows = [[run.pk, node.pk, 0, (T0 + timedelta(seconds=s)).isoformat(), 97.5, *([None] * 15), None] for s in range(5)]
    batch, _ = ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, rows, "nvml")

    assert ingest_process.process_batch(batch.pk).inserted == 5

    stored = IngestBatch.objects.get(pk=batch.pk)
    assert (stored.status, stored.inserted, stored.rows) == (BatchStatus.DONE, 5, {"source": "nvml", "rows": []})
    assert ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, rows, "nvml") == (stored, True)
    assert GpuSample.objects.filter(run=run, source="nvml").count() == 5


def test_a_batch_recorded_before_nvlink_still_processes_and_a_new_one_stores_it(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    # A row as the API recorded it before NVLink: 4 ids, 16 values, then processes, and no more.
    old_width = ingest.SAMPLE_COLUMNS.index("processes") + 1
    processes = [{"pid": 4242, "used_memory_bytes": 1024, "run": ""}]
    old = [[run.pk, node.pk, 0, (T0 + timedelta(seconds=s)).isoformat(), 97.5, *([None] * 15), processes]
           for s in range(3)]  # fmt: skip
    assert len(old[0]) == old_width == 21
    old_batch, _ = ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, old, "nvml")
    assert ingest_process.process_batch(old_batch.pk).inserted == 3
    first = GpuSample.objects.get(run=run, ts=T0)
    assert (first.utilization_gpu, first.processes, first.nvlink_tx_kbps, first.nvlink_rx_kbps) == (
        97.5, processes, None, None,
    )  # fmt: skip
    # The same samples sent today (NVLink missing) hash as before: the resend is a duplicate.
    resent = [[*row[:-1], processes, None, None] for row in old]
    assert ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, resent, "nvml") == (
        IngestBatch.objects.get(pk=old_batch.pk), True,
    )  # fmt: skip
    # Today's rows carry NVLink after processes, in SAMPLE_COLUMNS order.
    values = dict.fromkeys(ingest.SAMPLE_VALUE_COLUMNS) | {"utilization_gpu": 50.0, "nvlink_tx_kbps": 184_320_000.0}
    new = [[run.pk, node.pk, 1, T0.isoformat(), *(values[name] for name in ingest.SAMPLE_VALUE_COLUMNS)]]
    new_batch, _ = ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, new, "nvml")
    assert ingest_process.process_batch(new_batch.pk).inserted == 1
    assert GpuSample.objects.get(run=run, gpu_index=1).nvlink_tx_kbps == 184_320_000.0
    assert GpuMinute.objects.get(run=run, gpu_index=1).nvlink_tx_kbps_max == 184_320_000.0


def test_a_late_batch_spanning_many_compacted_minutes_reopens_them_all(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    # 1,500 minutes: more OR-ed terms than SQLite's expression depth allows in one query.
    store_gpu_samples([_sample(run, node, 0, m * 60, 40.0) for m in range(1500)])
    compact_samples(now=T0 + timedelta(days=3), max_minutes=2000)
    assert GpuSampleBlock.objects.count() == 1500

    late = store_gpu_samples([_sample(run, node, 0, m * 60 + 30, 60.0) for m in range(1500)])

    assert (late.inserted, late.duplicates) == (1500, 0)
    assert not GpuSampleBlock.objects.exists() and GpuSample.objects.count() == 3000
    assert set(GpuMinute.objects.values_list("samples", flat=True)) == {2}
