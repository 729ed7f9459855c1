"""The live demo: a demo source that keeps a seeded demo workspace moving, on beat each minute.

A seeded workspace is a snapshot: without this its running runs stop at seed time, so five
minutes after `make run` every chart ends in the past. `tick()` plays the part of the fleet's
sources, through the same paths they use:

1. For each running demo run, 1 Hz GPU samples of every GPU of every node since its last
   sample or seeded minute (at most `CATCH_UP` back: a demo stopped overnight shows the night
   as a gap, as a real agent would), recorded and queued as the telemetry API does
   (`record_batch` + `enqueue_batch`, the worker writes them); MLflow metric points the same
   way; and the progress lines of rank 0's log through `append_log_chunk`, as the log
   collector does. Each run continues its own series from where the seed left them: the
   same training curve (`run_curve`), activity (`Activity.for_attempt`) and node skew
   (`node_skew`), with GPUs that start warm.
2. Some runs end each tick (about `MEAN_REMAINING_MINUTES` left on average): a quarter of
   them fail with a real failure's log tail and message, the rest succeed, as does a run
   that has trained all its steps; the run source's `upsert_run` records the end (so a
   failed run is classified as a collected one is).
3. While fewer than `AIRBOARD_DEMO_LIVE_RUNNING` demo runs run, new ones start, copied from
   a finished demo run's team, person, experiment and shape.

Only a demo workspace moves: `tick()` does nothing unless demo runs exist (`Run.is_demo`,
which only `seed_demo` sets, and which `make run` loads only on the embedded default or with
--demo) and `AIRBOARD_DEMO_LIVE` is on. Real runs are never touched.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from dashboard.demo.clusters import RUN_PREFIX as ADVICE_RUN_PREFIX
from dashboard.demo.log_context import FAILURES, LogContext, checkpoint_dir
from dashboard.demo.logs import closing_lines, progress_lines
from dashboard.demo.seed import EXPERIMENT_BY_SLUG, EXPERIMENTS, rng_for, run_curve
from dashboard.demo.series import PROFILES, Activity, TrainingCurve, metric_points, node_skew, raw_samples
from runs.choices import BatchKind, RunOrigin, RunSource, RunStatus, TelemetrySource
from runs.ingest import SAMPLE_VALUE_COLUMNS, append_log_chunk, enqueue_batch, record_batch, upsert_run
from runs.models import Attempt, GpuMinute, LogChunk, MetricPoint, Node, Run
from runs.telemetry import blocks

logger = logging.getLogger(__name__)

# Telemetry is never backfilled further than this: a longer pause is a gap, as for an agent.
CATCH_UP = timedelta(minutes=3)
MEAN_REMAINING_MINUTES = 45.0
FAIL_SHARE = 0.25
# Failure kinds the live demo ends runs with, and the ones that need more than one node.
LIVE_FAILURES = ("cuda_oom", "nan_loss", "nccl_timeout", "host_oom")
MULTI_NODE = ("nccl_timeout",)
SEED = "live"


@dataclass
class TickResult:
    """What one tick pushed and changed."""

    runs: int = 0
    samples: int = 0
    metric_points: int = 0
    log_chunks: int = 0
    finished: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    started: list[str] = dataclasses.field(default_factory=list)


def is_live() -> bool:
    """A demo workspace with the live demo on: demo runs exist and AIRBOARD_DEMO_LIVE is true."""
    return bool(settings.AIRBOARD_DEMO_LIVE) and Run.objects.filter(is_demo=True).exists()


def tick(now: datetime | None = None, rng: random.Random | None = None, queue: str | None = None) -> TickResult:
    """One minute of the demo fleet: push telemetry, metrics and logs, end some runs, start others."""
    result = TickResult()
    if not is_live():
        return result
    now = now or timezone.now()
    rng = rng or rng_for(SEED, now.isoformat())
    running = list(
        Run.objects.filter(is_demo=True, status=RunStatus.RUNNING)
        .exclude(source=RunSource.LOCAL)
        .select_related("team")
        .order_by("pk")
    )
    for run in running:
        _advance(run, now, rng, result, queue)
    still = Run.objects.filter(is_demo=True, status=RunStatus.RUNNING).exclude(source=RunSource.LOCAL).count()
    for _ in range(max(0, settings.AIRBOARD_DEMO_LIVE_RUNNING - still)):
        started = _start(now, rng)
        if started is None:
            break
        result.started.append(started.external_id)
    return result


@dataclass(frozen=True)
class _Live:
    """A running run as the live demo sees it: its last attempt, nodes and training curve."""

    run: Run
    attempt: Attempt
    nodes: list[Node]
    curve: TrainingCurve
    family: str
    started: datetime  # the attempt's start (a live attempt has started)


def _advance(run: Run, now: datetime, rng: random.Random, result: TickResult, queue: str | None) -> None:
    live = _live(run, now)
    if live is None:
        return
    result.runs += 1
    result.samples += _push_samples(live, now, queue)
    logged_to, points = _push_metrics(live, now, queue)
    result.metric_points += points
    result.log_chunks += _push_log(live, now, logged_to, RunStatus.RUNNING, None)
    # The advice examples (demo_clusters) stay as they are: each shows one rule's finding.
    if run.external_id.startswith(ADVICE_RUN_PREFIX):
        return
    # A run that has trained all its steps succeeds; any other may end now (a quarter fail).
    done = live.curve.step_at((now - live.started).total_seconds()) >= live.curve.total_steps
    if done or rng.random() < 1.0 / MEAN_REMAINING_MINUTES:
        failure = None
        if not done and rng.random() < FAIL_SHARE:
            kinds = [k for k in LIVE_FAILURES if len(live.nodes) > 1 or k not in MULTI_NODE]
            failure = rng.choice(kinds)
        _finish(live, now, failure, rng)
        (result.failed if failure else result.finished).append(run.external_id)


def _live(run: Run, now: datetime) -> _Live | None:
    attempt = run.attempts.order_by("-number").first()
    if attempt is None or attempt.started_at is None or attempt.started_at >= now:
        return None
    nodes = list(attempt.nodes.order_by("index"))
    if not nodes:
        return None
    slug = run.experiment_name.rstrip("/").rsplit("/", 1)[-1]
    experiment = EXPERIMENT_BY_SLUG.get(slug) or EXPERIMENTS[0]
    # The run's own curve, the one the seed drew its metrics and logs from (a function of the
    # run's row): the live points continue the seeded ones, same steps, loss and schedule.
    curve = run_curve(run.external_id, experiment, run.accelerator_type, run.num_accelerators)
    return _Live(run, attempt, nodes, curve, experiment.family, attempt.started_at)


def _push_samples(live: _Live, now: datetime, queue: str | None) -> int:
    """1 Hz samples of every GPU since the run's last sample, one batch per run, as the agent sends.

    A run the seed gave minute rollups only continues after its last seeded minute.
    """
    run = live.run
    profile = PROFILES.get(run.accelerator_type)
    if profile is None:
        return 0
    # Both parts of the raw tier: a minute already compacted into a block counts as sent.
    extent = blocks.raw_extent(run.pk)
    if extent:
        last = extent[1] + timedelta(seconds=1)
    else:  # the seconds the seed's last minute rollup covers (from the minute's start)
        minute = GpuMinute.objects.filter(run=run).order_by("-minute").values_list("minute", "samples").first()
        last = minute[0] + timedelta(seconds=min(60, minute[1])) if minute else live.started
    window_start = max(last, live.started, now - CATCH_UP)
    if window_start >= now:
        return 0
    gpus = max(1, min(run.gpus_per_node, run.num_accelerators))
    # The seed's activity for the attempt (memory, eval and checkpoint phases), up to now.
    activity = Activity.for_attempt(run.external_id, live.attempt.number, live.started, now, None)
    rows: list[list[Any]] = []
    for node in live.nodes:
        rng = rng_for(SEED, "samples", run.external_id, node.index, window_start.isoformat())
        skew = node_skew(run.external_id, node.index)
        for gpu, ts, fields in raw_samples(rng, profile, activity, window_start, gpus, skew):
            values = dict(fields)
            busy = (values["utilization_gpu"] or 0) / 100.0
            # PCIe: the host feeding the GPU (dataloader, checkpoints), in KB/s as NVML reports it.
            values["pcie_tx_kbps"] = int(busy * rng.uniform(180_000, 260_000))
            values["pcie_rx_kbps"] = int(busy * rng.uniform(900_000, 1_400_000))
            values["processes"] = None
            rows.append([run.pk, node.pk, gpu, ts.isoformat(), *(values.get(name) for name in SAMPLE_VALUE_COLUMNS)])
    if not rows:
        return 0
    batch, duplicate = record_batch(run.team, BatchKind.GPU_SAMPLES, rows, source=TelemetrySource.DEMO)
    if not duplicate:
        enqueue_batch(batch, queue=queue)
    return len(rows)


def _push_metrics(live: _Live, now: datetime, queue: str | None) -> tuple[int, int]:
    """MLflow points logged since the last stored step; returns (that step, points pushed).

    The log's progress lines continue from the same step, so they cover what the metrics do.
    """
    run = live.run
    after = MetricPoint.objects.filter(run=run).aggregate(step=Max("step"))["step"] or 0
    rng = rng_for(SEED, "metrics", run.external_id, after)
    points = [
        p for p in metric_points(rng, live.curve, live.started, now, None) if p.step > after and p.value is not None
    ]
    if not points:
        return after, 0
    rows = [[run.pk, p.key, p.step, p.ts.isoformat(), p.value] for p in points]
    batch, duplicate = record_batch(run.team, BatchKind.METRICS, rows)
    if not duplicate:
        enqueue_batch(batch, queue=queue)
    return after, len(points)


def _context(live: _Live, now: datetime, status: str, failure: str | None, node: Node, failed_node: int) -> LogContext:
    run = live.run
    return LogContext(
        experiment=run.experiment_name.rstrip("/").rsplit("/", 1)[-1],
        family=live.family,
        accelerator_type=run.accelerator_type,
        gpus_per_node=max(1, run.gpus_per_node),
        hosts=tuple(n.host or f"node-{n.index}" for n in live.nodes),
        node_index=node.index,
        attempt=live.attempt.number,
        start=live.started,
        end=now,
        status=status,
        failure=failure,
        failed_node=failed_node,
        failed_local_rank=0,
        curve=live.curve,
        checkpoint_dir=checkpoint_dir(run.team.name, run.experiment_name, live.attempt.mlflow_run_id),
        source=run.source,
    )


def _push_log(live: _Live, now: datetime, after_step: int, status: str, failure: str | None) -> int:
    """Rank 0's new progress lines (and each node's last lines once the run ends), one chunk per node."""
    failed_node = len(live.nodes) - 1 if failure else 0
    chunks = 0
    for node in live.nodes:
        ctx = _context(live, now, status, failure, node, failed_node)
        rng = rng_for(SEED, "log", live.run.external_id, node.index, now.isoformat())
        stored = LogChunk.objects.filter(node=node).aggregate(seq=Max("seq"))["seq"]
        lines = progress_lines(rng, ctx, after_step) if node.index == 0 and status == RunStatus.RUNNING else []
        lines += closing_lines(rng, ctx)
        if not lines:
            continue
        seq = 0 if stored is None else stored + 1
        text = "".join(f"{line}\n" for line in lines)
        append_log_chunk(live.run, live.attempt.number, node.index, seq, text, host=node.host)
        chunks += 1
    return chunks


def _finish(live: _Live, now: datetime, failure: str | None, rng: random.Random) -> None:
    """End the run as its source would report it, with each node's last log lines first."""
    run = live.run
    status = RunStatus.FAILED if failure else RunStatus.SUCCEEDED
    failed_node = len(live.nodes) - 1 if failure else 0
    _push_log(live, now, 0, status, failure)
    message = ""
    exit_code = 0
    if failure:
        spec = FAILURES[failure]
        exit_code = spec.exit_code
        message = spec.message.format(
            alloc=rng.choice((1.0, 2.0, 4.0, 8.0)),
            rank=failed_node * max(1, run.gpus_per_node),
            host=live.nodes[failed_node].host,
            step=live.curve.step_at((now - live.started).total_seconds()),
        )
    nodes = [
        {
            "index": node.index,
            "status": status,
            "ended_at": now,
            "exit_code": exit_code if not failure or node.index == failed_node else 143,
        }
        for node in live.nodes
    ]
    upsert_run(
        run.team,
        {
            "source": run.source,
            "external_id": run.external_id,
            "status": status,
            "ended_at": now,
            "state_message": message,
            "attempts": [
                {
                    "number": live.attempt.number,
                    "status": status,
                    "ended_at": now,
                    "exit_code": exit_code,
                    "state_message": message,
                    "nodes": nodes,
                }
            ],
        },
        # The writer that owns the run (SECURITY.md, "Ownership"): the seed's runs are the run source's.
        origin=run.origin,
    )


def _start(now: datetime, rng: random.Random) -> Run | None:
    """A new running run of a demo team, shaped like one of its finished GPU runs."""
    templates = list(
        Run.objects.filter(is_demo=True, status=RunStatus.SUCCEEDED, source=RunSource.SERVERLESS)
        .exclude(accelerator_type="")
        .select_related("team")
        .order_by("-submitted_at")[:200]
    )
    templates = [t for t in templates if t.accelerator_type in PROFILES]
    if not templates:
        return None
    template = rng.choice(templates)
    # A job run id: a 15-digit number, not one already stored (a few tries, then give up this tick).
    for _ in range(5):
        external_id = str(rng.randrange(10**14, 10**15))
        if not Run.objects.filter(source=template.source, external_id=external_id).exists():
            break
    else:
        return None
    started = now - timedelta(seconds=rng.randint(5, 50))
    subnet = (template.attempts.order_by("number").first() or Attempt()).nodes.values_list("host", flat=True).first()
    prefix = (subnet or "10.0.0.1").rsplit(".", 2)[0]
    nodes = max(1, template.num_accelerators // max(1, template.gpus_per_node))
    data = {
        "source": template.source,
        "external_id": external_id,
        "experiment_name": template.experiment_name,
        "creator": template.creator,
        "accelerator_type": template.accelerator_type,
        "num_accelerators": template.num_accelerators,
        "gpus_per_node": template.gpus_per_node,
        "region": template.region,
        "home_region": template.home_region,
        "status": RunStatus.RUNNING,
        "submitted_at": started - timedelta(seconds=rng.randint(20, 600)),
        "started_at": started,
        "timeout_minutes": template.timeout_minutes,
        "max_retries": template.max_retries,
        "usage_policy_name": template.usage_policy_name,
        "parameters": template.parameters,
        "mlflow_run_id": f"{rng.getrandbits(128):032x}",
        "attempts": [
            {
                "number": 1,
                "status": RunStatus.RUNNING,
                "started_at": started,
                "nodes": [
                    {
                        "index": index,
                        "host": f"{prefix}.{rng.randint(0, 63)}.{rng.randint(2, 254)}",
                        "status": RunStatus.RUNNING,
                        "started_at": started,
                    }
                    for index in range(nodes)
                ],
            }
        ],
    }
    # Written as the run source collector writes, as the seed's runs are.
    run = upsert_run(template.team, data, origin=RunOrigin.COLLECTOR).run
    # Demo data stays recognisable (and removable by seed_demo --reset) as the seed's runs are.
    Run.objects.filter(pk=run.pk).update(is_demo=True, user=template.user)
    logger.info("live demo: started run %s (%s, %s)", run.external_id, run.experiment_name, run.accelerator_type)
    return run
