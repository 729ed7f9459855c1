"""Benchmark: the run page of a live 8-node x 8-GPU run against a 1-GPU run beside it, server and Chromium.

    DATABASE_URL=postgres://... .venv/bin/python bench/run_page.py [--quick] [--rebuild] [--repeat 5]
        [--nodes 8] [--gpus-per-node 8] [--days 13] [--raw-minutes 60] [--no-browser]

PostgreSQL only (as bench/pages.py). Point DATABASE_URL at a throwaway database: it is migrated
and filled once (team "bench-run-page"; `--rebuild` starts again). `--quick` is a small sanity
mode (2 nodes, 2 days, 20 raw minutes).

The workspace, per run (the 64-GPU one and a 1-GPU one, both running):
  1. `--days` days of minute rollups (and their hour rollups) before the last `--raw-minutes`,
     written with COPY, as bench/pages.py does (13 days x 64 GPUs at 1 Hz is 72 billion samples:
     no ingest path builds that here). One GPU of each run spikes to 100 % for one minute.
  2. `--raw-minutes` of 1 Hz samples of every GPU up to now through the real ingest path:
     `ingest.record_batch` (what the API stores) and `ingest_process.process_batch` (the worker:
     store_sample_rows, minute and hour rollups) in batches of 10,000, then the beat's
     compaction (`blocks.compact_samples`) until only the last
     AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES stay hot rows. No VACUUM after it: the reads must
     not depend on autovacuum having caught up with compaction (ANALYZE only, for the plans).
  3. A log of 2,000 lines on every node (the page leaves it out of its frame: logs.js fetches
     it once the charts above the fold are drawn).

Printed, for every range (15m, 1h, 6h, 24h, all), then for a node switch, a log switch and a zoom:
server time (median of --repeat, Django's full stack in process, a signed-in team member; the
64-GPU and the 1-GPU run's requests taken in turn, so their ratio survives passing load), bytes
sent, query count, and in Chromium (Playwright, /usr/bin/chromium, against a threaded server on
this database) the time until every chart above the fold is drawn, each against its target.
The overview's part (bench/overview_growth.py) then adds other teams' running GPUs, and the 15m
range (the one that reads hot raw rows) is measured again beside their hot rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
# Playwright's sync API runs an event loop in this thread; the ORM calls here are synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

import django

django.setup()

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection, reset_queries
from django.test import Client

from runs import ingest, ingest_process
from runs.choices import AcceleratorType, BatchKind, RunStatus
from runs.models import Attempt, GpuHour, GpuMinute, GpuSample, GpuSampleBlock, LogChunk, Node, Run
from runs.telemetry import blocks, envelope_store, gpu_life, utilization

TEAM = "bench-run-page"
RANGES = ("15m", "1h", "6h", "24h", "all")
SERVER_MS = 300.0
FIRST_CHART_BYTES = 300_000
DRAWN_MS = 1500.0
SWITCH_MS = 300.0
RATIO = 2.0
PANEL_WIDTH = 1100  # what charts.js sends for a panel of the 1400 px wide window below
ABOVE_FOLD = "utilization_gpu,memory_used_bytes"
BELOW_FOLD = "sm_active,tensor_active,power_watts,temperature_c,sm_clock_mhz,utilization_memory"
BATCH = 10_000
CHROMIUM = os.environ.get("AIRBOARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip
ROLLUP_COLUMNS = (
    "samples, memory_total_bytes, power_limit_watts, utilization_gpu_min, utilization_gpu_avg, utilization_gpu_max, "
    "memory_used_bytes_min, memory_used_bytes_avg, memory_used_bytes_max, power_watts_min, power_watts_avg, "
    "power_watts_max, temperature_c_min, temperature_c_avg, temperature_c_max, sm_clock_mhz_min, sm_clock_mhz_avg, "
    "sm_clock_mhz_max, sm_active_min, sm_active_avg, sm_active_max, tensor_active_min, tensor_active_avg, "
    "tensor_active_max, utilization_memory_min, utilization_memory_avg, utilization_memory_max"
)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _run(team: Group, name: str, nodes: int, gpus: int, start: datetime) -> tuple[Run, list[Node]]:
    run = Run.objects.create(
        team=team, external_id=name, status=RunStatus.RUNNING, accelerator_type=AcceleratorType.H100_8,
        num_accelerators=nodes * gpus, gpus_per_node=gpus, region="us-west-2", home_region="us-west-2",
        experiment_name="/Workspace/Users/bench/llama-pretrain", creator="bench@example.com",
        submitted_at=start, started_at=start,
    )  # fmt: skip
    attempt = Attempt.objects.create(run=run, number=1, status=RunStatus.RUNNING, started_at=start)
    made = [Node.objects.create(attempt=attempt, index=i, host=f"10.1.{run.pk % 250}.{i}") for i in range(nodes)]
    return run, made


def _util(gpu: int, i: int) -> float:
    return 55.0 + (gpu * 3 + i) % 30


def _rollups(run: Run, nodes: list[Node], gpus: int, start: datetime, minutes: int, spike: tuple[int, int, int]) -> int:
    """Minute rows by COPY for `minutes` from `start`, then their hours.

    `spike` is (node index, gpu, minute): that GPU-minute peaks at 100 %."""
    rows = 0
    with connection.cursor() as cursor:
        for model, column, step, count in (
            (GpuMinute, "minute", timedelta(minutes=1), minutes),
            (GpuHour, "hour", timedelta(hours=1), minutes // 60),
        ):
            per = 60 if model is GpuMinute else 3600
            with cursor.cursor.copy(
                f"COPY {model._meta.db_table} (run_id, node_id, gpu_index, {column}, {ROLLUP_COLUMNS}) FROM STDIN"
            ) as copy:
                for node in nodes:
                    for gpu in range(gpus):
                        for i in range(count):
                            at = start + i * step
                            util = _util(gpu, i)
                            peak = util + 10
                            if model is GpuMinute and (node.index, gpu, i) == spike:
                                peak = 100.0
                            if model is GpuHour and (node.index, gpu) == spike[:2] and i == spike[2] // 60:
                                peak = 100.0
                            copy.write_row((
                                run.pk, node.pk, gpu, at, per, 85_520_809_984, 700.0, util - 10, util, peak,
                                6.0e10, 6.5e10, 7.0e10, 600.0, 650.0, 690.0, 60.0, 66.0, 70.0,
                                1900.0, 1950.0, 1980.0, util - 20, util - 15, util - 10, 30.0, 35.0, 40.0,
                                40.0, 45.0, 50.0,
                            ))  # fmt: skip
                            rows += 1
    return rows


def _ingest(team: Group, run: Run, nodes: list[Node], gpus: int, start: datetime, seconds: int) -> int:
    """1 Hz samples of every GPU through record_batch + process_batch, 10,000 a batch."""
    rows, stored = [], 0
    for s in range(seconds):
        ts = (start + timedelta(seconds=s)).isoformat()
        for node in nodes:
            for gpu in range(gpus):
                util = 100.0 if (node.index, gpu, s) == (len(nodes) - 1, gpus - 1, seconds // 3) else _util(gpu, s)
                rows.append([run.pk, node.pk, gpu, ts, util, 35.0, 65_000_000_000 + s, 85_520_809_984, 650.0, 700.0,
                             66.0, 1950.0, 2619.0, util - 15, util - 30, 0, 0, 0, None, None, None])  # fmt: skip
        if len(rows) >= BATCH or s == seconds - 1:
            batch, _ = ingest.record_batch(team, BatchKind.GPU_SAMPLES, rows, "nvml")
            stored += ingest_process.process_batch(batch.pk).inserted
            rows = []
    return stored


def build(args: argparse.Namespace, now: datetime) -> Group:
    team = Group.objects.create(name=TEAM)
    raw_start = (now - timedelta(minutes=args.raw_minutes)).replace(second=0, microsecond=0)
    start = raw_start - timedelta(days=args.days)
    minutes = args.days * 1440
    for name, nodes, gpus in (("bench-64", args.nodes, args.gpus_per_node), ("bench-1", 1, 1)):
        began = time.perf_counter()
        run, made = _run(team, name, nodes, gpus, start)
        spike = (nodes // 2, gpus // 2, minutes // 2)
        count = _rollups(run, made, gpus, start, minutes, spike)
        print(f"  {name}: {count:,} minute and hour rollups in {time.perf_counter() - began:.0f} s", flush=True)
        began = time.perf_counter()
        seconds = int((now - raw_start).total_seconds())
        stored = _ingest(team, run, made, gpus, raw_start, seconds)
        print(f"  {name}: {stored:,} samples ingested in {time.perf_counter() - began:.0f} s", flush=True)
        for node in made:
            text = "".join(f"step {i} loss {2.5 - i / 1e4:.4f} node {node.index}\n" for i in range(2000))
            LogChunk.objects.create(node=node, seq=0, text=text, line_count=2000)
    utilization.rebuild()  # the COPYed minutes into the runs' summaries
    envelope_store.rebuild(Run.objects.filter(team=team).values_list("pk", flat=True))  # and into the runs' envelopes
    gpu_life.rebuild(Run.objects.filter(team=team).values_list("pk", flat=True))  # and the hours into their GPUs' sums
    began = time.perf_counter()
    folded = 0
    while True:
        result = blocks.compact_samples(now=datetime.now(UTC))
        folded += result.samples
        if not result.minutes:
            break
    print(f"  compacted {folded:,} samples in {time.perf_counter() - began:.0f} s (no VACUUM after)", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return team


def _get(client: Client, url: str) -> tuple[float, int, int]:
    """(ms, bytes, queries) of one GET."""
    reset_queries()
    began = time.perf_counter()
    response = client.get(url)
    body = response.content
    elapsed = (time.perf_counter() - began) * 1000
    assert response.status_code == 200, (url, response.status_code)
    return elapsed, len(body), len(connection.queries)


def timed(client: Client, url: str, repeat: int) -> tuple[float, int, int]:
    """(median ms, bytes, queries) of `repeat` GETs after one warm-up."""
    return timed_in_turn(client, [url], repeat)[0]


def timed_in_turn(client: Client, urls: list[str], repeat: int) -> list[tuple[float, int, int]]:
    """`timed` of each of `urls`, their GETs taken in turn (a, b, a, b...): a ratio of two of them
    survives load that comes and goes (autovacuum after the build, other work), which a run of
    one then a run of the other does not."""
    times: list[list[float]] = [[] for _ in urls]
    last: list[tuple[float, int, int]] = [(0.0, 0, 0)] * len(urls)
    for i in range(repeat + 1):
        for at, url in enumerate(urls):
            last[at] = _get(client, url)
            if i:
                times[at].append(last[at][0])
    return [(statistics.median(times[at]), size, queries) for at, (_, size, queries) in enumerate(last)]


def line(label: str, ms: float, size: int, queries: int, target_ms: float = SERVER_MS) -> str:
    return f"  {label:34s} {ms:7.1f} ms {size / 1000:8.1f} KB {queries:3d} queries  server {verdict(ms <= target_ms)}"


def server_figures(
    client: Client, big: Run, small: Run, repeat: int, ranges: tuple[str, ...] = RANGES
) -> dict[str, float]:
    out: dict[str, float] = {}
    for picked in ranges:
        print(f"range {picked}")
        totals, panels = {}, {}
        # Each request of the two runs taken in turn (`timed_in_turn`).
        urls = {}
        for run in (big, small):
            data = f"/runs/{run.pk}/telemetry.json?range={picked}&width={PANEL_WIDTH}&fields="
            urls[run.pk] = [f"/runs/{run.pk}/?range={picked}", data + ABOVE_FOLD, data + BELOW_FOLD]
        figures = {}
        for at in range(3):
            big_one, small_one = timed_in_turn(client, [urls[big.pk][at], urls[small.pk][at]], repeat)
            figures.setdefault(big.pk, []).append(big_one)
            figures.setdefault(small.pk, []).append(small_one)
        for run, label in ((big, "64 GPUs"), (small, "1 GPU")):
            frame, first, rest = figures[run.pk]
            print(line(f"{label}: page frame", *frame))
            print(line(f"{label}: panels above the fold", *first))
            print(line(f"{label}: panels below the fold", *rest))
            before = frame[1] + first[1]
            if run is big:
                ok = verdict(before <= FIRST_CHART_BYTES)
                print(f"  {label}: {before / 1000:.1f} KB before the first chart (page + its data)"
                      f"  target <= {FIRST_CHART_BYTES / 1000:.0f} KB {ok}")  # fmt: skip
            totals[label] = frame[0] + first[0]
            panels[label] = first[0]
        ratio = totals["64 GPUs"] / totals["1 GPU"]
        out[picked] = ratio
        # The panels' data alone: what the frame costs besides (stall banner, costs, log) is the same for every range.
        alone = panels["64 GPUs"] / panels["1 GPU"]
        print(f"  64 GPUs / 1 GPU server time of the panels above the fold: {panels['64 GPUs']:.1f} /"
              f" {panels['1 GPU']:.1f} ms = {alone:.2f}x  target <= {RATIO:.0f}x"
              f" {verdict(alone <= RATIO)}")  # fmt: skip
        print(f"  64 GPUs / 1 GPU server time to the first chart: {totals['64 GPUs']:.1f} / {totals['1 GPU']:.1f} ms"
              f" = {ratio:.2f}x  target <= {RATIO:.0f}x {verdict(ratio <= RATIO)}")  # fmt: skip
    return out


def _minus(at: str, minutes: int) -> str:
    """The time `minutes` before `at` ("YYYY-MM-DD HH:MM:SS"), for a window ending at `at`."""
    return (datetime.strptime(at, "%Y-%m-%d %H:%M:%S") - timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")


def switch_figures(client: Client, big: Run, repeat: int, zoom: tuple[str, str]) -> None:
    print("switches (64-GPU run, range 1h)")
    base = f"/runs/{big.pk}/telemetry.json?range=1h&width={PANEL_WIDTH}&fields={ABOVE_FOLD}"
    last_node = Node.objects.filter(attempt__run=big).order_by("-index").first().index
    cases = [
        ("node switch (panels in view)", f"{base}&gpu_node={last_node}&signals=1"),
        ("log switch (log viewer)", f"/runs/{big.pk}/log/view/?attempt=1&node={last_node}"),
        ("zoom to 20 min (raw samples)", f"/runs/{big.pk}/telemetry.json?width={PANEL_WIDTH}&fields={ABOVE_FOLD}"
                                         f"&from={zoom[0]}&to={zoom[1]}"),
        ("each GPU (64 traces)", f"{base}&view=gpus"),
        ("each GPU, 30 min (64 traces)", f"/runs/{big.pk}/telemetry.json?width={PANEL_WIDTH}&fields={ABOVE_FOLD}"
                                         f"&view=gpus&from={_minus(zoom[1], 30)}&to={zoom[1]}"),
        ("each GPU, 3 min (raw samples)", f"/runs/{big.pk}/telemetry.json?width={PANEL_WIDTH}&fields={ABOVE_FOLD}"
                                          f"&view=gpus&from={_minus(zoom[1], 3)}&to={zoom[1]}"),
    ]  # fmt: skip
    for label, url in cases:
        print(line(label, *timed(client, url, repeat), target_ms=SWITCH_MS))


# --- Chromium ---------------------------------------------------------------------------

FIRST_PANELS = "['fig-utilization', 'fig-memory']"
DRAWN = f"() => {FIRST_PANELS}.every(id => document.querySelector(`[data-figure=${{id}}]`).dataset.drawnAt)"
DRAWN_AT = f"() => Math.max(...{FIRST_PANELS}.map(id => Number(document.querySelector(`[data-figure=${{id}}]`).dataset.drawnAt)))"  # noqa: E501
BYTES_BY = """(t) => {
  const nav = performance.getEntriesByType('navigation')[0];
  return nav.transferSize + performance.getEntriesByType('resource')
    .filter(r => r.startTime <= t).reduce((n, r) => n + r.transferSize, 0); }"""


def serve() -> str:
    """Django's threaded WSGI server on 127.0.0.1 (WhiteNoise serves the static files), in a daemon thread."""
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet)
    server.set_app(get_wsgi_application())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def browser_figures(user: User, big: Run, small: Run, zoom: tuple[str, str]) -> None:
    from playwright.sync_api import sync_playwright

    base = serve()
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(30_000)
        context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": base}])
        page = context.new_page()
        # A first visit fills the cache with the page's static files (plotly.js is 4.8 MB unzipped).
        page.goto(f"{base}/runs/{small.pk}/#gpus")
        page.wait_for_function(DRAWN)
        print("Chromium (static files cached by a first visit; bytes = network transfer until the chart is drawn)")
        for picked in RANGES:
            for run, label in ((big, "64 GPUs"), (small, "1 GPU")):
                page.goto(f"{base}/runs/{run.pk}/?range={picked}#gpus")
                page.wait_for_function(DRAWN)
                drawn = page.evaluate(DRAWN_AT)
                sent = page.evaluate(BYTES_BY, drawn)
                print(f"  {picked:4s} {label:8s} charts above the fold drawn after {drawn:6.0f} ms"
                      f" target <= {DRAWN_MS:.0f} ms {verdict(drawn <= DRAWN_MS)};"
                      f" {sent / 1000:6.1f} KB before them, target <= {FIRST_CHART_BYTES / 1000:.0f} KB"
                      f" {verdict(sent <= FIRST_CHART_BYTES)}")  # fmt: skip
        page.goto(f"{base}/runs/{big.pk}/?range=1h#gpus")
        page.wait_for_function(DRAWN)
        # The log viewer comes after the first charts (logs.js): wait for it before switching it.
        page.wait_for_function("() => Number(document.getElementById('log-body').dataset.swaps || 0) >= 1")
        page.evaluate("window.__sameDocument = true")
        last_node = Node.objects.filter(attempt__run=big).order_by("-index").first().index

        def after(action: str, done: str) -> float:
            began = page.evaluate(f"() => {{ window.__t0 = performance.now(); {action}; return window.__t0; }}")
            page.wait_for_function(done)
            return page.evaluate("performance.now()") - began

        redrawn = f"() => {FIRST_PANELS}.every(id => Number(document.querySelector(`[data-figure=${{id}}]`).dataset.drawnAt) > window.__t0)"  # noqa: E501
        node_ms = after(
            f"const s = document.getElementById('gpu-node'); s.value = '{last_node}';"
            " s.dispatchEvent(new Event('change'))",
            redrawn,
        )
        log_ms = after(
            f"const s = document.querySelector('#log-body select[name=node]'); s.value = '{last_node}';"
            " window.__swaps = Number(document.getElementById('log-body').dataset.swaps || 0);"
            " s.dispatchEvent(new Event('change'))",
            "() => Number(document.getElementById('log-body').dataset.swaps || 0) > window.__swaps",
        )
        zoom_ms = after(
            f"Plotly.relayout(document.querySelector('[data-figure=fig-utilization]'),"
            f" {{'xaxis.range[0]': '{zoom[0]}', 'xaxis.range[1]': '{zoom[1]}'}})",
            redrawn,
        )
        same = page.evaluate("window.__sameDocument === true")
        for label, ms in (("node switch", node_ms), ("log switch", log_ms), ("zoom (every panel re-read)", zoom_ms)):
            print(f"  {label:28s} {ms:6.0f} ms until redrawn  target <= {SWITCH_MS:.0f} ms {verdict(ms <= SWITCH_MS)};"
                  f" no page load: {verdict(same)}")  # fmt: skip
        browser.close()


def overview_figures() -> None:
    """The overview's and the advice page's server time with and without an hour of raw samples
    of 200 running GPUs and 10 MB of logs: bench/overview_growth.py's workspace and measure."""
    from bench import overview_growth

    print("\noverview and advice page, with and without an hour of raw samples and 10 MB of logs")
    overview_growth.report(overview_growth.measure(), minutes=60, repeat=9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=int, default=13)
    parser.add_argument("--raw-minutes", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 nodes, 2 days, 20 raw minutes: a sanity run")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument(
        "--no-overview", action="store_true", help="Leave out the overview with and without raw samples (~7 min)."
    )
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.days, args.raw_minutes, args.repeat = 2, 2, 20, 3
    if connection.vendor != "postgresql":
        sys.exit("bench/run_page.py needs DATABASE_URL=postgres://...")
    settings.DEBUG = True  # connection.queries counts the queries
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver", "127.0.0.1"]
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
    user, _ = User.objects.get_or_create(username="bench-run-page")
    user.groups.add(team)
    client = Client()
    client.force_login(user)
    big, small = Run.objects.get(team=team, external_id="bench-64"), Run.objects.get(team=team, external_id="bench-1")
    gpus = GpuMinute.objects.filter(run=big).values("node_id", "gpu_index").distinct().count()
    hot = GpuSample.objects.filter(run=big).count()
    cold = sum(GpuSampleBlock.objects.filter(run=big).values_list("samples", flat=True))
    print(f"64-GPU run: {gpus} GPUs, {GpuMinute.objects.filter(run=big).count():,} minute rollups,"
          f" {cold:,} compacted and {hot:,} hot raw samples; load average {os.getloadavg()}")  # fmt: skip
    last = GpuMinute.objects.filter(run=big).order_by("-run_id", "-minute").values_list("minute", flat=True).first()
    zoom_end = last - timedelta(minutes=15)
    zoom = ((zoom_end - timedelta(minutes=20)).strftime("%Y-%m-%d %H:%M:%S"), zoom_end.strftime("%Y-%m-%d %H:%M:%S"))
    server_figures(client, big, small, args.repeat)
    switch_figures(client, big, args.repeat, zoom)
    if not args.no_browser:
        browser_figures(user, big, small, zoom)
    if not args.no_overview:
        overview_figures()
        # The live edge again, now that other teams' running GPUs write the same minutes (their
        # hot rows beside the run's, the planner's statistics as the last ANALYZE left them).
        beside = GpuSample.objects.exclude(run__team=team).count()
        print(f"\nthe raw-sample range again, beside {beside:,} hot rows of other teams' running GPUs")
        server_figures(client, big, small, args.repeat, ranges=("15m",))
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
