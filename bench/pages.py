"""Benchmark: every page and the main API reads at 100,000 runs with a year of rollups for 1,000 GPUs.

    DATABASE_URL=postgres://... .venv/bin/python bench/pages.py [--runs 100000] [--gpus 1000]
        [--hour-days 365] [--minute-days 2] [--repeat 5] [--rebuild]

PostgreSQL only. Point DATABASE_URL at a throwaway database: it is migrated and filled once
(team "bench-pages"; `--rebuild` starts again), then every page is timed.

The workspace: `--gpus` GPUs in 8-GPU nodes ("lanes"), each lane running one run after another
for `--hour-days` days up to now, `--runs` runs in all (a third failed, the newest of each
lane still running); an hour rollup for every GPU-hour of that year and minute rollups for the
last `--minute-days` days (AIRBOARD_TELEMETRY_MINUTE_DAYS bounds them in production: 30 days of
1,000 GPUs is 43 million rows, more than this 2-core machine builds in a session). Rollups
are written with COPY, as the values the pages read; no raw samples. Then what the cost and
failures pages read (`enrich`, each part added once to a workspace that lacks it): the
shipped price book, a failure analysis for each failed run, and a year of cost rollups
written by the beat's own pass (`billing.costs.rollups.refresh_changed`, ~45 s).

Each page is fetched `--repeat` times through Django's full stack in process (a signed-in team
member, not staff) and printed with its median time and its query count, and whether it is
under the 300 ms target. A streamed download (the run list's CSV) is timed to its last byte,
and its first bytes are timed too. Two fixed reference figures (`machine_speed`) are printed
before the pages: page times from machines whose references differ do not compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
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
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection, reset_queries
from django.db.models import F
from django.test import Client

from runs.choices import AcceleratorType, RunStatus
from runs.models import Attempt, GpuHour, GpuMinute, Node, Run
from runs.telemetry import gpu_life, utilization

TARGET_MS = 300.0
GPUS_PER_NODE = 8
TEAM = "bench-pages"
OOM_MESSAGE = "CUDA out of memory"


def build(args: argparse.Namespace, now: datetime) -> Group:
    """The workspace described in the module docstring; returns its team."""
    team = Group.objects.create(name=TEAM)
    lanes = args.gpus // GPUS_PER_NODE
    per_lane = args.runs // lanes
    span = timedelta(days=args.hour_days)
    length = span / per_lane
    start = (now - span).replace(minute=0, second=0, microsecond=0)
    runs = []
    for lane in range(lanes):
        for k in range(per_lane):
            began = start + k * length
            newest = k == per_lane - 1
            status = RunStatus.RUNNING if newest else (RunStatus.FAILED if k % 3 == 0 else RunStatus.SUCCEEDED)
            runs.append(
                Run(
                    team=team, external_id=f"bench-{lane}-{k}", status=status, accelerator_type=AcceleratorType.H100_8,
                    num_accelerators=8, gpus_per_node=8, region="us-west-2", home_region="us-west-2",
                    experiment_name=f"/Workspace/Users/u{lane % 40}/exp-{k % 50}", creator=f"u{lane % 40}@example.com",
                    submitted_at=began, started_at=began, ended_at=None if newest else began + length,
                    state_message="" if status != RunStatus.FAILED else OOM_MESSAGE,
                )
            )  # fmt: skip
    # Inserted in the order they were submitted, as a live workspace writes them: the table's
    # order then follows submitted_at, which decides PostgreSQL's plans for the run list (lane
    # by lane, the order was unrelated to it: correlation 0.009). Read back lane by lane.
    runs.sort(key=lambda run: run.submitted_at)
    Run.objects.bulk_create(runs, batch_size=5000)
    runs = sorted(Run.objects.filter(team=team), key=lambda run: [int(part) for part in run.external_id.split("-")[1:]])
    attempts = Attempt.objects.bulk_create(
        [
            Attempt(
                run=r,
                number=1,
                status=r.status,
                started_at=r.started_at,
                ended_at=r.ended_at,
                state_message=r.state_message,
            )
            for r in runs
        ],
        batch_size=5000,
    )
    nodes = Node.objects.bulk_create(
        [Node(attempt=a, index=0, host=f"10.0.{i // 250}.{i % 250}", status=a.status) for i, a in enumerate(attempts)],
        batch_size=5000,
    )
    # A year of runs was last written when each one ended, not all at once now (bulk_create
    # stamps `updated_at`): the stored failed-run costs read that (billing.costs.failed).
    Run.objects.filter(team=team).exclude(ended_at=None).update(updated_at=F("ended_at"))
    print(f"  {len(runs):,} runs, attempts and nodes", flush=True)
    hours = int(span.total_seconds() // 3600)
    minutes_from = now.replace(second=0, microsecond=0) - timedelta(days=args.minute_days)
    with connection.cursor() as cursor:
        for model, step, first, count in (
            (GpuHour, timedelta(hours=1), start, hours),
            (GpuMinute, timedelta(minutes=1), minutes_from, args.minute_days * 1440),
        ):
            column = "hour" if model is GpuHour else "minute"
            table = model._meta.db_table
            fields = f"run_id, node_id, gpu_index, {column}, samples, memory_total_bytes, power_limit_watts, " + (
                "utilization_gpu_min, utilization_gpu_avg, utilization_gpu_max, memory_used_bytes_avg, "
                "power_watts_avg, temperature_c_avg, sm_clock_mhz_avg"
            )
            rows = 0
            with cursor.cursor.copy(f"COPY {table} ({fields}) FROM STDIN") as copy:
                for lane in range(lanes):
                    for i in range(count):
                        moment = first + i * step
                        k = min(int((moment - start) / length), per_lane - 1)
                        index = lane * per_lane + k
                        run, node = runs[index], nodes[index]
                        util = 20.0 if run.status == RunStatus.FAILED and i % 7 == 0 else 90.0 + (i % 9)
                        for gpu in range(GPUS_PER_NODE):
                            copy.write_row((
                                run.pk, node.pk, gpu, moment, 3600 if model is GpuHour else 60, 85_520_809_984,
                                700.0, util - 5, util, util + 1, 7.0e10, 650.0, 66.0, 1980.0,
                            ))  # fmt: skip
                            rows += 1
            print(f"  {rows:,} {table} rows", flush=True)
    # The minutes came by COPY, not through refresh_minutes: sum them into the runs' summaries,
    # and the hours into their GPUs' life sums (runs/telemetry/gpu_life.py).
    utilization.rebuild()
    gpu_life.rebuild()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return team


def enrich(team: Group, now: datetime) -> None:
    """What the failures and cost pages read, added to a workspace that lacks it (each part once).

    1. The shipped price book (`billing/data/default_prices.csv`), as `make run` loads it, so
       costs are priced rather than lower bounds of zero.
    2. A failure analysis for every failed run: the classifier's verdict (`classify_run`) on
       one of them, stored for each failed run with its own end as `failed_at`. Every failed
       run here has the same inputs (one attempt, one node, no logs, the state message "CUDA
       out of memory"), so the classifier would store the same verdict for each; running it
       100,000 / 3 times would only take minutes.
    3. A year of cost rollups, written by the beat's own pass (`billing.costs.rollups.refresh_changed`),
       which prices every run with the cost engine, and stores the failed runs' failed-attempt
       cost (`billing.costs.failed`) and the settled runs' cost figures (`billing.costs.figures`),
       each backfilled on a workspace rolled up before it existed.
    """
    from billing.costs import figures
    from billing.costs.failed import BACKFILL, backfill
    from billing.costs.rollups import refresh_changed
    from billing.models import AcceleratorPrice, CostDaily
    from billing.prices.pricebook import load_default_prices
    from runs.failures.classify_pass import classify_run
    from runs.models import FailureAnalysis

    if not AcceleratorPrice.objects.exists():
        load_default_prices()
        print("  loaded the default price book", flush=True)
    failed = Run.objects.filter(team=team, status=RunStatus.FAILED)
    runs_count = Run.objects.filter(team=team).count()
    if not FailureAnalysis.objects.filter(run__team=team).exists():
        began = time.perf_counter()
        # Workspaces built before the attempts carried the run's state message, as the Jobs API gives it.
        Attempt.objects.filter(run__in=failed, state_message="").update(state_message=OOM_MESSAGE)
        verdict = classify_run(failed.order_by("pk").first())
        fields = {
            f.attname: getattr(verdict, f.attname)
            for f in FailureAnalysis._meta.concrete_fields
            if f.attname not in ("id", "run_id", "failed_at")
        }
        FailureAnalysis.objects.bulk_create(
            [
                FailureAnalysis(**fields, run_id=pk, failed_at=ended)
                for pk, ended in failed.exclude(pk=verdict.run_id).values_list("pk", "ended_at")
            ],
            batch_size=5000,
        )
        count = FailureAnalysis.objects.filter(run__team=team).count()
        print(f"  {count:,} failure analyses ({verdict.class_id}) in {time.perf_counter() - began:.0f} s", flush=True)
    if not CostDaily.objects.filter(team=team).exists():
        began = time.perf_counter()
        result = refresh_changed(now)
        print(
            f"  cost rollups: {result.rows:,} rows over {result.days} days for {result.runs:,} runs "
            f"in {time.perf_counter() - began:.0f} s",
            flush=True,
        )
    if failed.filter(updated_at__gt=F("ended_at")).exists():
        # Built before `build` dated each run's last write to its end.
        failed.update(updated_at=F("ended_at"))
    # Figures missing or no longer usable (a workspace rolled up before the failed runs' costs were
    # stored, or before the line above): what the beat's next passes backfill.
    began = time.perf_counter()
    stored = 0
    # Bounded: a figure priced within SETTLE of its run's last write stays unusable.
    for _ in range(failed.count() // BACKFILL + 1):
        if not (batch := backfill(now)):
            break
        stored += batch
    if stored:
        print(f"  failed-attempt costs stored for {stored:,} runs in {time.perf_counter() - began:.0f} s", flush=True)
    # The settled runs' cost figures the run list's CSV reads (billing.costs.figures): what the
    # beat's passes store, and backfill on a workspace rolled up before they existed.
    began = time.perf_counter()
    stored = 0
    for _ in range(runs_count // figures.BACKFILL + 2):
        if not (batch := figures.backfill(now)):
            break
        stored += batch
    if stored:
        print(f"  cost figures stored for {stored:,} settled runs in {time.perf_counter() - began:.0f} s", flush=True)
    # What autovacuum leaves a settled database with: the build's updates had left as many dead
    # rows as live ones in runs_run (99,819 of 100,000), and no visibility map for index-only scans.
    # Quick once done (3 s on a vacuumed workspace).
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")


def machine_speed(repeat: int = 5) -> str:
    """This machine's speed in two fixed figures, so page times taken on different machines compare.

    The same pages on the same workspace took 2.5-3x longer on one 2-core machine than on another;
    these two references moved with them. PostgreSQL: format and sort 100,000 timestamps in one
    process. Python: a fixed loop.
    """
    sql = (
        "SELECT count(*) FROM (SELECT to_char(timestamptz '2026-01-01' + g * interval '1 second',"
        " 'YYYY-MM-DD\"T\"HH24:MI:SS') AS t FROM generate_series(1, 100000) g ORDER BY t DESC) s"
    )
    database, python = [], []
    with connection.cursor() as cursor:
        cursor.execute("SET max_parallel_workers_per_gather = 0")
        for _ in range(repeat):
            began = time.perf_counter()
            cursor.execute(sql)
            cursor.fetchone()
            database.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            sum(i * i % 7 for i in range(1_000_000))
            python.append((time.perf_counter() - began) * 1000)
        cursor.execute("RESET max_parallel_workers_per_gather")
    return (
        f"machine speed: PostgreSQL reference {statistics.median(database):.0f} ms,"
        f" Python reference {statistics.median(python):.0f} ms (median of {repeat}; lower is faster)"
    )


def time_page(client: Client, url: str, repeat: int) -> tuple[float, float | None, int, int]:
    """(median ms, median ms to the first chunk of a streamed download or None, queries, status)
    of `repeat` fetches, after one warm-up. A streamed download is timed to its last byte."""
    times, firsts = [], []
    queries = status = 0
    for i in range(repeat + 1):
        reset_queries()
        began = time.perf_counter()
        response = client.get(url)
        if hasattr(response, "streaming_content"):
            chunks = iter(response.streaming_content)
            next(chunks, b"")
            first = (time.perf_counter() - began) * 1000
            b"".join(chunks)
            if i:
                firsts.append(first)
        elapsed = (time.perf_counter() - began) * 1000
        if i:
            times.append(elapsed)
        queries, status = len(connection.queries), response.status_code
    return statistics.median(times), statistics.median(firsts) if firsts else None, queries, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hour-days", type=int, default=365)
    parser.add_argument("--minute-days", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--only", default="", help="time only the pages whose URL contains this")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench/pages.py needs DATABASE_URL=postgres://...")
    settings.DEBUG = True  # connection.queries counts the queries
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    team = Group.objects.filter(name=TEAM).first()
    if team is not None and args.rebuild:
        Run.objects.filter(team=team).delete()
        team.delete()
        team = None
    if team is None:
        began = time.perf_counter()
        print("building the workspace", flush=True)
        team = build(args, now)
        print(f"  built in {time.perf_counter() - began:.0f} s", flush=True)
    enrich(team, now)
    user, _ = User.objects.get_or_create(username="bench-pages")
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    runs = Run.objects.filter(team=team)
    newest = runs.filter(status=RunStatus.RUNNING).order_by("-pk").first()
    oldest = runs.order_by("pk").first()
    failed = runs.filter(status=RunStatus.FAILED).order_by("-pk").first()
    pages = [
        "/", "/runs/", "/runs/?status=failed", "/runs/?format=csv", f"/runs/{newest.pk}/", f"/runs/{oldest.pk}/",
        f"/runs/{failed.pk}/failure/", f"/runs/{newest.pk}/telemetry.json", "/runs/fleet/", "/runs/advice/",
        "/runs/failures/", "/runs/postmortems/", "/runs/clusters/", "/costs/", "/api/v1/runs",
        f"/api/v1/runs/{newest.external_id}?source={newest.source}",
        f"/api/v1/runs/{newest.external_id}/telemetry?source={newest.source}&field=utilization_gpu&field=power_watts",
    ]  # fmt: skip
    print(f"{runs.count():,} runs, {GpuHour.objects.count():,} hour and {GpuMinute.objects.count():,} minute rollups")
    print(f"load average {os.getloadavg()}")
    print(machine_speed())
    pages = [url for url in pages if args.only in url]
    met = 0
    for url in pages:
        median, first, queries, status = time_page(client, url, args.repeat)
        ok = status == 200 and median <= TARGET_MS
        met += ok
        streamed = f"  (first bytes after {first:.1f} ms)" if first is not None else ""
        print(
            f"{median:9.1f} ms {queries:4d} queries  {status}  {'met' if ok else 'NOT MET':7s}  {url}{streamed}",
            flush=True,
        )
    print(f"\n{met}/{len(pages)} under {TARGET_MS:.0f} ms (median of {args.repeat}); load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
