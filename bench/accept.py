"""Benchmark: samples a second one web process accepts on `POST /api/v1/gpu-samples`, this tree beside another.

    .venv/bin/python bench/accept.py [--batches 20] [--batch 10000] [--compare main] [--profile]

Each side runs in its own process against its own fresh database (SQLite under a temporary
AIRBOARD_VAR_DIR unless DATABASE_URL is set, then that database) and filesystem broker: the
request goes through Django's full stack in process (middleware, authentication, rate limit,
parsing, validation, run and node lookup, the IngestBatch insert, the task sent to the broker),
just no socket, so the figure is the web process's own work per sample.

`--compare REV` exports REV's tree (`git archive`) into a temporary directory and measures it
and this tree alternately, `--rounds` times each, every time in a fresh process and database,
so "before" and "after" are measured in one run on one machine under the same load.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _body(run: str, batch: int, index: int, size: int) -> bytes:
    """One batch in the API's shape, as the node agent sends it: 8 GPUs, 1 Hz, NVML's fields."""
    start = datetime(2026, 11, 2, 9, tzinfo=UTC) + timedelta(seconds=index * size // 8)
    samples = []
    for i in range(size):
        gpu, second = i % 8, i // 8
        util = 90 + (i * 7) % 10
        samples.append({
            "run": run, "node": 0, "gpu": gpu, "ts": (start + timedelta(seconds=second)).isoformat(),
            "utilization_gpu": util, "utilization_memory": util // 2, "memory_used_bytes": 70_000 * 2**20,
            "memory_total_bytes": 81_559 * 2**20, "power_watts": 650.123 + gpu, "power_limit_watts": 700.0,
            "temperature_c": 66, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "sm_active": 81.23456,
            "tensor_active": 40.5, "throttle_reasons": 0, "ecc_corrected": 0, "ecc_uncorrected": 0,
            "pcie_tx_kbps": 1234567, "pcie_rx_kbps": 234567,
            "processes": [{"pid": 4242 + gpu, "used_memory_bytes": 70_000 * 2**20, "run": run}],
        })  # fmt: skip
    return json.dumps({"source": "nvml", "samples": samples}).encode()


def measure(root: Path, batches: int, size: int, profile: bool) -> dict[str, float]:
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.test import Client

    from dashboard.models import ApiKey, ApiKeyRole
    from runs.choices import RunSource
    from runs.models import Attempt, Node, Run

    call_command("migrate", verbosity=0)
    team, _ = Group.objects.get_or_create(name="bench-accept")
    external_id = f"bench-accept-{time.time_ns()}"
    run = Run.objects.create(team=team, source=RunSource.LOCAL, external_id=external_id)  # a key's default source
    Node.objects.create(attempt=Attempt.objects.create(run=run, number=1), index=0)
    key = ApiKey.issue(team, ApiKeyRole.INGEST, name="bench")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    bodies = [_body(external_id, size, i, size) for i in range(batches + 1)]
    warm = client.post("/api/v1/gpu-samples", bodies[0], content_type="application/json")
    assert warm.status_code == 202, warm.content
    profiler = cProfile.Profile() if profile else None
    began = time.perf_counter()
    if profiler:
        profiler.enable()
    for body in bodies[1:]:
        response = client.post("/api/v1/gpu-samples", body, content_type="application/json")
        assert response.status_code == 202, response.content
    if profiler:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(30)
    elapsed = time.perf_counter() - began
    return {"samples": batches * size, "seconds": elapsed, "per_second": batches * size / elapsed}


def _side(tree: Path, var: Path, args: argparse.Namespace) -> dict[str, float]:
    """One measurement in a fresh process importing `tree`, with its own database under `var`."""
    env = {**os.environ, "AIRBOARD_VAR_DIR": str(var)}
    done = subprocess.run(
        [sys.executable, __file__, "--root", str(tree), "--json", "--batches", str(args.batches),
         "--batch", str(args.batch)],
        env=env, cwd=tree, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"measuring {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=10_000, help="samples a request")
    parser.add_argument("--compare", default="", help="a git revision to measure beside this tree, e.g. main")
    parser.add_argument("--rounds", type=int, default=3, help="with --compare: alternate before/after this often")
    parser.add_argument("--root", default="", help=argparse.SUPPRESS)  # the tree to import (set by --compare)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="cProfile the timed requests (to stderr)")
    args = parser.parse_args()
    if args.json or not args.compare:
        if not args.json and "AIRBOARD_VAR_DIR" not in os.environ and "DATABASE_URL" not in os.environ:
            os.environ["AIRBOARD_VAR_DIR"] = tempfile.mkdtemp(prefix="bench-accept-")
        result = measure(Path(args.root) if args.root else HERE, args.batches, args.batch, args.profile)
        print(json.dumps(result) if args.json else f"{result['per_second']:,.0f} samples/s ({result['seconds']:.1f} s)")
        return
    # Before and after alternate, each in a fresh process and database, so a change in the
    # machine's load during the run falls on both sides; the medians are compared.
    before: list[float] = []
    after: list[float] = []
    print(f"load average at the start {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(HERE), "archive", args.compare], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        for round_ in range(args.rounds):
            before.append(_side(tree, Path(tmp) / f"before-{round_}", args)["per_second"])
            after.append(_side(HERE, Path(tmp) / f"after-{round_}", args)["per_second"])
            print(f"  round {round_ + 1}: before {before[-1]:,.0f}/s, after {after[-1]:,.0f}/s", flush=True)
    print(f"load average at the end {os.getloadavg()}")
    b, a = statistics.median(before), statistics.median(after)
    print(f"before ({args.compare}): {b:,.0f} samples/s (median of {args.rounds})")
    print(f"after (this tree): {a:,.0f} samples/s (median of {args.rounds})")
    print(f"speed-up {a / b:.2f}x: target >= 2x {'MET' if a / b >= 2 else 'NOT MET'}")


if __name__ == "__main__":
    main()
