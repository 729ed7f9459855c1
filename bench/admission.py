"""Benchmark: latency of `POST /api/v1/admission` (p50, p95) through Django's test client.

    .venv/bin/python bench/admission.py [--requests N] [--runs R]

Scratch database: DATABASE_URL if set (a throwaway PostgreSQL database: tables are created
there), otherwise SQLite under a temporary AIRBOARD_VAR_DIR. Builds one policy covering a
team, R finished runs rolled up into CostDaily and a few running ones (their accrual is priced
per request), then posts the same workload N times with a read key and reports the latency
and the query count of one request. Target: p95 under 10 ms on PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if not os.environ.get("DATABASE_URL"):
    os.environ["AIRBOARD_VAR_DIR"] = tempfile.mkdtemp(prefix="airboard-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
# Writes are rate limited per key; the benchmark is not measuring the limiter's 429s.
os.environ.setdefault("AIRBOARD_INGEST_RATE_PER_MINUTE", "1000000")

import django

django.setup()

from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection
from django.test import Client

from billing.costs import rollups
from billing.models import AcceleratorPrice, UsagePolicy
from dashboard.models import ApiKey, ApiKeyRole
from runs.choices import RunStatus
from runs.launch.admission import admit_yaml
from runs.models import Attempt, Run

NOW = datetime.now(UTC)
WORKLOAD = """\
experiment_name: bench
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 8
command: python train.py
timeout_minutes: 60
usage_policy_name: bench-policy
"""


def build(runs: int) -> Group:
    """One team, one policy, `runs` finished runs this month (rolled up) and 5 running ones."""
    team, _ = Group.objects.get_or_create(name="bench-team")
    AcceleratorPrice.objects.get_or_create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2020, 1, 1, tzinfo=UTC),
        defaults={"usd_per_hour": Decimal("10")},
    )  # fmt: skip
    policy, _ = UsagePolicy.objects.get_or_create(
        name="bench-policy", defaults={"budget_usd": Decimal("1000000"), "max_num_accelerators": 64}
    )
    policy.teams.add(team)
    if Run.objects.filter(team=team).exists():
        return team
    start = NOW.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    new = []
    for i in range(runs + 5):
        running = i >= runs
        began = start + timedelta(minutes=i % (60 * 24 * max(NOW.day - 1, 1)))
        new.append(Run(team=team, external_id=f"bench-{i}", usage_policy_name="bench-policy",
                       accelerator_type="GPU_8xH100", num_accelerators=8, gpus_per_node=8, region="us-west-2",
                       home_region="us-west-2", status=RunStatus.RUNNING if running else RunStatus.SUCCEEDED,
                       started_at=began, ended_at=None if running else began + timedelta(hours=1)))  # fmt: skip
    Run.objects.bulk_create(new, batch_size=1000)
    Attempt.objects.bulk_create(
        [Attempt(run=r, number=1, status=r.status, started_at=r.started_at, ended_at=r.ended_at) for r in
         Run.objects.filter(team=team)], batch_size=1000,
    )  # fmt: skip
    rollups.refresh_changed(now=NOW)
    return team


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    team = build(args.runs)
    raw = ApiKey.issue(team, ApiKeyRole.READ, name="bench")[1]
    client = Client(headers={"authorization": f"Bearer {raw}"})
    body = json.dumps({"workload_yaml": WORKLOAD, "team": "bench-team", "region": "us-west-2"})

    def once() -> dict:
        response = client.post("/api/v1/admission", body, content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    for _ in range(10):
        once()
    answer = once()
    # The test client resets connection.queries per request: count the domain call's queries.
    queries: list[str] = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        admit_yaml(WORKLOAD, team, region="us-west-2")
    timings = []
    for _ in range(args.requests):
        began = time.perf_counter()
        once()
        timings.append((time.perf_counter() - began) * 1000)
    timings.sort()
    p95 = timings[int(len(timings) * 0.95) - 1]
    print(f"database: {connection.vendor}; runs: {args.runs} (+5 running); requests: {args.requests}")
    print(f"decision: {answer['decision']}; remaining ${answer['remaining_budget_usd']}")
    print(f"queries per admission (auth aside): {len(queries)}")
    print(f"p50 {statistics.median(timings):.2f} ms, p95 {p95:.2f} ms, max {timings[-1]:.2f} ms")


if __name__ == "__main__":
    main()
