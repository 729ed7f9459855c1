"""Benchmark: the runs table and the run page of ended 64-GPU runs, 13 days of hour rollups each.

    DATABASE_URL=postgres://... .venv/bin/python bench/ended_runs.py [--runs 25] [--repeat 7] [--rebuild]

PostgreSQL only. Needs bench/run_page.py's workspace in the same database (its 64-GPU run's
hour rollups are the ones copied). The post-mortem path: an engineer opens the runs table of a
team whose big runs have ended, then one of them. Both pages ask each GPU's whole life
(the ended run's under-use flag: each GPU's mean over its hours; the frame: signals, nodes
reporting, node means), which read every GpuHour row of the runs: GPUs x hours, growing every
hour a run lives.

Built once (team "bench-ended-runs"; `--rebuild` starts again): `--runs` ended runs of 8 nodes x
8 GPUs, each given a copy of the 64-GPU run's hour rollups (INSERT ... SELECT, ~20,000 rows a
run) and, as for any hours written outside the ingest path, their GPUs' life sums
(`gpu_life.rebuild`). Then, as a member of that team only, the median of `--repeat` GETs after
one warm-up: the runs table (`/runs/`, every run on one page) and one run's page frame
(`/runs/<id>/?range=all`), server time through Django's full stack in process, bytes and
queries. Run it from the tree being measured (cwd = that tree) to compare two commits on one
database.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django

django.setup()

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from bench.run_page import timed
from runs.choices import AcceleratorType, RunStatus
from runs.models import Attempt, GpuHour, Node, Run

TEAM = "bench-ended-runs"
SOURCE_TEAM = "bench-run-page"
TARGET_MS = 300.0


def build(runs: int) -> Group:
    from runs.telemetry import gpu_life

    source = Run.objects.get(team__name=SOURCE_TEAM, external_id="bench-64")
    source_nodes = list(Node.objects.filter(attempt__run=source).order_by("index"))
    first, last = source.started_at, source.started_at + timedelta(days=13)
    team = Group.objects.create(name=TEAM)
    table = connection.ops.quote_name(GpuHour._meta.db_table)
    columns = [f.column for f in GpuHour._meta.concrete_fields if f.column not in ("id", "run_id", "node_id")]
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    made = []
    for i in range(runs):
        run = Run.objects.create(
            team=team, external_id=f"ended-{i}", status=RunStatus.SUCCEEDED, accelerator_type=AcceleratorType.H100_8,
            num_accelerators=64, gpus_per_node=8, region="us-west-2", home_region="us-west-2",
            experiment_name="/Workspace/Users/bench/llama-pretrain", creator="bench@example.com",
            submitted_at=first, started_at=first, ended_at=last,
        )  # fmt: skip
        attempt = Attempt.objects.create(run=run, number=1, status=RunStatus.SUCCEEDED, started_at=first, ended_at=last)
        for node in source_nodes:
            copy = Node.objects.create(attempt=attempt, index=node.index, host=f"10.2.{i}.{node.index}")
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {table} (run_id, node_id, {names}) SELECT %s, %s, {names} FROM {table} "  # noqa: S608
                    "WHERE run_id = %s AND node_id = %s",
                    [run.pk, copy.pk, source.pk, node.pk],
                )
        made.append(run.pk)
    gpu_life.rebuild(made)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return team


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench/ended_runs.py needs DATABASE_URL=postgres://...")
    settings.DEBUG = True
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    settings.AIRBOARD_RUNS_PER_PAGE = max(settings.AIRBOARD_RUNS_PER_PAGE, args.runs)
    team = Group.objects.filter(name=TEAM).first()
    if team is not None and args.rebuild:
        Run.objects.filter(team=team).delete()
        team.delete()
        team = None
    if team is None:
        began = time.perf_counter()
        team = build(args.runs)
        print(f"built {args.runs} ended 64-GPU runs in {time.perf_counter() - began:.0f} s", flush=True)
    user, _ = User.objects.get_or_create(username="bench-ended-runs")
    user.groups.set([team])
    client = Client()
    client.force_login(user)
    runs = Run.objects.filter(team=team)
    hours = GpuHour.objects.filter(run__in=runs).count()
    print(f"{runs.count()} ended runs of 64 GPUs, {hours:,} hour rollups; tree {ROOT}; load {os.getloadavg()}")
    one = runs.order_by("pk").first()
    assert one is not None
    for label, url in (("runs table", "/runs/"), ("one ended run's page frame", f"/runs/{one.pk}/?range=all")):
        ms, size, queries = timed(client, url, args.repeat)
        verdict = "met" if ms <= TARGET_MS else "NOT met"
        print(f"  {label:28s} {ms:7.1f} ms {size / 1000:7.1f} KB {queries:3d} queries  target <= 300 ms {verdict}")


if __name__ == "__main__":
    main()
