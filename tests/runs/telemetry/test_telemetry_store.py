"""runs/telemetry/store.py: exact inserted/duplicate counts, and rollups that match a from-scratch build."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db.models import Avg, Count, Max, Min

from runs.models import ROLLUP_FIELDS, GpuHour, GpuMinute, GpuSample, Node, Run
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def sample(run: Run, node: Node, gpu: int, second: int, value: float) -> GpuSample:
    return GpuSample(
        run=run, node=node, gpu_index=gpu, ts=T0 + timedelta(seconds=second), utilization_gpu=value,
        memory_used_bytes=int(value * 10**8), memory_total_bytes=80 * 10**9, power_watts=value * 7,
        temperature_c=60 + value / 10, sm_clock_mhz=1980.0, utilization_memory=value / 2,
        sm_active=value * 0.82, tensor_active=value * 0.48, pcie_tx_kbps=value * 2_048.0, pcie_rx_kbps=value * 9_000.0,
        nvlink_tx_kbps=value * 1_843_200.0, nvlink_rx_kbps=value * 1_800_000.0,
        processes=[{"pid": 7, "used_memory_bytes": 1}] if second == 0 else None,
    )  # fmt: skip


def test_counts_are_exact_for_new_repeated_and_stored_rows(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    first = [sample(run, node, g, s, 50.0) for g in range(8) for s in range(30)]
    assert store_gpu_samples(first).inserted == 240
    # 60 seconds: 30 already stored, 30 new, and 8 in-batch repeats of a new one.
    second = [sample(run, node, g, s, 50.0) for g in range(8) for s in range(60)]
    second += [sample(run, node, g, 45, 99.0) for g in range(8)]
    result = store_gpu_samples(second)
    assert (result.inserted, result.duplicates) == (240, 248)
    assert GpuSample.objects.count() == 480
    assert store_gpu_samples(second).inserted == 0
    assert GpuSample.objects.get(gpu_index=0, ts=T0).processes == [{"pid": 7, "used_memory_bytes": 1}]
    assert GpuSample.objects.get(gpu_index=0, ts=T0 + timedelta(seconds=45)).utilization_gpu == 50.0


def _scratch_minutes(run: Run) -> dict:
    """The minute rollups recomputed from all raw samples, in Python from the database's own aggregates."""
    out = {}
    for row in GpuSample.objects.filter(run=run).values("node_id", "gpu_index", "ts"):
        out.setdefault((row["node_id"], row["gpu_index"], row["ts"].replace(second=0, microsecond=0)), 0)
    for key in out:
        node_id, gpu, minute = key
        out[key] = GpuSample.objects.filter(
            run=run, node_id=node_id, gpu_index=gpu, ts__gte=minute, ts__lt=minute + timedelta(minutes=1)
        ).aggregate(n=Count("id"), lo=Min("utilization_gpu"), avg=Avg("utilization_gpu"), hi=Max("utilization_gpu"))
    return out


def _scratch_hours(run: Run) -> dict:
    out = {}
    for row in GpuSample.objects.filter(run=run).values("node_id", "gpu_index", "ts"):
        out.setdefault((row["node_id"], row["gpu_index"], row["ts"].replace(minute=0, second=0, microsecond=0)), 0)
    for key in out:
        node_id, gpu, hour = key
        aggregates = {}
        for field in ROLLUP_FIELDS:
            aggregates |= {f"{field}_min": Min(field), f"{field}_avg": Avg(field), f"{field}_max": Max(field)}
        out[key] = GpuSample.objects.filter(
            run=run, node_id=node_id, gpu_index=gpu, ts__gte=hour, ts__lt=hour + timedelta(hours=1)
        ).aggregate(samples=Count("id"), **aggregates)
    return out


def test_rollups_after_out_of_order_and_duplicate_batches_match_a_scratch_build(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    rng = random.Random(7)
    # Two hours and a bit on 2 GPUs, sent as shuffled overlapping batches: late, early, repeated.
    every = [sample(run, node, g, s, float(rng.randrange(0, 101))) for g in range(2) for s in range(0, 7500, 7)]
    rng.shuffle(every)
    batches = [every[i : i + 300] for i in range(0, len(every), 300)]
    batches += [every[100:900], every[:50]]  # resends
    for batch in batches:
        store_gpu_samples(batch)

    minutes = {(m.node_id, m.gpu_index, m.minute): m for m in GpuMinute.objects.filter(run=run)}
    scratch = _scratch_minutes(run)
    assert set(minutes) == set(scratch)
    for key, agg in scratch.items():
        m = minutes[key]
        assert (m.samples, m.utilization_gpu_min, m.utilization_gpu_max) == (agg["n"], agg["lo"], agg["hi"])
        assert m.utilization_gpu_avg == pytest.approx(agg["avg"])

    hours = {(h.node_id, h.gpu_index, h.hour): h for h in GpuHour.objects.filter(run=run)}
    scratch_hours = _scratch_hours(run)
    assert set(hours) == set(scratch_hours) and len(hours) == 3 * 2
    for key, agg in scratch_hours.items():
        for name, value in agg.items():
            assert getattr(hours[key], name) == pytest.approx(value), name


def test_sm_tensor_and_pcie_roll_up_and_a_gpu_without_them_stays_null(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    hopper = [sample(run, node, 0, s, float(v)) for s, v in enumerate([10, 90, 50, 30] * 15)]
    # An A100 (no GPM) under MIG (no PCIe counters): NVML answers NotSupported, stored as None.
    older = [sample(run, node, 1, s, 40.0) for s in range(60)]
    for s in older:
        s.sm_active = s.tensor_active = s.pcie_tx_kbps = s.pcie_rx_kbps = s.nvlink_tx_kbps = s.nvlink_rx_kbps = None
    store_gpu_samples(hopper + older)
    minute = GpuMinute.objects.get(run=run, gpu_index=0)
    # A one-second burst survives in the max; the average is the minute's.
    assert (minute.sm_active_min, minute.sm_active_max) == pytest.approx((8.2, 73.8))
    assert minute.sm_active_avg == pytest.approx(45 * 0.82)
    assert (minute.pcie_rx_kbps_max, minute.pcie_tx_kbps_avg) == pytest.approx((810_000.0, 45 * 2_048.0))
    assert minute.tensor_active_max == pytest.approx(90 * 0.48)
    hour = GpuHour.objects.get(run=run, gpu_index=0)
    assert (hour.sm_active_avg, hour.pcie_rx_kbps_max) == pytest.approx((45 * 0.82, 810_000.0))
    # NVLink (GPM, KB/s): min / avg / max in both tiers.
    assert (minute.nvlink_tx_kbps_min, minute.nvlink_tx_kbps_max) == pytest.approx((10 * 1_843_200.0, 90 * 1_843_200.0))
    assert (hour.nvlink_rx_kbps_avg, hour.nvlink_tx_kbps_max) == pytest.approx((45 * 1_800_000.0, 90 * 1_843_200.0))
    for row in (GpuMinute.objects.get(run=run, gpu_index=1), GpuHour.objects.get(run=run, gpu_index=1)):
        assert row.utilization_gpu_avg == 40.0
        assert {row.sm_active_max, row.tensor_active_avg, row.pcie_tx_kbps_max, row.pcie_rx_kbps_min} == {None}
        assert {row.nvlink_tx_kbps_max, row.nvlink_rx_kbps_avg} == {None}
