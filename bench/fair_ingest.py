"""Benchmark: one key's heavy push against another team's writes (issue 33, fair ingest).

    .venv/bin/python bench/fair_ingest.py [--compare 4ab1749] [--writers 7]

Each side runs in a fresh process and SQLite database (under a temporary AIRBOARD_VAR_DIR),
through Django's full stack in process (no socket), and prints:

- `attack`: a 1 MB `POST /api/v1/gpu-samples` naming 10,000 distinct (attempt, node), one
  row each, from team A's key: its status and seconds;
- `others`: `--writers` threads of team B each upsert a run (`POST /api/v1/runs`), one a
  second from 3 s after the attack began (while it runs, where it still does): how many
  answered other than 2xx, and the slowest;
- `allowed`: the largest push this tree accepts, 512 distinct nodes in 10,000 rows: seconds;
- `attempts`: a run upsert of 1,000 attempts x 4 nodes: status and seconds.

`--compare REV` measures REV's tree (`git archive`) first, then this tree, one round each.
On 2 loaded cores (load 11-13), `--compare 4ab1749`: the attack 202 in 68.9 s before, and
all 7 of team B's writes 503 after 21.5 s (SQLite's lock timeout); after, the attack is a
413 in 1.8 s and B's 7 writes 201 within 0.09 s. The largest allowed push 2.18 -> 0.47 s;
1,000 attempts x 4 nodes 18.9 -> 2.4 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _samples(run: str, pairs: list[tuple[int, int]], rows: int, at: datetime) -> bytes:
    samples = []
    for i in range(rows):
        attempt, node = pairs[i % len(pairs)]
        ts = (at + timedelta(seconds=i // len(pairs))).isoformat()
        samples.append({"run": run, "run_source": "local", "attempt": attempt, "node": node, "gpu": 0, "ts": ts,
                        "utilization_gpu": 90, "power_watts": 650.5, "temperature_c": 66})  # fmt: skip
    return json.dumps({"samples": samples}).encode()


def measure(root: Path, writers: int) -> dict[str, object]:
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from dashboard.models import ApiKey, ApiKeyRole
    from runs.choices import RunOrigin, RunSource
    from runs.models import Run

    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    a, b = Group.objects.create(name="team-a"), Group.objects.create(name="team-b")
    for name in ("heavy", "allowed"):
        Run.objects.create(team=a, external_id=name, source=RunSource.LOCAL, origin=RunOrigin.KEY, status="running",
                           started_at=now - timedelta(hours=1))  # fmt: skip
    a_client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiKey.issue(a, ApiKeyRole.INGEST, name='a')[1]}")
    b_keys = [ApiKey.issue(b, ApiKeyRole.INGEST, name=f"b{i}")[1] for i in range(writers)]
    at = now - timedelta(minutes=30)
    attack = _samples("heavy", [(n // 1000 + 1, n % 1000) for n in range(10_000)], 10_000, at)
    out: dict[str, object] = {"attack_bytes": len(attack)}

    def heavy() -> None:
        began = time.perf_counter()
        response = a_client.post("/api/v1/gpu-samples", attack, content_type="application/json")
        out["attack"] = {"status": response.status_code, "seconds": round(time.perf_counter() - began, 2)}
        connection.close()

    results: list[tuple[int, float]] = []

    def other(i: int) -> None:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {b_keys[i]}")
        began = time.perf_counter()
        body = {"external_id": f"b-{i}", "status": "running", "started_at": now.isoformat()}
        response = client.post("/api/v1/runs", body, content_type="application/json")
        results.append((response.status_code, time.perf_counter() - began))
        connection.close()

    attacker = threading.Thread(target=heavy)
    attacker.start()
    # Past the body's parsing (about 2 s here): the attack writes its nodes by now, where it does.
    time.sleep(3)
    threads = [threading.Thread(target=other, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
        time.sleep(1)
    for t in [*threads, attacker]:
        t.join()
    out["others"] = {
        "writes": len(results), "failed": sum(1 for s, _ in results if not 200 <= s < 300),
        "statuses": sorted(s for s, _ in results), "slowest_seconds": round(max(t for _, t in results), 2),
    }  # fmt: skip

    allowed = _samples("allowed", [(n // 64 + 1, n % 64) for n in range(512)], 10_000, at)
    began = time.perf_counter()
    response = a_client.post("/api/v1/gpu-samples", allowed, content_type="application/json")
    out["allowed"] = {"status": response.status_code, "seconds": round(time.perf_counter() - began, 2)}

    start = now - timedelta(hours=4)
    body = {"external_id": "many", "status": "failed", "started_at": start.isoformat(), "attempts": [
        {"number": n, "status": "failed", "started_at": (start + timedelta(seconds=10 * n)).isoformat(),
         "ended_at": (start + timedelta(seconds=10 * n + 5)).isoformat(),
         "nodes": [{"index": i, "status": "failed"} for i in range(4)]} for n in range(1, 1001)]}  # fmt: skip
    b_client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiKey.issue(b, ApiKeyRole.INGEST, name='bulk')[1]}")
    began = time.perf_counter()
    response = b_client.post("/api/v1/runs", body, content_type="application/json")
    out["attempts"] = {"status": response.status_code, "seconds": round(time.perf_counter() - began, 2)}
    return out


def _side(tree: Path, var: Path, writers: int) -> dict[str, object]:
    env = {**os.environ, "AIRBOARD_VAR_DIR": str(var)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, __file__, "--root", str(tree), "--json", "--writers", str(writers)],
        env=env, cwd=tree, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"measuring {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=7)
    parser.add_argument("--compare", default="", help="a git revision to measure first, e.g. 4ab1749")
    parser.add_argument("--root", default="", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(Path(args.root) if args.root else HERE, args.writers)))
        return
    print(f"load average at the start {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        sides = []
        if args.compare:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(HERE), "archive", args.compare], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            sides.append((f"before ({args.compare})", tree))
        sides.append(("after (this tree)", HERE))
        for label, tree in sides:
            result = _side(tree, Path(tmp) / label.split()[0], args.writers)
            print(f"{label}:")
            for name in ("attack", "others", "allowed", "attempts"):
                print(f"  {name}: {json.dumps(result[name])}", flush=True)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
