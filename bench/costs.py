"""Benchmark: month-to-date spend by team from the daily rollups, at 1,000 and N runs.

    .venv/bin/python bench/costs.py [--runs N] [--repeat R] [--vacuum] [--backend both|sqlite|postgresql]

With `--backend both` (the default) it runs itself once per backend and prints both, with the
PostgreSQL/SQLite ratios: SQLite under a temporary AIRBOARD_VAR_DIR, PostgreSQL at
BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/airboard_bench_costs), which
is dropped and created anew: point it at a throwaway database.

Each backend: builds runs with attempts (bulk_create), rolls them up with `recompute_days`,
then times what the cost page's month-to-date card and by-team table read
(`reports.month_to_date` + `reports.grouped` over `reports.rows_for`, median of R) and counts
their queries, right after the rollup rewrote every day (no vacuum: the state just after a
rollup pass in service; `--vacuum` runs VACUUM ANALYZE first, as autovacuum would later).
The query count must not grow with the number of runs; the target is under 100 ms on
PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/airboard_bench_costs"
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
TEAMS = 20


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--vacuum", action="store_true", help="VACUUM ANALYZE the rollups before timing")
    parser.add_argument("--backend", choices=["both", "sqlite", "postgresql"], default="both")
    return parser.parse_args()


def _fresh_database(url: str) -> None:
    """Drop and create the scratch database, so the 1,000-run figure is taken at 1,000 runs."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def run_both(args: argparse.Namespace) -> None:
    """Run this script once per backend in a child process; print their lines, then the ratios."""
    figures: dict[str, str] = {}
    for backend in ("sqlite", "postgresql"):
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AIRBOARD_VAR_DIR")}
        if backend == "postgresql":
            env["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", DEFAULT_POSTGRES)
            _fresh_database(env["DATABASE_URL"])
        argv = [sys.executable, __file__, "--backend", backend, "--runs", str(args.runs), "--repeat", str(args.repeat)]
        done = subprocess.run(argv + (["--vacuum"] if args.vacuum else []), env=env, capture_output=True, text=True)
        sys.stdout.write(done.stdout)
        if done.returncode:
            sys.stderr.write(done.stderr)
            sys.exit(done.returncode)
        figures[backend] = next(line for line in done.stdout.splitlines() if line.startswith("FIGURE "))
    sqlite, postgres = (float(figures[b].split()[2]) for b in ("sqlite", "postgresql"))
    print(f"at {args.runs} runs: PostgreSQL {postgres:.2f} ms, SQLite {sqlite:.2f} ms, "
          f"PostgreSQL/SQLite x{postgres / sqlite:.2f}; target < 100 ms on PostgreSQL: "
          f"{'met' if postgres < 100 else 'NOT met'}")  # fmt: skip


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.backend == "both":
    run_both(ARGS)
    sys.exit(0)

sys.path.insert(0, str(ROOT))
if not os.environ.get("DATABASE_URL"):
    os.environ["AIRBOARD_VAR_DIR"] = tempfile.mkdtemp(prefix="airboard-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django

django.setup()

from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.choices import GroupBy
from billing.costs import reports, rollups
from billing.models import AcceleratorPrice, CostDaily, CostDailyTeam
from runs.choices import AcceleratorType, Region, RunStatus
from runs.models import Attempt, Run


def build(total: int) -> None:
    """Bring the scratch database to `total` runs (each with 1-2 attempts) spread over 60 days."""
    teams = [Group.objects.get_or_create(name=f"bench-team-{i}")[0] for i in range(TEAMS)]
    for accelerator_type in AcceleratorType.values:
        for region in Region.values:
            AcceleratorPrice.objects.get_or_create(
                accelerator_type=accelerator_type, region=region, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
                defaults={"usd_per_hour": "6.88"},
            )  # fmt: skip
    have = Run.objects.filter(external_id__startswith="bench-").count()
    types, regions = AcceleratorType.values, Region.values
    for start in range(have, total, 5000):
        batch = range(start, min(start + 5000, total))
        runs = Run.objects.bulk_create([
            Run(
                external_id=f"bench-{n}", team=teams[n % TEAMS], creator=f"user{n % 97}@example.com",
                experiment_name=f"/Workspace/exp-{n % 300}", accelerator_type=types[n % len(types)],
                region=regions[n % len(regions)], num_accelerators=8, gpus_per_node=8, status=RunStatus.SUCCEEDED,
                submitted_at=NOW - timedelta(minutes=n % 86_400),
            )
            for n in batch
        ])  # fmt: skip
        if connection.vendor != "postgresql":  # only PostgreSQL returns ids from bulk_create
            runs = list(Run.objects.filter(external_id__in=[r.external_id for r in runs]))
        attempts = []
        for run in runs:
            n = int(run.external_id.removeprefix("bench-"))
            started = NOW - timedelta(minutes=(n * 37) % (60 * 24 * 60))
            attempts.append(
                Attempt(run=run, number=1, started_at=started, ended_at=started + timedelta(minutes=30 + n % 300))
            )
            if n % 5 == 0:
                retry = started + timedelta(hours=6)
                attempts.append(Attempt(run=run, number=2, started_at=retry, ended_at=retry + timedelta(minutes=45)))
        Attempt.objects.bulk_create(attempts)


def measure(repeat: int) -> tuple[float, int]:
    team_ids = list(Group.objects.filter(name__startswith="bench-team-").values_list("pk", flat=True))
    timings = []
    queries = 0
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as ctx:
            began = time.perf_counter()
            first = reports.month_to_date(team_ids, NOW).month
            filters = reports.CostFilters(first, NOW.date())
            reports.grouped(reports.rows_for(team_ids, filters, GroupBy.TEAM), GroupBy.TEAM)
            timings.append((time.perf_counter() - began) * 1000)
        queries = len(ctx.captured_queries)
    return statistics.median(timings), queries


def main(args: argparse.Namespace) -> None:
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    if Run.objects.filter(external_id__startswith="bench-").count() > min(1_000, args.runs):
        print("warning: the database already holds more bench runs than the first size; its figure is not at 1,000")
    results = {}
    for total in sorted({min(1_000, args.runs), args.runs}):
        began = time.perf_counter()
        build(total)
        built = time.perf_counter() - began
        began = time.perf_counter()
        days = rollups.touched_days(
            Run.objects.filter(external_id__startswith="bench-").values_list("pk", flat=True), NOW
        )
        rows = rollups.recompute_days(days, now=NOW)
        rolled = time.perf_counter() - began
        if args.vacuum and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE billing_costdaily")
                cursor.execute("VACUUM ANALYZE billing_costdailyteam")
        median_ms, queries = measure(args.repeat)
        results[total] = (median_ms, queries)
        print(
            f"{total:>7} runs: build {built:6.1f} s, rollup {rolled:6.1f} s ({len(days)} days, {rows} rows, "
            f"{CostDaily.objects.count()} CostDaily, {CostDailyTeam.objects.count()} CostDailyTeam), "
            f"month-to-date by team: median {median_ms:7.2f} ms over {args.repeat}, {queries} queries"
        )
    if len(results) == 2:
        (small_ms, small_q), (big_ms, big_q) = (results[k] for k in sorted(results))
        print(
            f"ratio {max(results)}/{min(results)} runs: latency x{big_ms / small_ms:.2f}, queries {small_q} -> {big_q}"
        )
    # For the parent (`--backend both`): the figure at the largest size.
    print(f"FIGURE {connection.vendor} {results[max(results)][0]:.3f} ms at {max(results)} runs")


if __name__ == "__main__":
    main(ARGS)
