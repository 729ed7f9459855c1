"""Benchmark: a whole-run chart of 1,000,000 samples against MLflow's bulk-interval read, 8 GPUs against 64.

    DATABASE_URL=postgres://... .venv/bin/python bench/whole_run.py [--samples 1000000] [--repeat 5]
        [--rebuild] [--no-mlflow] [--mlflow-dir /tmp/airboard-whole-run-mlflow]

PostgreSQL only. Point DATABASE_URL at a throwaway database: it is migrated and filled once (team
"bench-whole-run"; `--rebuild` starts again). Issue 30's target: the whole-run chart at least 100x
faster than MLflow's bulk-interval read of the same data, the spike kept, at most 2x slower for 64
GPUs than for 8, and no read depending on autovacuum having caught up with compaction.

The workspace:
  1. Two finished runs of --samples samples each at 1 Hz, through the real ingest path
     (`ingest.record_batch` + `ingest_process.process_batch`: raw rows, minute and hour rollups, stall
     streaks), then the beat's compaction (`blocks.compact_samples`) until no hot row is left:
     1 node x 8 GPUs (125,000 s, 34.7 h for a million) and 8 nodes x 8 GPUs (15,625 s). One GPU
     of each spikes to 100 % for one second at two thirds of the run.
  2. The same values in a local `mlflow server` (SQLite, as bench/telemetry.py), one series per GPU
     and metric (`system/gpu_<i>_utilization_percentage`, `..._memory_usage_megabytes`), kept in
     --mlflow-dir between calls: the 8-GPU run's (2M values, ~40 min to log once on the 2-core
     box), and the 64-GPU run's with --mlflow-gpus 8,64.
  3. Every call, a fresh probe: a 64-GPU run of --probe-minutes, ingested with autovacuum off on
     the raw tables and ANALYZEd while its rows are hot (as autovacuum would have), then compacted
     with no VACUUM after: its zoom reads are timed before and after `VACUUM ANALYZE`.

Printed: per run, the whole-run chart (telemetry.json: utilization and memory, the run page's
first two panels, `--width` px) server time (median of --repeat, Django's full stack in process),
bytes, queries, points per trace and whether the spike survives; MLflow's read of the same series
(get-history-bulk-interval, default max_results 2,500, one request per series as its UI asks),
median of 3, and whether the spike survives; the ratios; then the probe's reads before and after
vacuum. Each figure against its target: met / NOT met.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django

django.setup()

import requests
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection, reset_queries
from django.test import Client

from runs import ingest, ingest_process
from runs.choices import AcceleratorType, BatchKind, RunStatus
from runs.models import Attempt, GpuMinute, GpuSample, GpuSampleBlock, Node, Run
from runs.telemetry import blocks

TEAM = "bench-whole-run"
SPIKE = 100.0
BATCH = 10_000
GPUS_PER_NODE = 8
LAYOUTS = ((1, "8 GPUs"), (8, "64 GPUs"))  # nodes of 8 GPUs
FIELDS = "utilization_gpu,memory_used_bytes"
MLFLOW_FASTER = 100.0
GPU_RATIO = 2.0
VACUUM_RATIO = 1.2
# MLflow's sampled history for charts (mlflow/server/__init__.py; max_results defaults to 2,500).
HISTORY_PATH = "ajax-api/2.0/mlflow/metrics/get-history-bulk-interval"
MLFLOW_KEYS = ("utilization_percentage", "memory_usage_megabytes")
CHILDREN: list[subprocess.Popen] = []


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def util(gpu: int, s: int) -> float:
    return 55.0 + (gpu * 3 + s) % 30


def memory(s: int) -> int:
    return 60_000_000_000 + (s % 7) * 1_000_000


def make_run(team: Group, name: str, nodes: int, start: datetime, end: datetime) -> tuple[Run, list[Node]]:
    run = Run.objects.create(
        team=team, external_id=name, status=RunStatus.SUCCEEDED, accelerator_type=AcceleratorType.H100_8,
        num_accelerators=nodes * GPUS_PER_NODE, gpus_per_node=GPUS_PER_NODE, submitted_at=start, started_at=start,
        ended_at=end,
    )  # fmt: skip
    attempt = Attempt.objects.create(run=run, number=1, status=RunStatus.SUCCEEDED, started_at=start, ended_at=end)
    return run, [Node.objects.create(attempt=attempt, index=i, host=f"10.2.{run.pk % 250}.{i}") for i in range(nodes)]


def ingest_run(team: Group, run: Run, nodes: list[Node], start: datetime, seconds: int, spike: int) -> int:
    """1 Hz samples of every GPU through record_batch + process_batch, BATCH a batch; GPU 3 of the last node spikes."""
    rows, stored = [], 0
    last = nodes[-1].index
    for s in range(seconds):
        ts = (start + timedelta(seconds=s)).isoformat()
        for node in nodes:
            for gpu in range(GPUS_PER_NODE):
                value = SPIKE if (node.index, gpu, s) == (last, 3, spike) else util(gpu, s)
                rows.append([run.pk, node.pk, gpu, ts, value, 35.0, memory(s), 85_520_809_984, 650.0, 700.0,
                             66.0, 1950.0, 2619.0, value - 15, value - 30, 0, 0, 0, None, None, None])  # fmt: skip
        if len(rows) >= BATCH or s == seconds - 1:
            batch, _ = ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows, "nvml")
            stored += ingest_process.process_batch(batch.pk).inserted
            rows = []
    return stored


def compact_all() -> int:
    folded = 0
    while True:
        result = blocks.compact_samples(now=datetime.now(UTC), max_minutes=10_000)
        folded += result.samples
        if not result.minutes:
            return folded


def raw_partitions() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [GpuSample._meta.db_table],
        )
        return [row[0] for row in cursor.fetchall()]


def set_autovacuum(enabled: bool) -> None:
    """Autovacuum (and its analyze) on or off for every partition of the hot raw table."""
    with connection.cursor() as cursor:
        for name in raw_partitions():
            cursor.execute(f"ALTER TABLE {connection.ops.quote_name(name)} SET (autovacuum_enabled = {enabled})")


def build(team: Group, samples: int) -> None:
    for nodes, label in LAYOUTS:
        seconds = samples // (nodes * GPUS_PER_NODE)
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
        start = end - timedelta(seconds=seconds)
        began = time.perf_counter()
        run, made = make_run(team, f"whole-{nodes * GPUS_PER_NODE}", nodes, start, end)
        stored = ingest_run(team, run, made, start, seconds, 2 * seconds // 3)
        print(f"  {label}: {stored:,} samples ingested in {time.perf_counter() - began:.0f} s", flush=True)
    began = time.perf_counter()
    print(f"  compacted {compact_all():,} samples in {time.perf_counter() - began:.0f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def timed(client: Client, url: str, repeat: int) -> tuple[float, int, int, dict]:
    """(median ms, bytes, queries, last answer) of `repeat` GETs after one warm-up."""
    times, size, queries, answer = [], 0, 0, {}
    for i in range(repeat + 1):
        reset_queries()
        began = time.perf_counter()
        response = client.get(url)
        body = response.content
        elapsed = (time.perf_counter() - began) * 1000
        assert response.status_code == 200, (url, response.status_code, body[:300])
        if i:
            times.append(elapsed)
        size, queries, answer = len(body), len(connection.queries), json.loads(body)
    return statistics.median(times), size, queries, answer


def chart_figures(client: Client, run: Run, width: int, repeat: int, quiet: bool = False) -> tuple[float, bool]:
    url = f"/runs/{run.pk}/telemetry.json?range=all&width={width}&fields={FIELDS}"
    ms, size, queries, answer = timed(client, url, repeat)
    traces = [trace for panel in answer["panels"] for trace in panel["figure"]["data"]]
    points = max(len(trace.get("y", [])) for trace in traces)
    util_panel = next(p for p in answer["panels"] if p["field"] == "utilization_gpu")
    kept = max(v for v in util_panel["figure"]["data"][1]["y"] if v is not None) == SPIKE
    tiers = ",".join(sorted({p["tier"] for p in answer["panels"]}))
    if quiet:
        return ms, kept
    print(f"  Airboard whole-run chart (2 panels, tier {tiers}): {ms:.1f} ms median of {repeat}, "
          f"{size / 1000:.1f} KB, {queries} queries, {points} points a trace at most "
          f"(width {width}); spike kept: {kept}")  # fmt: skip
    return ms, kept


# --- MLflow -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@atexit.register
def stop_children() -> None:
    for process in CHILDREN:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def mlflow_server(folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    log = (folder / "server.log").open("w")
    CHILDREN.append(subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--default-artifact-root", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    ))  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            requests.get(f"{uri}/health", timeout=5)
            return uri
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.5)
    raise RuntimeError(f"mlflow server did not answer; see {folder / 'server.log'}")


def mlflow_run(uri: str, name: str, gpus: int, seconds: int, spike: int) -> str:
    """The run holding the same values as Airboard's (logged once, found again on later calls)."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        done = client.search_runs([experiment.experiment_id], "tags.complete = 'yes'")
        if done:
            return done[0].info.run_id
        client.delete_experiment(experiment.experiment_id)
        client.rename_experiment(experiment.experiment_id, f"{name}-abandoned-{int(time.time())}")
    run_id = client.create_run(client.create_experiment(name)).info.run_id
    base_ms = int(time.time() * 1000) - seconds * 1000
    began = time.perf_counter()
    batch: list = []
    last_node = gpus // GPUS_PER_NODE - 1
    for s in range(seconds):
        for g in range(gpus):
            value = SPIKE if (g == last_node * GPUS_PER_NODE + 3 and s == spike) else util(g % GPUS_PER_NODE, s)
            batch.append(Metric(f"system/gpu_{g}_utilization_percentage", value, base_ms + s * 1000, s))
            batch.append(Metric(f"system/gpu_{g}_memory_usage_megabytes", memory(s) / 1e6, base_ms + s * 1000, s))
        if len(batch) >= 1000 or s == seconds - 1:
            client.log_batch(run_id, metrics=batch)
            batch = []
    client.set_tag(run_id, "complete", "yes")
    print(f"  MLflow: {2 * gpus * seconds:,} values logged in {time.perf_counter() - began:.0f} s", flush=True)
    return run_id


def mlflow_read(uri: str, run_id: str, gpus: int) -> tuple[float, bool]:
    """One bulk-interval read of every series of the run: (seconds, spike seen)."""
    began = time.perf_counter()
    spike = False
    with requests.Session() as session:
        for key in MLFLOW_KEYS:
            for g in range(gpus):
                params = {"run_ids": run_id, "metric_key": f"system/gpu_{g}_{key}"}
                response = session.get(f"{uri}/{HISTORY_PATH}", params=params, timeout=300)
                response.raise_for_status()
                spike |= any(m["value"] == SPIKE for m in response.json().get("metrics", []))
    return time.perf_counter() - began, spike


# --- Vacuum probe -----------------------------------------------------------------------


def hot_reads(client: Client, url: str) -> int:
    """Queries of one GET that read the hot raw table (where compaction's dead rows wait for vacuum)."""
    reset_queries()
    client.get(url)
    return sum(f'FROM "{GpuSample._meta.db_table}" ' in q["sql"] for q in connection.queries)


def probe(team: Group, client: Client, minutes: int, width: int, repeat: int) -> None:
    """A fresh 64-GPU run compacted with no vacuum after: its zoom reads before and after VACUUM ANALYZE."""
    Run.objects.filter(team=team, external_id="probe-64").delete()
    set_autovacuum(False)
    try:
        end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=15)
        start = end - timedelta(minutes=minutes)
        run, made = make_run(team, "probe-64", 8, start, end)
        began = time.perf_counter()
        stored = ingest_run(team, run, made, start, minutes * 60, minutes * 30)
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {GpuSample._meta.db_table}")  # as autovacuum would have, rows hot
        folded = compact_all()
        hot = GpuSample.objects.filter(run=run).count()
        print(
            f"\nvacuum probe: 64-GPU run of {minutes} min, {stored:,} samples ingested, {folded:,} compacted "
            f"({hot} hot left) in {time.perf_counter() - began:.0f} s; autovacuum off on the raw partitions"
        )
        mid = start + timedelta(minutes=minutes // 2)
        window = f"&from={(mid - timedelta(minutes=15)).isoformat()}&to={(mid + timedelta(minutes=15)).isoformat()}"
        window = window.replace("+", "%2B")
        base = f"/runs/{run.pk}/telemetry.json?width={width}&fields={FIELDS}"
        cases = [
            ("zoom, 30 min (raw samples)", f"{base}{window}"),
            ("zoom, 30 min, each GPU (raw samples)", f"{base}{window}&view=gpus"),
            ("zoom on one node, each GPU", f"{base}{window}&view=gpus&gpu_node=7"),
            ("whole run, each GPU", f"{base}&range=all&view=gpus"),
        ]
        before = {label: timed(client, url, repeat) for label, url in cases}
        hot = {label: hot_reads(client, url) for label, url in cases}
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {GpuSample._meta.db_table}")
        after = {label: timed(client, url, repeat) for label, url in cases}
        for label, _ in cases:
            a, b = before[label], after[label]
            ratio = a[0] / b[0]
            print(f"  {label:38s} before vacuum {a[0]:7.1f} ms ({a[2]} queries, {hot[label]} of the hot table), "
                  f"after {b[0]:7.1f} ms = {ratio:.2f}x  target <= {VACUUM_RATIO}x (or no hot-table read) "
                  f"{verdict(ratio <= VACUUM_RATIO or not hot[label])}")  # fmt: skip
    finally:
        set_autovacuum(True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000, help="samples of each charted run")
    parser.add_argument("--width", type=int, default=1100, help="panel width in px (what charts.js sends at 1400)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--no-mlflow", action="store_true")
    parser.add_argument(
        "--mlflow-gpus", default="8", help="the runs MLflow holds too: 8, or 8,64 (64 GPUs: another 2M values, ~30 min)"
    )
    parser.add_argument("--no-probe", action="store_true")
    parser.add_argument("--probe-minutes", type=int, default=45)
    parser.add_argument("--mlflow-dir", type=Path, default=Path(tempfile.gettempdir()) / "airboard-whole-run-mlflow")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through atexit: the mlflow server stops too
    if connection.vendor != "postgresql":
        sys.exit("bench/whole_run.py needs DATABASE_URL=postgres://...")
    settings.DEBUG = True  # connection.queries counts the queries
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    call_command("migrate", verbosity=0)
    team = Group.objects.filter(name=TEAM).first()
    if team is not None and (args.rebuild or not Run.objects.filter(team=team, external_id="whole-64").exists()):
        Run.objects.filter(team=team).delete()
        team.delete()
        team = None
    if team is None:
        team = Group.objects.create(name=TEAM)
        print(f"building the workspace ({args.samples:,} samples a run)", flush=True)
        build(team, args.samples)
    user, _ = User.objects.get_or_create(username="bench-whole-run")
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    print(f"load average {os.getloadavg()}")
    uri = None if args.no_mlflow else mlflow_server(args.mlflow_dir)
    ours: dict[str, float] = {}
    for nodes, label in LAYOUTS:
        gpus = nodes * GPUS_PER_NODE
        run = Run.objects.get(team=team, external_id=f"whole-{gpus}")
        minutes = GpuMinute.objects.filter(run=run).count()
        cold = sum(GpuSampleBlock.objects.filter(run=run).values_list("samples", flat=True))
        print(f"{label}: run of {cold:,} samples (compacted), {minutes:,} minute rollups")
        ours[label], kept = chart_figures(client, run, args.width, args.repeat)
        if uri is None or str(gpus) not in args.mlflow_gpus.split(","):
            continue
        seconds = args.samples // gpus
        run_id = mlflow_run(uri, f"whole-{gpus}-{args.samples}", gpus, seconds, 2 * seconds // 3)
        mlflow_read(uri, run_id, gpus)  # warm
        # In turn, ours then theirs, three times: each pair's ratio under the same load; the median of them.
        pairs = []
        for _ in range(3):
            mine = chart_figures(client, run, args.width, args.repeat, quiet=True)[0]
            theirs_s, spike = mlflow_read(uri, run_id, gpus)
            pairs.append((theirs_s * 1000, mine, spike))
        theirs = statistics.median(p[0] for p in pairs)
        ratio = statistics.median(p[0] / p[1] for p in pairs)
        print(f"  MLflow get-history-bulk-interval ({2 * gpus} series): {theirs:.0f} ms median of 3; "
              f"spike kept: {pairs[0][2]}; Airboard in turn: {', '.join(f'{p[1]:.1f}' for p in pairs)} ms")  # fmt: skip
        print(f"  Airboard is {ratio:.0f}x faster (median of the pairs), spike kept: target >= {MLFLOW_FASTER:.0f}x "
              f"{verdict(ratio >= MLFLOW_FASTER and kept)}")  # fmt: skip
    ratio = ours["64 GPUs"] / ours["8 GPUs"]
    print(f"64 GPUs / 8 GPUs whole-run chart: {ours['64 GPUs']:.1f} / {ours['8 GPUs']:.1f} ms = {ratio:.2f}x  "
          f"target <= {GPU_RATIO:.0f}x {verdict(ratio <= GPU_RATIO)}")  # fmt: skip
    if not args.no_probe:
        probe(team, client, args.probe_minutes, args.width, args.repeat)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
