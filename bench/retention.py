"""Benchmark: raw-sample retention of D whole days, dropped as partitions vs deleted in batches.

    DATABASE_URL=postgres://... .venv/bin/python bench/retention.py [--days D] [--rows-per-day N]

PostgreSQL only (SQLite has no partitions). Point DATABASE_URL at a throwaway database: it is
migrated there. Works at dates long after today, where only the DEFAULT partition exists.

1. Partitioned: create the D daily partitions, fill each with N samples (8 GPUs, one
   `generate_series` INSERT), then time `prune_raw_samples` at a cutoff past them all: it
   detaches and drops D partitions.
2. Batched: fill the same D days again without making partitions for them, so the rows land
   in DEFAULT, and time `prune_raw_samples` again: nothing to drop, every row goes by the
   10,000-row batched delete (what retention did before partitioning, and still does on SQLite).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django

django.setup()

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection

from runs.choices import RunStatus
from runs.models import Attempt, Node, Run
from runs.telemetry import partitions
from runs.telemetry.retention import prune_raw_samples

START = datetime(2032, 3, 1, tzinfo=UTC)
GPUS = 8


def fill(node: Node, days: int, rows_per_day: int) -> None:
    """N samples a day over `days` days from START: GPUS GPUs sampled every 8 x 86,400 / N s."""
    step = GPUS * 86_400 / rows_per_day
    with connection.cursor() as cursor:
        for day in range(days):
            cursor.execute(
                f"INSERT INTO {partitions.TABLE} (run_id, node_id, gpu_index, ts, source, utilization_gpu) "  # noqa: S608
                "SELECT %s, %s, g, %s + s * make_interval(secs => %s), 'api', 50 "
                "FROM generate_series(0, %s) s, generate_series(0, %s) g",
                [node.attempt.run_id, node.pk, START + timedelta(days=day), step, rows_per_day // GPUS - 1, GPUS - 1],
            )
        cursor.execute(f"ANALYZE {partitions.TABLE}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--rows-per-day", type=int, default=300_000)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench/retention.py needs DATABASE_URL=postgres://... (SQLite has no partitions)")
    call_command("migrate", verbosity=0)
    team, _ = Group.objects.get_or_create(name="bench-retention")
    run = Run.objects.create(team=team, external_id=f"bench-retention-{time.time_ns()}", status=RunStatus.SUCCEEDED)
    node = Node.objects.create(attempt=Attempt.objects.create(run=run, number=1), index=0)
    # The cutoff falls just after the last benchmark day, whatever the retention setting.
    now = START + timedelta(days=args.days + settings.AIRBOARD_TELEMETRY_RAW_DAYS)
    total = args.days * (args.rows_per_day // GPUS) * GPUS

    made = partitions.ensure_partitions(now=START + timedelta(days=args.days - 1), days_ahead=0)
    fill(node, args.days, args.rows_per_day)
    began = time.perf_counter()
    dropped = prune_raw_samples(now=now)
    partitioned = time.perf_counter() - began
    ours = [name for name in dropped.partitions_dropped if name in made]
    # `ours` also counts the empty partitions ensure_partitions made for the earlier window days.
    print(f"partitioned: {total:,} rows over {args.days} days, {len(ours)} partitions dropped in {partitioned:.3f} s")

    fill(node, args.days, args.rows_per_day)  # no partitions for these days now: all in DEFAULT
    began = time.perf_counter()
    deleted = prune_raw_samples(now=now)
    batched = time.perf_counter() - began
    print(f"batched:     {deleted.deleted:,} rows deleted in {deleted.batches} batches in {batched:.3f} s")
    print(f"ratio:       {batched / partitioned:.0f}x")
    run.delete()


if __name__ == "__main__":
    main()
