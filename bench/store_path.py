"""The worker's store path alone: CPU per 10,000-sample batch, Python and PostgreSQL apart.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/<a bench database> \\
        .venv/bin/python bench/store_path.py [--batches 12] [--profile]

Records `--batches` batches of one 8-GPU run's samples (1 Hz, an hour back, so every minute
is old enough to be checked for compacted blocks, as a backfill's are) the way the HTTP API
records them, then runs `runs.ingest_process.process_batch` on each in this process and prints, per
batch, the wall time, this process's CPU time and, when the database runs on this machine,
its backend's CPU time (from /proc): CPU times stand still when a shared machine is busy,
where wall times do not. `--profile` adds the statements' times and a cProfile of the batches.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 10_000
GPUS = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--profile", action="store_true", help="statement times and a cProfile of the batches")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connection

    from runs import ingest, ingest_process
    from runs.choices import AcceleratorType, BatchKind, RunSource, RunStatus
    from runs.models import Attempt, Node, Run

    call_command("migrate", verbosity=0)
    team, _ = Group.objects.get_or_create(name="bench-store")
    run = Run.objects.create(team=team, source=RunSource.LOCAL, external_id=f"store-{time.time_ns()}",
                             accelerator_type=AcceleratorType.H100_8, num_accelerators=8, gpus_per_node=8,
                             status=RunStatus.RUNNING, started_at=datetime.now(UTC))  # fmt: skip
    node = Node.objects.create(attempt=Attempt.objects.create(run=run, number=1, status=run.status), index=0)
    start = datetime.now(UTC) - timedelta(seconds=args.batches * BATCH // GPUS + 3600)
    columns = ingest.SAMPLE_VALUE_COLUMNS
    batch_ids = []
    for b in range(args.batches):
        rows = []
        for n in range(b * BATCH, (b + 1) * BATCH):
            second, gpu = divmod(n, GPUS)
            values = {"utilization_gpu": (n * 7) % 100, "memory_used_bytes": 40_000_000_000 + n % 1000,
                      "memory_total_bytes": 80_000_000_000, "power_watts": 600.0, "temperature_c": 70.0}  # fmt: skip
            ts = (start + timedelta(seconds=second)).isoformat()
            rows.append([run.pk, node.pk, gpu, ts, *(values.get(c) for c in columns)])
        batch_ids.append(ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows, "nvml")[0].pk)

    backend = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            stat = Path(f"/proc/{cursor.fetchone()[0]}/stat")
            backend = stat if stat.exists() else None

    def backend_cpu() -> float:
        if backend is None:
            return float("nan")
        fields = backend.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])

    def timed(execute, sql, params, many, context):
        wall, cpu = time.perf_counter(), backend_cpu()
        try:
            return execute(sql, params, many, context)
        finally:
            entry = spent[" ".join(sql.split())[:100]]
            entry[0] += time.perf_counter() - wall
            entry[1] += backend_cpu() - cpu
            entry[2] += 1

    profiler = cProfile.Profile()
    walls, pythons, databases = [], [], []
    with connection.execute_wrapper(timed) if args.profile else contextlib.nullcontext():
        for batch_id in batch_ids:
            wall, cpu, db = time.perf_counter(), time.process_time(), backend_cpu()
            if args.profile:
                profiler.enable()
            result = ingest_process.process_batch(batch_id)
            if args.profile:
                profiler.disable()
            walls.append(time.perf_counter() - wall)
            pythons.append(time.process_time() - cpu)
            databases.append(backend_cpu() - db)
            print(f"batch {batch_id}: {walls[-1] * 1000:.0f} ms, Python {pythons[-1] * 1000:.0f} ms, "
                  f"database {databases[-1] * 1000:.0f} ms CPU; {result}")  # fmt: skip
    median = statistics.median
    print(f"median of {len(walls)} batches of {BATCH:,}: wall {median(walls) * 1000:.0f} ms, Python CPU "
          f"{median(pythons) * 1000:.0f} ms, database backend CPU {median(databases) * 1000:.0f} ms "
          f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
    if args.profile:
        for sql, (wall, cpu, count) in sorted(spent.items(), key=lambda item: -item[1][0])[:15]:
            n = len(batch_ids)
            print(f"{wall / n * 1000:7.1f} ms wall {cpu / n * 1000:6.1f} ms database x{count / n:.1f}  {sql}")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
