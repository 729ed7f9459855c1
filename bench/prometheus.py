"""The scale-out path, measured: a 64-GPU run's hour read through the Prometheus source, against Airboard's store.

Usage (from the repository root; Debian's `victoria-metrics` installed):

    .venv/bin/python bench/prometheus.py
    .venv/bin/python bench/prometheus.py --scrape-seconds 1 --step 15
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/airboard_prom REDIS_URL=redis://127.0.0.1:6379/13 \\
        .venv/bin/python bench/prometheus.py

What it does, all on loopback:
  1. Starts a real VictoriaMetrics (temp dir) and imports one hour of dcgm-exporter pages for
     8 nodes x 8 GPUs, every --scrape-seconds, through its own /api/v1/import/prometheus (the
     exporter's metric and label names: tests/data/telemetry/SOURCES.md).
  2. Creates the run (8 nodes, hosts node-0..node-7) in a fresh database and runs
     `prometheus.collect_once()`: the hour read with query_range at --step and stored through
     the ingest path. Then a second pass (what each later minute costs: the re-read margin,
     nothing new).
  3. Reads the hour for a chart both ways: the 64 utilisation series straight from the engine
     (one query_range at --step), and Airboard's own `gpu_series` (the run page's read).

Figures printed: samples imported into the engine, the collector's first pass (s, samples
stored, samples/s), the second pass (s, new samples), and the two chart reads (ms) with their ratio.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
NODES, GPUS = 8, 8
CHILDREN: list[subprocess.Popen] = []
# One line per metric per GPU, labels as dcgm-exporter writes them (tests/data/telemetry/dcgm_h100_mig_prof.prom).
METRICS = (
    ("DCGM_FI_DEV_SM_CLOCK", lambda s, g: 1980),
    ("DCGM_FI_DEV_MEM_CLOCK", lambda s, g: 2619),
    ("DCGM_FI_DEV_GPU_TEMP", lambda s, g: 40 + (s + g) % 30),
    ("DCGM_FI_DEV_POWER_USAGE", lambda s, g: 300.5 + (s * 7 + g) % 400),
    ("DCGM_FI_DEV_GPU_UTIL", lambda s, g: (s * 13 + g * 7) % 101),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", lambda s, g: (s * 3 + g) % 60),
    ("DCGM_FI_DEV_FB_FREE", lambda s, g: 81559 - 40000 - (s % 1000)),
    ("DCGM_FI_DEV_FB_USED", lambda s, g: 40000 + (s % 1000)),
    ("DCGM_FI_DEV_XID_ERRORS", lambda s, g: 0),
    ("DCGM_FI_PROF_SM_ACTIVE", lambda s, g: ((s + g) % 100) / 100),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", lambda s, g: ((s * 2 + g) % 100) / 100),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", lambda s, g: 1_000_000 + s),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", lambda s, g: 2_000_000 + s),
)


@atexit.register
def stop_children() -> None:
    for process in CHILDREN:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)


def start_engine(tmp: Path) -> str:
    binary = shutil.which("victoria-metrics")
    if binary is None:
        sys.exit("victoria-metrics is not installed (apt-get install victoria-metrics)")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp / "vm.log").open("w")
    CHILDREN.append(subprocess.Popen(
        [binary, f"-storageDataPath={tmp / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=100y",
         "-search.disableCache"], stdout=log, stderr=subprocess.STDOUT,
    ))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if requests.get(f"{url}/health", timeout=1).ok:
                return url
        except requests.RequestException:
            pass
        time.sleep(0.1)
    sys.exit("victoria-metrics did not start")


def load_hour(url: str, start: datetime, scrape_seconds: int) -> int:
    """One hour of pages for every node, imported in chunks; returns the samples (lines) imported."""
    lines_total = 0
    first_ms = int(start.timestamp()) * 1000
    chunk: list[str] = []
    for scrape in range(3600 // scrape_seconds):
        ts = first_ms + scrape * scrape_seconds * 1000
        for node in range(NODES):
            for gpu in range(GPUS):
                labels = (f'gpu="{gpu}",UUID="GPU-{node:04d}{gpu:04d}",device="nvidia{gpu}",'
                          f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-{node}"')  # fmt: skip
                chunk += [f"{name}{{{labels}}} {value(scrape, gpu)} {ts}" for name, value in METRICS]
        if len(chunk) > 200_000:
            lines_total += _import(url, chunk)
            chunk = []
    lines_total += _import(url, chunk)
    requests.get(f"{url}/internal/force_flush", timeout=60).raise_for_status()
    return lines_total


def _import(url: str, lines: list[str]) -> int:
    if lines:
        requests.post(f"{url}/api/v1/import/prometheus", data="\n".join(lines).encode(), timeout=300).raise_for_status()
    return len(lines)


def setup_django(tmp: Path) -> None:
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp / 'bench.sqlite3'}")
    os.environ["AIRBOARD_VAR_DIR"] = str(tmp / "var")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scrape-seconds", type=int, default=15, help="dcgm-exporter scrape interval loaded")
    parser.add_argument("--step", type=int, default=30, help="AIRBOARD_PROMETHEUS_STEP_SECONDS")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="airboard-prom-bench-"))
    atexit.register(shutil.rmtree, tmp, True)
    url = start_engine(tmp)
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(minutes=65)
    start = start.replace(second=0)
    t0 = time.perf_counter()
    imported = load_hour(url, start, args.scrape_seconds)
    print(f"engine: {imported:,} samples imported ({NODES * GPUS} GPUs x {len(METRICS)} metrics, one hour every "
          f"{args.scrape_seconds} s) in {time.perf_counter() - t0:.1f} s")  # fmt: skip

    setup_django(tmp)
    from django.conf import settings
    from django.contrib.auth.models import Group

    from runs.choices import AcceleratorType, RunStatus
    from runs.collectors import prometheus
    from runs.collectors.prometheus_client import PrometheusSource
    from runs.models import Attempt, GpuSample, Node, Run
    from runs.telemetry.charts import gpu_series

    settings.AIRBOARD_PROMETHEUS_STEP_SECONDS = args.step
    team, _ = Group.objects.get_or_create(name="bench")
    end = start + timedelta(hours=1)
    run = Run.objects.create(team=team, external_id=f"prom-bench-{int(time.time())}", status=RunStatus.SUCCEEDED,
                             accelerator_type=AcceleratorType.H100_8, num_accelerators=64, gpus_per_node=8,
                             started_at=start, ended_at=end)  # fmt: skip
    attempt = Attempt.objects.create(run=run, number=1, status=run.status, started_at=start, ended_at=end)
    Node.objects.bulk_create(Node(attempt=attempt, index=i, host=f"node-{i}") for i in range(NODES))
    source = PrometheusSource(url)

    t0 = time.perf_counter()
    prometheus.collect_once(source=source)
    first = time.perf_counter() - t0
    stored = GpuSample.objects.filter(run=run).count()
    gpu_seconds = NODES * GPUS * 3600 / first
    print(f"collector, first pass: {first:.2f} s for the run's hour at step {args.step} s: {stored:,} samples stored "
          f"({stored / first:,.0f} samples/s, {gpu_seconds:,.0f} GPU-seconds of telemetry/s)")  # fmt: skip
    t0 = time.perf_counter()
    result = prometheus.collect_once(source=source)
    again = time.perf_counter() - t0
    print(f"collector, second pass: {again:.2f} s, {result.items} new sample(s)")

    query = f'last_over_time(DCGM_FI_DEV_GPU_UTIL{{Hostname=~"node-[0-7]"}}[{args.step}s])'
    timings = []
    for _ in range(5):
        t0 = time.perf_counter()
        matrix = source.query_range(query, int(start.timestamp()), int(end.timestamp()), args.step)
        timings.append(time.perf_counter() - t0)
    engine_ms = sorted(timings)[2] * 1000
    timings = []
    for _ in range(5):
        t0 = time.perf_counter()
        series = gpu_series(run, "utilization_gpu", start, end)
        timings.append(time.perf_counter() - t0)
    store_ms = sorted(timings)[2] * 1000
    print(f"chart read of the hour, 64 utilisation series (median of 5): engine query_range {engine_ms:.1f} ms "
          f"({len(matrix)} series), Airboard gpu_series {store_ms:.1f} ms ({len(series)} series): "
          f"ratio store/engine {store_ms / engine_ms:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
