"""Benchmark: bytes per GPU sample in every telemetry tier, the row layout beside the compacted one.

    DATABASE_URL=postgres://... .venv/bin/python bench/storage.py [--samples 10000000] [--quick]
    AIRBOARD_VAR_DIR=/tmp/bench-sqlite .venv/bin/python bench/storage.py --quick      # SQLite

Point DATABASE_URL (or AIRBOARD_VAR_DIR) at a throwaway database: it is migrated and filled.
`--quick` is `--samples 1000000`.

1. Runs of one 8-GPU node, sampled at 1 Hz for 6 hours each, two days ago, with the shapes of
   runs/demo_series (training, eval, checkpoint dips, stalls), at NVML's resolution: integer
   percent utilisation, power in milliwatts, GPM SM/tensor activity and NVLink TX/RX (MiB/s,
   posted as KB/s) as full doubles, PCIe in KB/s, and the agent's process list on every sample:
   every column of today's row (runs/ingest.SAMPLE_COLUMNS, NVLink included).
2. Every batch of 10,000 goes through the real path behind the API: `ingest.record_batch`
   (the IngestBatch row with its JSON rows, as the web process writes it), then
   `ingest_process.process_batch` (the worker: store_sample_rows, the minute and hour rollups, and the
   batch's rows dropped).
3. Old layout: the size of the row table (runs_gpusample, all partitions, indexes and TOAST)
   holding every sample, per sample.
4. `blocks.compact_samples` folds them all, as the beat does minute by minute; new layout: the
   size of runs_gpusampleblock, per sample. Rows left hot: none.
5. The minute and hour tiers, per row and per sample; the batch table, per sample, with rows
   kept (before this change) and dropped (now).
Prints each figure, and whether the raw-tier target (at most 40 bytes a sample) is met.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django

django.setup()

from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection

from dashboard.demo.series import PROFILES, Activity, raw_samples
from runs import ingest, ingest_process
from runs.choices import AcceleratorType, BatchKind, RunStatus
from runs.models import Attempt, GpuHour, GpuMinute, GpuSample, GpuSampleBlock, IngestBatch, Node, Run
from runs.telemetry import blocks, partitions

TARGET = 40.0  # bytes per raw sample, indexes included (issue 21)
STRETCH = 30.0
GPUS = 8
RUN_SECONDS = 6 * 3600
BATCH = 10_000


def table_bytes(model: type) -> int:
    """Bytes on disk of a model's table with its indexes (and TOAST, partitions) on this backend."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.oid = %s::regclass "
                "OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass)",
                [table, table],
            )
        else:
            cursor.execute(
                "SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_master m ON m.name = d.name "
                "WHERE m.tbl_name = %s",
                [table],
            )
        return int(cursor.fetchone()[0])


def batch_row_bytes() -> int:
    """Logical bytes of the IngestBatch rows (every column), as the database stores them."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM runs_ingestbatch b")
        else:
            cursor.execute("SELECT coalesce(sum(length(rows) + 120), 0) FROM runs_ingestbatch")
        return int(cursor.fetchone()[0])


def vacuum(model: type) -> None:
    """Refresh the planner's view and reclaim dead space accounting (not the file: that is VACUUM FULL)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")


def nvlink(kbps: float | None, rng: random.Random) -> float | None:
    """An NVLink rate as the agent posts it: GPM's MiB/s (a full double) times 1024, to whole KB/s.

    No traffic is exactly 0.0 (no bytes moved between the two GPM samples).
    """
    if not kbps:
        return kbps
    return float(round((kbps / 1024 + rng.random()) * 1024))


def sample_rows(run: Run, node: Node, start: datetime, seconds: int, rng: random.Random) -> list[list]:
    """One run's 1 Hz rows in the API's SAMPLE_COLUMNS order, at NVML's resolution (see the docstring)."""
    profile = PROFILES[AcceleratorType.H100_8]
    activity = Activity.make(rng, start, start + timedelta(seconds=seconds), None)
    rows: list[list] = []
    pid = rng.randrange(1000, 60000)
    for gpu, ts, fields in raw_samples(rng, profile, activity, start, GPUS):
        util = fields["utilization_gpu"]
        sm = fields["sm_active"]
        rows.append([
            run.pk, node.pk, gpu, ts.isoformat(), float(round(util)), float(round(fields["utilization_memory"])),
            fields["memory_used_bytes"], fields["memory_total_bytes"],
            round(fields["power_watts"] + rng.uniform(-0.05, 0.05), 3), fields["power_limit_watts"],
            float(round(fields["temperature_c"])), fields["sm_clock_mhz"], fields["mem_clock_mhz"],
            sm + rng.random() / 10 if sm is not None else None,
            fields["tensor_active"] + rng.random() / 10 if fields["tensor_active"] is not None else None,
            fields["throttle_reasons"], 0, 0,
            float(rng.randrange(100_000, 2_000_000) if util > 50 else rng.randrange(0, 5_000)),
            float(rng.randrange(100_000, 2_000_000) if util > 50 else rng.randrange(0, 5_000)),
            [{"pid": pid + gpu, "used_memory_bytes": fields["memory_used_bytes"], "run": run.external_id}],
            nvlink(fields.get("nvlink_tx_kbps"), rng), nvlink(fields.get("nvlink_rx_kbps"), rng),
        ])  # fmt: skip
    assert not rows or len(rows[0]) == len(ingest.SAMPLE_COLUMNS), "a row is every column of today's layout"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true", help="1,000,000 samples")
    args = parser.parse_args()
    total = 1_000_000 if args.quick else args.samples
    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    start = (now - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    for table in partitions.ALL_TABLES:
        partitions.ensure_partitions(now=now, table=table)
    team, _ = Group.objects.get_or_create(name="bench-storage")
    for model in (GpuSample, GpuSampleBlock, GpuMinute, GpuHour, IngestBatch):
        model.objects.all().delete()
    for model in (GpuSample, GpuSampleBlock, GpuMinute, GpuHour, IngestBatch):
        vacuum(model)
    base = {model: table_bytes(model) for model in (GpuSample, GpuSampleBlock, GpuMinute, GpuHour, IngestBatch)}
    print(f"backend {connection.vendor}; {total:,} samples; load average {os.getloadavg()}")
    print(f"row layout: {len(ingest.SAMPLE_COLUMNS)} columns ({', '.join(ingest.SAMPLE_COLUMNS[4:])})")

    rng = random.Random(21)
    runs = math.ceil(total / (GPUS * RUN_SECONDS))
    stored = 0
    batch_bytes_kept = 0
    ingest_s = 0.0
    for i in range(runs):
        seconds = min(RUN_SECONDS, (total - stored) // GPUS)
        if seconds <= 0:
            break
        run = Run.objects.create(team=team, external_id=f"bench-storage-{time.time_ns()}", status=RunStatus.SUCCEEDED)
        node = Node.objects.create(attempt=Attempt.objects.create(run=run, number=1), index=0)
        rows = sample_rows(run, node, start + timedelta(seconds=i * 7), seconds, rng)
        began = time.perf_counter()
        for at in range(0, len(rows), BATCH):
            batch, _ = ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows[at : at + BATCH], "nvml")
            if at == 0 and i == 0:
                batch_bytes_kept = batch_row_bytes()  # one batch with its rows, as kept before
            ingest_process.process_batch(batch.pk)
        ingest_s += time.perf_counter() - began
        stored += len(rows)
        print(f"  run {i + 1}/{runs}: {stored:,} samples, {stored / ingest_s:,.0f} samples/s", flush=True)
    batches = IngestBatch.objects.count()
    batch_bytes_dropped = batch_row_bytes()

    for model in (GpuSample, GpuMinute, GpuHour):
        vacuum(model)
    old = table_bytes(GpuSample) - base[GpuSample]
    rows_hot = GpuSample.objects.count()
    began = time.perf_counter()
    folded = 0
    while True:
        result = blocks.compact_samples(now=now, max_minutes=10_000)
        folded += result.samples
        if not result.minutes:
            break
    compact_s = time.perf_counter() - began
    vacuum(GpuSampleBlock)
    new = table_bytes(GpuSampleBlock) - base[GpuSampleBlock]
    block_count = GpuSampleBlock.objects.count()
    minutes, hours = GpuMinute.objects.count(), GpuHour.objects.count()
    minute_bytes = table_bytes(GpuMinute) - base[GpuMinute]
    hour_bytes = table_bytes(GpuHour) - base[GpuHour]

    per_old, per_new = old / rows_hot, new / stored
    rate = stored / ingest_s
    print(f"\ningest (record_batch + process_batch): {stored:,} samples in {ingest_s:.1f} s = {rate:,.0f}/s")
    print(f"compaction: {folded:,} samples in {compact_s:.1f} s = {folded / compact_s:,.0f}/s; rows left hot: "
          f"{GpuSample.objects.count():,}")  # fmt: skip
    print(f"raw, old layout (one row a sample): {old / 1e6:,.1f} MB for {rows_hot:,} rows = {per_old:.1f} B/sample")
    print(f"raw, new layout (one block a node-minute): {new / 1e6:,.1f} MB in {block_count:,} blocks = "
          f"{per_new:.1f} B/sample ({new / block_count:,.0f} B/block; {per_old / per_new:.1f}x smaller)")  # fmt: skip
    print(f"minute tier: {minutes:,} rows, {minute_bytes / minutes:.0f} B/row = {minute_bytes / stored:.2f} B/sample")
    print(f"hour tier: {hours:,} rows, {hour_bytes / hours:.0f} B/row = {hour_bytes / stored:.2f} B/sample")
    print(f"batch table: rows kept {batch_bytes_kept / BATCH:.1f} B/sample (before); rows dropped "
          f"{batch_bytes_dropped / stored:.3f} B/sample ({batches:,} batches, {batch_bytes_dropped:,} B)")  # fmt: skip
    verdict = "MET" if per_new <= TARGET else "NOT MET"
    print(f"\ntarget: raw tier <= {TARGET:.0f} B/sample incl. indexes: {verdict} ({per_new:.1f}); "
          f"{per_new - STRETCH:+.1f} B from {STRETCH:.0f}")  # fmt: skip
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
