"""Benchmark: the overview and the advice page with and without an hour of raw telemetry and 10 MB of logs.

    DATABASE_URL=postgres://... .venv/bin/python bench/overview_growth.py [--gpus 200] [--minutes 60]
        [--log-mb 10] [--repeat 9]

PostgreSQL only (as bench/pages.py). Point DATABASE_URL at a throwaway database: it is migrated,
and the teams "bench-overview-growth" and "bench-overview-growth-without" are rebuilt on every
run (the telemetry is relative to now).

1. Two teams, each with `--gpus` running GPUs as 8-GPU runs of one node each, written through
   `ingest.upsert_run` (the push API's write path), and a signed-in member each (not staff).
2. The "with" team's hour: 1 Hz samples of every GPU for the last `--minutes` minutes with the
   shapes of runs/demo_series at NVML's resolution (bench/storage.sample_rows), every batch of
   10,000 through the real ingest path: `ingest.record_batch` then `ingest_process.process_batch` (the
   worker: raw insert, minute and hour rollups, stall streaks). In its first run one GPU idles
   (the under-use flag), in its second two GPUs hang for the last 20 minutes (the stall panel).
3. `--log-mb` of training logs in 64 KB chunks (the launcher's size) through
   `ingest.append_log_chunk`, the write path of the log API, the log collector and the launcher.
4. The beat's compaction (`blocks.compact_samples`) folds every closed minute, as it would have
   while they arrived; then samples up to the present are added the same way, so the hour ends
   now (the stall panel only shows GPUs whose agent still reports) and its last ten minutes are
   rows, the rest blocks, as in production.
5. The "without" team's runs get a copy of the same minute and hour rollups, with no raw
   samples behind them, as bench/pages.py's runs have: what differs is the raw hour and the logs.
6. The overview (`/`) and the advice page (`/runs/advice/`) are fetched through Django's full
   stack in process by the "without" team's member and the "with" team's member in turn,
   request by request, after one warm-up round, so that whatever else runs on the machine
   weighs on both alike; the median of `--repeat` each. No VACUUM or ANALYZE after the build:
   no figure may depend on autovacuum having caught up.

Prints each page's median server time and query count without and with, the ratio, the target
(at most 300 ms and at most 1.2x) and "met" or "NOT met". `measure()` returns the same figures
for other benchmarks (bench/run_page.py) to call.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
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
from django.test import Client

from bench.pages import machine_speed
from bench.storage import sample_rows
from runs import ingest, ingest_process
from runs.choices import BatchKind, RunSource, RunStatus
from runs.models import GpuHour, GpuMinute, GpuSample, GpuSampleBlock, LogChunk, Node, Run
from runs.telemetry import blocks, gpu_life, partitions, utilization

TARGET_MS = 300.0
TARGET_RATIO = 1.2
TEAM = "bench-overview-growth"
GPUS_PER_NODE = 8
BATCH = 10_000
LOG_CHUNK_BYTES = 64 * 1024
PAGES = ("/", "/runs/advice/")
# Raw tables emptied by SQL before the team's runs are deleted: Django's cascade would load every sample.
TELEMETRY_TABLES = ("runs_gpusample", "runs_gpusampleblock", "runs_gpuminute", "runs_gpuhour", "runs_gpustreak")


@dataclass(frozen=True)
class PageFigures:
    """One page's median server time and query count, without and with the raw hour and logs."""

    url: str
    without_ms: float
    with_ms: float
    without_queries: int
    with_queries: int

    @property
    def ratio(self) -> float:
        return self.with_ms / self.without_ms

    @property
    def met(self) -> bool:
        return max(self.without_ms, self.with_ms) <= TARGET_MS and self.ratio <= TARGET_RATIO


@dataclass(frozen=True)
class Growth:
    """What `measure` built and what it measured."""

    gpus: int
    samples: int
    log_bytes: int
    log_chunks: int
    blocks: int
    hot_rows: int
    ingest_s: float
    pages: tuple[PageFigures, ...]

    @property
    def met(self) -> bool:
        return all(page.met for page in self.pages)


def _clear(team: Group) -> None:
    ids = list(Run.objects.filter(team=team).values_list("pk", flat=True))
    if ids:
        with connection.cursor() as cursor:
            for table in TELEMETRY_TABLES:
                cursor.execute(f"DELETE FROM {table} WHERE run_id = ANY(%s)", [ids])  # noqa: S608 (our constants)
        LogChunk.objects.filter(node__attempt__run_id__in=ids).delete()
        Run.objects.filter(pk__in=ids).delete()


def _runs(team: Group, gpus: int, now: datetime, prefix: str) -> list[Run]:
    """`gpus` running GPUs as one-node 8-GPU runs, through the push API's write path."""
    started = now - timedelta(hours=2)
    runs = []
    for i in range(gpus // GPUS_PER_NODE):
        data = {
            "source": RunSource.LOCAL, "external_id": f"{prefix}-{i}", "status": RunStatus.RUNNING,
            "experiment_name": f"/Workspace/Users/u{i % 7}/llama-ft", "creator": f"u{i % 7}@example.com",
            "accelerator_type": "GPU_8xH100", "num_accelerators": 8, "region": "us-west-2",
            "home_region": "us-west-2", "submitted_at": started - timedelta(minutes=3) + timedelta(seconds=i),
            "started_at": started,
            "attempts": [{"number": 1, "status": RunStatus.RUNNING, "started_at": started,
                          "nodes": [{"index": 0, "host": f"10.1.0.{i}", "status": RunStatus.RUNNING}]}],
        }  # fmt: skip
        runs.append(ingest.upsert_run(team, data).run)
    return runs


def _samples(team: Group, runs: list[Run], start: datetime, seconds: int, rng: random.Random) -> tuple[int, float]:
    """An hour of 1 Hz samples of every GPU through record_batch + process_batch; (samples, seconds taken)."""
    stored = 0
    began = time.perf_counter()
    hang_from = (start + timedelta(seconds=seconds) - timedelta(minutes=20)).isoformat()
    for i, run in enumerate(runs):
        node = Node.objects.get(attempt__run=run)
        rows = sample_rows(run, node, start, seconds, rng)
        for row in rows:
            # The newest runs, first in Active now.
            if i == len(runs) - 1 and row[2] == 3:  # one idle GPU: a rank with nothing to do
                row[4], row[13], row[14] = float(rng.randrange(0, 4)), 0.5, 0.1
            elif i == len(runs) - 2 and row[2] in (0, 1) and row[3] >= hang_from:  # a hung collective
                row[4], row[13] = 100.0, 0.8
        for at in range(0, len(rows), BATCH):
            batch, _ = ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows[at : at + BATCH], "nvml")
            ingest_process.process_batch(batch.pk)
        stored += len(rows)
    return stored, time.perf_counter() - began


LOG_LINES = (
    "[rank{r}]:[2026-12-03 07:{m:02d}:{s:02d}] step {step}/120000 loss={loss:.4f} lr=3.0e-04 grad_norm={g:.3f} "
    "tokens/s={tps}\n",
    "[rank{r}]:[2026-12-03 07:{m:02d}:{s:02d}] dataloader: worker {w} prefetched 64 batches in {ms} ms\n",
    "INFO:torch.distributed.elastic.agent.server.api:[default] rank {r} heartbeat ok, step {step}\n",
)
CHECKPOINT_LINE = "[rank0]: Saving checkpoint to /Volumes/ml/ckpt/llama-ft/step_{step} (torch.save)\n"


def _log_text(rng: random.Random, size: int, step: int) -> str:
    parts, length = [], 0
    while length < size:
        step += 1
        if step % 2000 == 0:
            line = CHECKPOINT_LINE.format(step=step)
        else:
            line = rng.choice(LOG_LINES).format(
                r=rng.randrange(8), m=rng.randrange(60), s=rng.randrange(60), step=step, loss=rng.uniform(1.5, 3.0),
                g=rng.uniform(0.2, 2.0), tps=rng.randrange(40_000, 52_000), w=rng.randrange(8), ms=rng.randrange(2, 90),
            )  # fmt: skip
        parts.append(line)
        length += len(line)
    return "".join(parts)


def _logs(runs: list[Run], total: int, rng: random.Random) -> tuple[int, int]:
    """`total` bytes of logs through append_log_chunk, spread over the runs; (bytes, chunks)."""
    written = chunks = 0
    seq: dict[int, int] = {}
    while written < total:
        run = runs[chunks % len(runs)]
        text = _log_text(rng, min(LOG_CHUNK_BYTES, total - written), 1000 * chunks)
        ingest.append_log_chunk(run, 1, 0, seq.setdefault(run.pk, 0), text)
        seq[run.pk] += 1
        written += len(text.encode())
        chunks += 1
    return written, chunks


def _copy_rollups(source: list[Run], target: list[Run]) -> int:
    """`source`'s minute and hour rollups copied to `target`'s runs (same order): rollups with no raw samples."""
    nodes = {
        Node.objects.get(attempt__run=a).pk: (b.pk, Node.objects.get(attempt__run=b).pk)
        for a, b in zip(source, target, strict=True)
    }
    copied = 0
    for model in (GpuMinute, GpuHour):
        rows = []
        for values in model.objects.filter(run__in=source).values():
            values.pop("id")
            values["run_id"], values["node_id"] = nodes[values["node_id"]]
            rows.append(model(**values))
        model.objects.bulk_create(rows, batch_size=2000)
        copied += len(rows)
    utilization.rebuild([run.pk for run in target])  # as for any rollups written outside refresh_minutes
    gpu_life.rebuild([run.pk for run in target])  # and hours outside refresh_hours
    return copied


def _top_up(team: Group, runs: list[Run], end: datetime, rng: random.Random) -> tuple[int, datetime]:
    """Samples from `end` up to now, compacted as the beat would, until the samples end now; (samples, new end)."""
    added = 0
    for _ in range(5):
        now = datetime.now(UTC).replace(microsecond=0)
        if (now - end).total_seconds() < 15:
            break
        added += _samples(team, runs, end, int((now - end).total_seconds()), rng)[0]
        end = now
        while blocks.compact_samples(max_minutes=10_000).minutes:
            pass
    return added, end


def _time_one(client: Client, url: str) -> tuple[float, int, int]:
    """(ms, queries, status) of one fetch through Django's full stack."""
    reset_queries()
    began = time.perf_counter()
    response = client.get(url)
    return (time.perf_counter() - began) * 1000, len(connection.queries), response.status_code


def _client(name: str, team: Group) -> Client:
    user, _ = User.objects.get_or_create(username=name)
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    return client


def measure(gpus: int = 200, minutes: int = 60, log_mb: float = 10.0, repeat: int = 9, say=print) -> Growth:
    """Build the workspace of the module docstring and time PAGES without and with the hour and logs.

    "without" is a second team with as many running runs and GPUs and the same minute and hour
    rollups, but no raw samples and no logs; its
    member and the "with" team's member fetch each page in turn, request by request, so that
    what else runs on the machine weighs on both alike (the median of `repeat` each).
    """
    settings.DEBUG = True  # connection.queries counts the queries
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    for table in partitions.ALL_TABLES:
        partitions.ensure_partitions(now=now, table=table)
    bare, _ = Group.objects.get_or_create(name=f"{TEAM}-without")
    team, _ = Group.objects.get_or_create(name=TEAM)
    for group in (bare, team):
        _clear(group)
    rng = random.Random(30)
    bare_runs = _runs(bare, gpus, now, "bare")
    runs = _runs(team, gpus, now, "growth")
    clients = {"without": _client(f"{TEAM}-without", bare), "with": _client(TEAM, team)}
    say(f"each team: {len(runs)} running runs x {GPUS_PER_NODE} GPUs = {len(runs) * GPUS_PER_NODE} GPUs")

    seconds = minutes * 60
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=seconds)
    samples, ingest_s = _samples(team, runs, start, seconds, rng)
    say(f"  {samples:,} raw samples through record_batch + process_batch in {ingest_s:.0f} s")
    began = time.perf_counter()
    log_bytes, log_chunks = _logs(runs, int(log_mb * 1_000_000), rng)
    say(f"  {log_bytes / 1e6:.1f} MB of logs in {log_chunks} chunks through append_log_chunk in "
        f"{time.perf_counter() - began:.0f} s")  # fmt: skip
    began = time.perf_counter()
    while blocks.compact_samples(max_minutes=10_000).minutes:
        pass
    say(f"  compacted in {time.perf_counter() - began:.0f} s")
    added, end = _top_up(team, runs, start + timedelta(seconds=seconds), rng)
    samples += added
    say(f"  {added:,} samples more (compacted the same way), up to {end:%H:%M:%S} UTC: the samples end now")
    copied = _copy_rollups(runs, bare_runs)
    say(f"  {copied:,} minute and hour rollups copied to the 'without' team's runs (no raw samples behind them)")
    block_count = GpuSampleBlock.objects.filter(run__team=team).count()
    hot = GpuSample.objects.filter(run__team=team).count()
    timed: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for i in range(repeat + 1):  # the first round warms up
        for url in PAGES:
            for side, client in clients.items():
                figures = _time_one(client, url)
                if i:
                    timed.setdefault((side, url), []).append(figures)
    overview = clients["with"].get("/").content.decode()
    stalls = "yes" if 'id="stalls"' in overview else "NO"
    say(f"  the 'with' overview shows the stall panel: {stalls}; under-use badges: {overview.count('data-underuse')}")
    pages = []
    for url in PAGES:
        without, with_ = timed[("without", url)], timed[("with", url)]
        assert {f[2] for f in without + with_} == {200}, (url, without, with_)
        pages.append(
            PageFigures(
                url, statistics.median(f[0] for f in without), statistics.median(f[0] for f in with_),
                without[-1][1], with_[-1][1],
            )
        )  # fmt: skip
    return Growth(len(runs) * GPUS_PER_NODE, samples, log_bytes, log_chunks, block_count, hot, ingest_s, tuple(pages))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--log-mb", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench/overview_growth.py needs DATABASE_URL=postgres://...")
    print(f"load average {os.getloadavg()}")
    print(machine_speed())
    report(measure(args.gpus, args.minutes, args.log_mb, args.repeat), args.minutes, args.repeat)


def report(growth: Growth, minutes: int, repeat: int) -> None:
    """Print what `measure` found: the workspace, then each page without and with, and the verdict."""
    print(
        f"\nwith: {growth.gpus} running GPUs, {growth.samples:,} raw 1 Hz samples ({minutes} min + top-up) "
        f"({growth.blocks:,} blocks, {growth.hot_rows:,} hot rows), {growth.log_bytes / 1e6:.1f} MB of logs"
    )
    print(
        f"without: {growth.gpus} running GPUs, the same rollups, no raw samples, no logs (another team, timed in turn)"
    )
    print(f"target: at most {TARGET_MS:.0f} ms and at most {TARGET_RATIO}x with/without (median of {repeat})")
    print(f"{'page':16s} {'without':>10s} {'with':>10s} {'ratio':>6s} {'queries':>9s}  verdict")
    for page in growth.pages:
        print(
            f"{page.url:16s} {page.without_ms:7.1f} ms {page.with_ms:7.1f} ms {page.ratio:6.2f} "
            f"{page.without_queries:4d}/{page.with_queries:<4d}  {'met' if page.met else 'NOT met'}"
        )
    print(f"\n{'met' if growth.met else 'NOT met'}; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
