"""Telemetry at fleet scale: Airboard against MLflow on one machine, loopback only.

Usage (from the repository root):

    .venv/bin/python bench/telemetry.py --samples 400000 --chart-samples 1000000
    .venv/bin/python bench/telemetry.py --only fleet --fleet-runs 500
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/airboard_fleet REDIS_URL=redis://127.0.0.1:6379/13 \\
        .venv/bin/python bench/telemetry.py --samples 400000

Figures printed:
  1. samples/s through the real ingest path: HTTP (gunicorn) -> IngestBatch -> Celery worker ->
     database, and the worker's peak RSS (VmHWM) at each quarter of the load (flat = no leak).
     On PostgreSQL also a raw COPY of the same rows (the worker's columns, text built beforehand)
     into a table without indexes, before and after the ingest, and the ingest's fraction of the
     faster of the two: the ceiling one machine's database sets, measured beside it.
  2. the same kind of values into a local `mlflow server` (SQLite) with log_batch, values/s.
  3. server time for the utilization and memory chart data of one 8-GPU run of
     --chart-samples samples (downsampled path) vs MLflow's get-history-bulk-interval for
     the same 16 series, and whether a planted 1-second spike survives in each.
  4. the fleet page's response time with --fleet-runs running runs.

Every process it starts is its own child, bound to 127.0.0.1, and stopped at exit. Without
DATABASE_URL a fresh SQLite database under a temporary folder is used.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import requests

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BATCH = 10_000  # samples per API request (AIRBOARD_MAX_SAMPLES_PER_BATCH)
GPUS = 8
SPIKE = 100.0
CHILDREN: list[subprocess.Popen] = []
# MLflow's sampled history for charts (mlflow/server/__init__.py; max_results defaults to 2,500).
HISTORY_PATH = "ajax-api/2.0/mlflow/metrics/get-history-bulk-interval"
# What --skip and --only name; "mlflow" is figure 2 and MLflow's side of figure 3.
PARTS = {"ingest", "charts", "mlflow", "fleet"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start a child in its own process group, so stopping it takes its workers too."""
    process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    CHILDREN.append(process)
    return process


@atexit.register
def stop_children() -> None:
    for process in CHILDREN:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in CHILDREN:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def wait_http(url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=10)
            return
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer in {timeout} s")


def tree_hwm_kb(pid: int) -> int:
    """Peak RSS (VmHWM, kB) of a process and its children: the worker's pool processes."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total = max(total, int(line.split()[1]))
        except FileNotFoundError:
            continue
    return total


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live children so far."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return out + [g for c in out for g in _children(c)]


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_runs(prefix: str, count: int, running: bool = True) -> list:
    """`count` running 8xH100 runs of a 'bench' team, one attempt and node each.

    Source `local`: the one an ingest key's samples name when they give none.
    """
    from django.contrib.auth.models import Group

    from runs.choices import AcceleratorType, RunSource, RunStatus
    from runs.models import Attempt, Node, Run

    team, _ = Group.objects.get_or_create(name="bench")
    now = datetime.now(UTC)
    runs = Run.objects.bulk_create(
        Run(team=team, source=RunSource.LOCAL, external_id=f"{prefix}-{i}", accelerator_type=AcceleratorType.H100_8,
            num_accelerators=8, gpus_per_node=8, status=RunStatus.RUNNING if running else RunStatus.SUCCEEDED,
            started_at=now)
        for i in range(count)
    )  # fmt: skip
    attempts = Attempt.objects.bulk_create(Attempt(run=r, number=1, status=r.status) for r in runs)
    Node.objects.bulk_create(Node(attempt=a, index=0) for a in attempts)
    return runs


# --- 1. ingest ------------------------------------------------------------------------


def raw_copy_rate(rows: list[tuple], batch: int = BATCH) -> float:
    """Rows/s of a plain COPY of `rows` (INSERT_COLUMNS order) into a fresh table without indexes.

    The text is formatted before the clock starts, and each `batch` rows are one COPY and one
    commit, as the worker writes them: what is timed is PostgreSQL taking the rows, nothing of Python.
    """
    from django.db import connection, transaction

    from runs.telemetry.store import INSERT_COLUMNS

    columns = ", ".join(INSERT_COLUMNS)
    table = f"bench_raw_copy_{os.getpid()}"

    def cell(value: object) -> str:
        return "\\N" if value is None else value.isoformat() if isinstance(value, datetime) else str(value)

    texts = ["".join("\t".join(cell(v) for v in row) + "\n" for row in rows[i : i + batch]).encode()
             for i in range(0, len(rows), batch)]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(f"CREATE TABLE {table} AS SELECT {columns} FROM runs_gpusample WITH NO DATA")  # noqa: S608
    try:
        started = time.perf_counter()
        for text in texts:
            with (
                transaction.atomic(),
                connection.cursor() as cursor,
                cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
            ):
                copy.write(text)
        elapsed = time.perf_counter() - started
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {table}")
    return len(rows) / elapsed


def stored_rows(tag: str) -> list[tuple]:
    """The bench's ingested samples as the worker wrote them (INSERT_COLUMNS order)."""
    from runs.models import GpuSample
    from runs.telemetry.store import INSERT_COLUMNS

    return list(GpuSample.objects.filter(run__external_id__startswith=f"{tag}-").values_list(*INSERT_COLUMNS))


def sample(tag: str, n: int, instants: list, seconds_per_run: int) -> dict:
    """The bench's n-th sample, as the API takes it; `instants[s]` is its run's second s (datetime or text)."""
    run, rest = divmod(n, GPUS * seconds_per_run)
    second, gpu = divmod(rest, GPUS)
    return {"run": f"{tag}-{run}", "gpu": gpu, "ts": instants[second],
            "utilization_gpu": (n * 7) % 100, "memory_used_bytes": 40_000_000_000 + n % 1000,
            "memory_total_bytes": 80_000_000_000, "power_watts": 600.0, "temperature_c": 70.0}  # fmt: skip


def copy_rows(tag: str, count: int, instants: list[datetime], seconds_per_run: int) -> list[tuple]:
    """The rows the worker stores for the bench's `count` samples (INSERT_COLUMNS order), built here."""
    from runs.models import Node
    from runs.telemetry.store import INSERT_COLUMNS

    found = Node.objects.filter(attempt__run__external_id__startswith=f"{tag}-")
    ids = {
        ext: (run, node) for ext, run, node in found.values_list("attempt__run__external_id", "attempt__run_id", "pk")
    }
    rows = []
    for n in range(count):
        s = sample(tag, n, instants, seconds_per_run)
        values = {**s, "run_id": ids[s["run"]][0], "node_id": ids[s["run"]][1], "gpu_index": s["gpu"], "source": "nvml"}
        rows.append(tuple(values.get(name) for name in INSERT_COLUMNS))
    return rows


def bench_ingest(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict[str, float]:
    from django.contrib.auth.models import Group
    from django.db import connection

    from dashboard.models import ApiKey, ApiKeyRole
    from runs.choices import BatchStatus
    from runs.models import IngestBatch

    seconds_per_run = 3600
    n_runs = max(1, -(-args.samples // (GPUS * seconds_per_run)))
    tag = f"ingest{int(time.time())}"
    make_runs(tag, n_runs)
    key = ApiKey.issue(Group.objects.get(name="bench"), ApiKeyRole.INGEST, name=tag)[1]
    port = free_port()
    web = spawn([str(BIN / "gunicorn"), "dashboard.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(args.web_workers),
           "--timeout", "120"], env, tmp / "gunicorn.log")  # fmt: skip
    # SQLite has one writer: more worker processes would only queue on its lock.
    pool = str(args.worker_concurrency) if env.get("DATABASE_URL", "").startswith("postgres") else "1"
    worker = spawn([str(BIN / "celery"), "-A", "dashboard", "worker", "-Q", "ingest", "-c", pool, "--without-gossip",
                    "--without-mingle", "--without-heartbeat", "-l", "WARNING"], env, tmp / "worker.log")  # fmt: skip
    wait_http(f"http://127.0.0.1:{port}/api/v1/docs")
    start_ts = datetime.now(UTC) - timedelta(seconds=seconds_per_run + 60)

    instants = [start_ts + timedelta(seconds=second) for second in range(seconds_per_run)]
    if connection.vendor == "postgresql":
        before = raw_copy_rate(copy_rows(tag, args.samples, instants, seconds_per_run))
    stamps = [instant.isoformat() for instant in instants]

    def body(index: int) -> bytes:
        """One request's body; the senders build it as cheaply as they can, on the same CPUs as the server."""
        last = min((index + 1) * BATCH, args.samples)
        rows = [sample(tag, n, stamps, seconds_per_run) for n in range(index * BATCH, last)]
        return orjson.dumps({"source": "nvml", "samples": rows})

    session = requests.Session()
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    batches = -(-args.samples // BATCH)
    hwm: list[int] = []

    def post(index: int) -> None:
        response = session.post(f"http://127.0.0.1:{port}/api/v1/gpu-samples", data=body(index), headers=headers)
        if response.status_code not in (200, 202):
            raise RuntimeError(f"batch {index}: {response.status_code} {response.text[:300]}")

    cpu = (time.process_time(), tree_cpu_s(web.pid), tree_cpu_s(worker.pid))
    started = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as clients:
        list(clients.map(post, range(batches)))
    posted = time.perf_counter() - started
    pending = IngestBatch.objects.filter(team__name="bench", status=BatchStatus.PENDING)
    deadline = time.monotonic() + args.timeout
    quarter = batches / 4
    while pending.exists() and time.monotonic() < deadline:
        done = batches - pending.count()
        if done >= quarter * (len(hwm) + 1):
            hwm.append(tree_hwm_kb(worker.pid))
        time.sleep(0.2)
    elapsed = time.perf_counter() - started
    hwm.append(tree_hwm_kb(worker.pid))
    used = [
        after - before
        for before, after in zip(cpu, (time.process_time(), tree_cpu_s(web.pid), tree_cpu_s(worker.pid)), strict=True)
    ]
    left = pending.count()
    rate = args.samples / elapsed
    print(f"[1] ingest: {args.samples:,} samples in {batches} batches, HTTP accept {posted:.1f} s, "
          f"end to end {elapsed:.1f} s -> {rate:,.0f} samples/s ({left} batches unfinished)")  # fmt: skip
    print(f"    worker peak RSS (VmHWM) at each quarter: {', '.join(f'{k / 1024:.0f} MB' for k in hwm)}")
    sender, web_ms, worker_ms = (seconds / batches * 1000 for seconds in used)
    print(f"    CPU per batch: senders (this process) {sender:.0f} ms, web {web_ms:.0f} ms, worker {worker_ms:.0f} ms "
          "(the database's own not counted)")  # fmt: skip
    if connection.vendor != "postgresql":
        return {"ingest_rate": rate}
    rows = stored_rows(tag)
    after = raw_copy_rate(rows)  # read back: the very rows the worker stored
    copy = max(before, after)
    fraction = rate / copy
    print(f"    raw COPY of the same {len(rows):,} rows ({BATCH:,} a COPY, no indexes): {before:,.0f} rows/s before "
          f"the ingest, {after:,.0f} after; ingest is {fraction:.1%} of the faster "
          f"(target >= 10%: {'met' if fraction >= 0.10 else 'NOT met'}); load {os.getloadavg()[0]:.1f}")  # fmt: skip
    return {"ingest_rate": rate, "copy_rate": copy, "copy_fraction": fraction}


# --- 2 + 3. MLflow and charts ---------------------------------------------------------


def chart_run(n: int):
    """One 8-GPU run of `n` samples at 1 Hz (ending now), a 1-second spike on GPU 3 at 2/3 of it."""
    from runs.models import GpuSample, Node
    from runs.telemetry.store import store_gpu_samples

    run = make_runs(f"chart{int(time.time())}", 1, running=False)[0]
    node = Node.objects.get(attempt__run=run)
    seconds = n // GPUS
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=seconds)
    spike_second = 2 * seconds // 3
    chunk = 80_000
    for first in range(0, seconds, chunk // GPUS):
        store_gpu_samples([
            GpuSample(run=run, node=node, gpu_index=g, ts=start + timedelta(seconds=s),
                      utilization_gpu=SPIKE if (g == 3 and s == spike_second) else 40.0 + (s % 20),
                      memory_used_bytes=50_000_000_000 + (s % 7) * 1_000_000)
            for s in range(first, min(first + chunk // GPUS, seconds)) for g in range(GPUS)
        ])  # fmt: skip
    return run, seconds, spike_second


def bench_mlflow_and_charts(args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from runs.telemetry import charts

    t = time.perf_counter()
    run, seconds, spike_second = chart_run(args.chart_samples)
    print(f"    (chart run: {args.chart_samples:,} samples stored with rollups in {time.perf_counter() - t:.1f} s)")

    def chart_data() -> tuple[dict, dict]:
        util = charts.utilization_figure(charts.gpu_series(run, "utilization_gpu"))
        mem = charts.memory_figure(charts.gpu_series(run, "memory_used_bytes"))
        return util, mem

    chart_data()  # warm the connection and caches once
    timings = []
    for _ in range(5):
        t = time.perf_counter()
        util, _ = chart_data()
        timings.append(time.perf_counter() - t)
    ours = statistics.median(timings)
    points = max(len(trace["x"]) for trace in util["data"])
    kept = max(util["data"][3]["y"]) == SPIKE
    print(f"[3] Airboard chart data (utilization + memory, 16 series, {points} points max each): "
          f"{ours * 1000:.0f} ms median of 5; spike kept: {kept}")  # fmt: skip

    if "mlflow" in args.skip.split(","):
        return {"chart_ms": ours * 1000}
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    spawn([str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
           "--default-artifact-root", str(tmp / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"], env, tmp / "mlflow.log")  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    wait_http(f"{uri}/health", timeout=120)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment(f"bench-{int(time.time())}")).info.run_id
    base_ms = int(time.time() * 1000)
    metrics = [
        Metric(f"system/gpu_{g}_{key}", value, base_ms + s * 1000, s)
        for s in range(seconds)
        for g in range(GPUS)
        for key, value in (
            ("utilization_percentage", SPIKE if (g == 3 and s == spike_second) else 40.0 + (s % 20)),
            ("memory_usage_megabytes", 50_000.0 + (s % 7)),
        )
    ]
    t = time.perf_counter()
    for first in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[first : first + 1000])
    logged = time.perf_counter() - t
    mlflow_rate = len(metrics) / logged
    print(
        f"[2] MLflow log_batch (1,000 a call): {len(metrics):,} values in {logged:.1f} s -> {mlflow_rate:,.0f} values/s"
    )

    def history() -> tuple[float, bool]:
        t = time.perf_counter()
        spike = False
        for key in ("utilization_percentage", "memory_usage_megabytes"):
            for g in range(GPUS):
                params = {"run_ids": run_id, "metric_key": f"system/gpu_{g}_{key}"}
                response = requests.get(f"{uri}/{HISTORY_PATH}", params=params, timeout=120)
                response.raise_for_status()
                if g == 3 and key == "utilization_percentage":
                    spike = any(m["value"] == SPIKE for m in response.json().get("metrics", []))
        return time.perf_counter() - t, spike

    history()
    theirs_runs = [history() for _ in range(3)]
    theirs = statistics.median(r[0] for r in theirs_runs)
    print(f"    MLflow get-history-bulk-interval (16 series, default max_results=2500): {theirs * 1000:.0f} ms "
          f"median of 3; spike kept: {theirs_runs[0][1]}")  # fmt: skip
    print(f"    ratio: Airboard chart data is {theirs / ours:.1f}x faster")
    return {"chart_ms": ours * 1000, "chart_ratio": theirs / ours, "mlflow_rate": mlflow_rate}


# --- 4. fleet -------------------------------------------------------------------------


def bench_fleet(args: argparse.Namespace) -> dict[str, float]:
    from django.contrib.auth.models import User
    from django.test import Client

    from runs.choices import RunStatus
    from runs.models import GpuHour, GpuMinute, Node, Run

    # In a reused database, earlier fleet steps' runs (and their hours, on the history charts)
    # go, and other bench runs stop "running": the page shows exactly --fleet-runs runs.
    Run.objects.filter(team__name="bench", external_id__startswith="fleet").delete()
    Run.objects.filter(team__name="bench", status=RunStatus.RUNNING).update(status=RunStatus.SUCCEEDED)
    runs = make_runs(f"fleet{int(time.time())}", args.fleet_runs)
    nodes = dict(Node.objects.filter(attempt__run__in=runs).values_list("attempt__run_id", "pk"))
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    values = {"samples": 60, "utilization_gpu_avg": 70.0, "utilization_gpu_max": 99.0,
              "memory_used_bytes_max": 6e10, "memory_total_bytes": 80_000_000_000}  # fmt: skip
    GpuMinute.objects.bulk_create(
        (GpuMinute(run=r, node_id=nodes[r.pk], gpu_index=g, minute=now - timedelta(minutes=m), **values)
         for r in runs for g in range(GPUS) for m in range(5)), batch_size=5000)  # fmt: skip
    GpuHour.objects.bulk_create(
        (GpuHour(run=r, node_id=nodes[r.pk], gpu_index=g, hour=now.replace(minute=0) - timedelta(hours=h), **values)
         for r in runs for g in range(GPUS) for h in range(24)), batch_size=5000)  # fmt: skip
    staff, _ = User.objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
    client = Client()
    client.force_login(staff)
    client.get("/runs/fleet/")
    timings = []
    for _ in range(5):
        t = time.perf_counter()
        response = client.get("/runs/fleet/")
        timings.append(time.perf_counter() - t)
        assert response.status_code == 200
    median = statistics.median(timings)
    cells = response.content.decode().count('title="GPU ')
    print(f"[4] fleet page with {args.fleet_runs} running runs ({cells:,} GPU cells shown): "
          f"{median * 1000:.0f} ms median of 5")  # fmt: skip
    return {"fleet_ms": median * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000_000, help="samples through the ingest path")
    parser.add_argument("--chart-samples", type=int, default=1_000_000, help="samples of the charted 8-GPU run")
    parser.add_argument("--fleet-runs", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP senders")
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--worker-concurrency", type=int, default=4, help="Celery processes (PostgreSQL only)")
    parser.add_argument("--timeout", type=float, default=1800, help="give up waiting for the worker after this")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: ingest,charts,mlflow,fleet")
    parser.add_argument("--only", default="", help="comma-separated parts to run (the rest skipped), e.g. fleet")
    args = parser.parse_args()
    # `timeout` or Ctrl-C: exit through atexit, so the servers and the worker are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="airboard-bench-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    env = dict(os.environ, AIRBOARD_VAR_DIR=str(tmp / "var"), DJANGO_SETTINGS_MODULE="dashboard.settings",
               PYTHONUNBUFFERED="1")  # fmt: skip
    env["DJANGO_ALLOWED_HOSTS"] = "127.0.0.1,localhost,testserver"
    setup_django(env)
    from django.db import connection

    print(f"database: {connection.vendor}; broker: {'redis' if env.get('REDIS_URL') else 'filesystem'}")
    if args.only:
        # Each part measured on its own, so a noisy or slow one need not be rerun with the rest.
        args.skip = ",".join(PARTS - set(args.only.split(",")) | set(args.skip.split(",")))
    skip = set(args.skip.split(","))
    results: dict[str, float] = {}
    if "ingest" not in skip:
        results |= bench_ingest(args, env, tmp)
    if "charts" not in skip:
        results |= bench_mlflow_and_charts(args, tmp)
    if "fleet" not in skip:
        results |= bench_fleet(args)
    if "ingest_rate" in results and "mlflow_rate" in results:
        print(f"ratio: ingest samples/s vs MLflow values/s = {results['ingest_rate'] / results['mlflow_rate']:.1f}x")
    print("targets: >= 20,000 samples/s (PostgreSQL); chart < 150 ms and >= 10x MLflow with the spike kept")


if __name__ == "__main__":
    main()
