"""The Prometheus-compatible source: the dcgm-exporter series of each run's nodes, as its telemetry.

A fleet that already runs NVIDIA's dcgm-exporter scraped by Prometheus (or VictoriaMetrics,
Mimir, Thanos) needs no agent of ours: each pass reads, for every attempt of an active or
recently ended run, the exporter's series of the attempt's hosts over the attempt's window, and
stores them as the run's GPU samples (source `prometheus`) through the ingest path
(`ingest.record_batch` + `ingest_process.process_batch`, as every other door does).

1. Attempts: those of runs that are queued/running or ended within RECENTLY_ENDED, plus those
   whose read has not reached their end yet (the cursor lists them). An attempt's window runs
   from its start (else the run's) to its end (else the next attempt's start, the run's end,
   or now): the same host runs other jobs before and after, whose telemetry is not this run's.
2. Matching: a series belongs to a node when its `Hostname` (`hostname` since dcgm-exporter
   #655) label is the node's host, or its `instance` is that host (with any port), or, on
   Kubernetes, its `pod` label is (within AIRBOARD_PROMETHEUS_NAMESPACE when set).
3. Reading: one `query_range` per metric per attempt (and per chunk), of
   `last_over_time(M{...}[step])` at a grid of `step` seconds aligned to the epoch. The
   `last_over_time` window is one step, so a scrape that is missing stays missing (a plain
   selector would repeat the last value for five minutes): gaps are shown as gaps. A chunk is
   at most MAX_STEPS_PER_QUERY steps (Prometheus refuses 11,000 points per series) and at
   most MAX_POINTS_PER_QUERY points over the attempt's expected series.
4. Values: dcgm-exporter's names and units (`DCGM_FIELDS`, shared with the exporter-page
   importer), blank sentinels and NaN missing, MIG instances as GPUs of their own. A series
   that cannot be used (no or bad `gpu` label, a value that is not a number or out of range,
   a point off the grid) is skipped and counted as a refusal on the collectors page; a query
   the server refuses likewise. Neither loses the pass. `DCGM_FI_DEV_XID_ERRORS` (the last
   XID seen) becomes an `xid` run event each time it changes to a new non-zero value.
5. Cursor: per attempt, the end of what was stored (and the last XID per GPU). The next pass
   re-reads REREAD before it, for scrapes that landed late; rows already stored are skipped by
   the natural key, so a pass over the same data stores nothing new.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from runs import ingest, ingest_process
from runs.choices import BatchKind, CollectorKind, RunEventKind, RunStatus, TelemetrySource
from runs.collectors.prometheus_client import CollectorError, PrometheusSource, QueryRefused
from runs.collectors.state import CollectResult, count_refusals, save_cursor, track
from runs.models import Attempt, CollectorState, Node, RunEvent
from runs.telemetry.importers.common import out_of_range
from runs.telemetry.importers.dcgm_exporter import DCGM_BLANK_FLOOR, DCGM_FIELDS, DCGM_NOT_ON_MIG, dcgm_sample_values
from runs.telemetry.labels import MIG_INDEX_BASE, gpu_label, mig_gpu_index

__all__ = ["CollectorError", "collect_once"]

logger = logging.getLogger(__name__)

NAME = "prometheus"
NOT_CONFIGURED = "prometheus: not configured (set AIRBOARD_PROMETHEUS_URL)"
# dcgm-exporter's "Value of the last XID error encountered" (etc/default-counters.csv).
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
METRICS: tuple[str, ...] = (*DCGM_FIELDS, XID_METRIC)
# Runs that ended this recently are still read: the last scrapes land after the run source saw the end.
RECENTLY_ENDED = timedelta(hours=1)
# Each pass reads again this much before its cursor, for samples a server took in late
# (remote write, a federation lag); what is already stored is skipped.
REREAD = timedelta(minutes=5)
# Prometheus answers "exceeded maximum resolution of 11,000 points per timeseries".
MAX_STEPS_PER_QUERY = 10_000
# Points one answer may carry (steps x series): a few MB of JSON.
MAX_POINTS_PER_QUERY = 200_000
# Series a host is expected to have per metric when a chunk is sized (8 GPUs; MIG has more).
SERIES_PER_HOST = 8
# Chunks read per attempt in one pass: a backlog (a long run's first read) drains over passes.
MAX_CHUNKS_PER_PASS = 8
MAX_GPU_INDEX = 32767


@dataclass
class PassCounts:
    """What one pass stored and skipped, for the operator's lines."""

    rows: int = 0
    inserted: int = 0
    events: int = 0
    refused: int = 0
    reasons: list[str] = field(default_factory=list)

    def refuse(self, why: str) -> None:
        self.refused += 1
        if len(self.reasons) < 20:
            self.reasons.append(why)


def source_from_settings() -> PrometheusSource:
    return PrometheusSource(
        settings.AIRBOARD_PROMETHEUS_URL,
        token=settings.AIRBOARD_PROMETHEUS_BEARER_TOKEN,
        username=settings.AIRBOARD_PROMETHEUS_USERNAME,
        password=settings.AIRBOARD_PROMETHEUS_PASSWORD,
        timeout=settings.AIRBOARD_PROMETHEUS_TIMEOUT_SECONDS,
    )


def collect_once(source: PrometheusSource | None = None, now: datetime | None = None) -> CollectResult:
    """One pass over every attempt to read (module docstring); a note when no server is configured."""
    if source is None:
        if not settings.AIRBOARD_PROMETHEUS_URL:
            return CollectResult(lines=[NOT_CONFIGURED])
        source = source_from_settings()
    now = now or timezone.now()
    step = settings.AIRBOARD_PROMETHEUS_STEP_SECONDS
    counts = PassCounts()
    with track(NAME, CollectorKind.PROMETHEUS, 60) as (state, result):
        try:
            for attempt in attempts_to_read(state, now):
                read_attempt(source, state, attempt, now, step, counts)
        finally:
            # Refusals are counted even when the server goes away mid-pass.
            if counts.refused:
                count_refusals(state, counts.refused, "; ".join(counts.reasons[:3]))
        result.items = counts.inserted
        result.say(
            f"prometheus: {counts.rows} sample(s) read, {counts.inserted} new, {counts.events} XID event(s), "
            f"{counts.refused} series or queries refused"
        )
        result.lines += [f"  refused: {why}" for why in counts.reasons[:5]]
    return result


def attempts_to_read(state: CollectorState, now: datetime) -> list[Attempt]:
    """Attempts of active or recently ended runs, and those the cursor has not finished (step 1)."""
    pending = [int(pk) for pk in (state.cursor.get("attempts") or {}) if str(pk).isdigit()]
    wanted = Q(run__status__in=RunStatus.active()) | Q(run__ended_at__gte=now - RECENTLY_ENDED) | Q(pk__in=pending)
    attempts = (
        Attempt.objects.filter(wanted)
        .filter(Q(started_at__isnull=False) | Q(run__started_at__isnull=False))
        .select_related("run", "run__team")
        .prefetch_related("nodes")
        .order_by("run_id", "number")
    )
    return list(attempts)


def attempt_window(attempt: Attempt, now: datetime) -> tuple[datetime, datetime]:
    """From the attempt's start (else the run's) to its end, else the next attempt's start, the run's end, or now."""
    run = attempt.run
    first = attempt.started_at or run.started_at
    assert first is not None  # attempts_to_read keeps started attempts only
    last = attempt.ended_at
    if last is None:
        following = (
            Attempt.objects.filter(run=run, number__gt=attempt.number, started_at__isnull=False)
            .order_by("number")
            .values_list("started_at", flat=True)
            .first()
        )
        last = following or run.ended_at or now
    return first, min(last, now)


def read_attempt(
    source: PrometheusSource, state: CollectorState, attempt: Attempt, now: datetime, step: int, counts: PassCounts
) -> None:
    """Read one attempt's hosts from its cursor to its window's end, a chunk at a time, storing each."""
    nodes = {node.host: node for node in attempt.nodes.all() if node.host}
    if not nodes:
        return
    first, last = attempt_window(attempt, now)
    cursors: dict[str, Any] = dict(state.cursor.get("attempts") or {})
    mine = cursors.get(str(attempt.pk)) or {}
    until = mine.get("until") if isinstance(mine.get("until"), int | float) else None
    start = _ceil(first.timestamp(), step)
    if until is not None:
        start = max(start, _floor(until - REREAD.total_seconds(), step))
    end = _floor(last.timestamp(), step)
    steps = max(1, min(MAX_STEPS_PER_QUERY, MAX_POINTS_PER_QUERY // (len(nodes) * SERIES_PER_HOST)))
    xids: dict[str, int] = dict(mine.get("xid") or {})
    new_chunks = 0  # the re-read margin is not counted: every pass moves the cursor on
    while start <= end and new_chunks < MAX_CHUNKS_PER_PASS:
        chunk_end = min(end, start + (steps - 1) * step)
        samples, events = read_chunk(source, attempt, nodes, start, chunk_end, step, xids, counts)
        store(attempt, samples, events, counts)
        if until is None or chunk_end > until:
            new_chunks += 1
            until = chunk_end
        cursors[str(attempt.pk)] = {"until": until, "xid": xids}
        save_cursor(state, {**state.cursor, "attempts": cursors})
        start = chunk_end + step
    run = attempt.run
    settled = run.ended_at is None or run.ended_at < now - RECENTLY_ENDED
    if run.status not in RunStatus.active() and start > end and settled:
        # Read to its end and past the late-scrape margin: the cursor forgets it.
        cursors.pop(str(attempt.pk), None)
        save_cursor(state, {**state.cursor, "attempts": cursors})


def _floor(seconds: float, step: int) -> int:
    return int(math.floor(seconds / step) * step)


def _ceil(seconds: float, step: int) -> int:
    return int(math.ceil(seconds / step) * step)


def series_query(metric: str, hosts: Iterable[str], step: int, namespace: str = "") -> str:
    """`last_over_time` of `metric` for every series whose host label names one of `hosts` (step 2 and 3)."""
    alternation = "|".join(re.escape(host) for host in sorted(hosts))
    pod = f"pod=~{_quoted(alternation)}" + (f",namespace={_quoted(namespace)}" if namespace else "")
    selectors = (
        f"Hostname=~{_quoted(alternation)}",
        f"hostname=~{_quoted(alternation)}",
        f"instance=~{_quoted(f'({alternation})(:[0-9]+)?')}",
        pod,
    )
    return " or ".join(f"last_over_time({metric}{{{labels}}}[{step}s])" for labels in selectors)


def _quoted(text: str) -> str:
    """A PromQL string literal: its escapes are Go's, which JSON's are a subset of."""
    return json.dumps(text)


def node_of(labels: dict[str, str], nodes: dict[str, Node], namespace: str = "") -> Node | None:
    """The node a series' labels name (step 2), or None."""
    for name in ("Hostname", "hostname"):
        if labels.get(name) in nodes:
            return nodes[labels[name]]
    instance = labels.get("instance") or ""
    host = instance.rsplit(":", 1)[0] if re.fullmatch(r".+:[0-9]+", instance) else instance
    host = host.removeprefix("[").removesuffix("]")
    if host in nodes:
        return nodes[host]
    pod = labels.get("pod")
    if pod in nodes and (not namespace or labels.get("namespace") == namespace):
        return nodes[pod]
    return None


def gpu_of(labels: dict[str, str]) -> int:
    """The stored GPU index of a series: `gpu`, or its MIG instance's index. ValueError when unusable."""
    raw = labels.get("gpu")
    if raw is None or not raw.isdigit():
        raise ValueError(f"gpu label {raw!r} is not a GPU index")
    gpu = int(raw)
    instance = labels.get("GPU_I_ID")
    if instance:
        if not instance.isdigit():
            raise ValueError(f"GPU_I_ID label {instance!r} is not an instance id")
        gpu = mig_gpu_index(gpu, int(instance))
    if gpu > MAX_GPU_INDEX:
        raise ValueError(f"GPU index {gpu} out of range")
    return gpu


def point_value(text: Any) -> float | None:
    """A point's value: missing for NaN, infinities and DCGM's blank sentinels; ValueError when not a number."""
    if not isinstance(text, str):
        raise ValueError(f"value {text!r} is not a string")
    value = float(text)
    if not math.isfinite(value) or value >= DCGM_BLANK_FLOOR:
        return None
    return value


SampleKey = tuple[int, int, int]  # (node id, gpu index, unix seconds)


def read_chunk(
    source: PrometheusSource,
    attempt: Attempt,
    nodes: dict[str, Node],
    start: int,
    end: int,
    step: int,
    xids: dict[str, int],
    counts: PassCounts,
) -> tuple[dict[SampleKey, dict[str, float | None]], list[RunEvent]]:
    """Every metric of the attempt's hosts from `start` to `end`: fields per (node, GPU, instant), and XID events."""
    namespace = settings.AIRBOARD_PROMETHEUS_NAMESPACE
    samples: dict[SampleKey, dict[str, float | None]] = {}
    events: list[RunEvent] = []
    for metric in METRICS:
        try:
            matrix = source.query_range(series_query(metric, nodes, step, namespace), start, end, step)
        except QueryRefused as exc:
            counts.refuse(f"{metric} of run {attempt.run.external_id}: {exc}")
            continue
        for series in matrix:
            try:
                node, gpu, points = _series(series, metric, nodes, namespace, start, end, step)
            except ValueError as exc:
                counts.refuse(f"a {metric} series of run {attempt.run.external_id}: {exc}")
                continue
            if node is None or (metric in DCGM_NOT_ON_MIG and gpu >= MIG_INDEX_BASE):
                continue  # another host's series the `or` let in; a MIG instance's 0 utilisation
            if metric == XID_METRIC:
                events += _xid_events(attempt, node, gpu, points, xids)
                continue
            target, factor = DCGM_FIELDS[metric]
            for seconds, value in points:
                read = samples.setdefault((node.pk, gpu, seconds), {})
                if read.get(target) is None:
                    read[target] = value * factor if value is not None else None
    return samples, events


def _series(
    series: Any, metric: str, nodes: dict[str, Node], namespace: str, start: int, end: int, step: int
) -> tuple[Node | None, int, list[tuple[int, float | None]]]:
    """One series of an answer, checked whole: (its node or None, its GPU, its points); ValueError says why not."""
    if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
        raise ValueError("not a series object")
    labels = {str(k): str(v) for k, v in series["metric"].items()}
    values = series.get("values")
    if not isinstance(values, list) or len(values) > (end - start) // step + 1:
        raise ValueError("values are not a list of the query's steps")
    node = node_of(labels, nodes, namespace)
    gpu = gpu_of(labels)
    target = DCGM_FIELDS.get(metric, ("", 1.0))
    points: list[tuple[int, float | None]] = []
    for pair in values:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int | float)):
            raise ValueError(f"point {str(pair)[:60]} is not [time, value]")
        seconds = int(pair[0])
        if seconds != pair[0] or not start <= seconds <= end or (seconds - start) % step:
            raise ValueError(f"point at {pair[0]} is off the query's grid")
        value = point_value(pair[1])
        if target[0] and not target[0].startswith("_") and value is not None:
            bad = out_of_range({target[0]: value * target[1]})
            if bad:
                raise ValueError(f"{bad} at {pair[0]}")
        elif value is not None and value < 0:
            raise ValueError(f"negative value {value:g} at {pair[0]}")
        points.append((seconds, value))
    return node, gpu, points


def _xid_events(
    attempt: Attempt, node: Node, gpu: int, points: list[tuple[int, float | None]], xids: dict[str, int]
) -> list[RunEvent]:
    """An `xid` event at each point where the last XID changes to a new non-zero value."""
    key = f"{node.pk}:{gpu}"
    events = []
    for seconds, value in points:
        if value is None:
            continue
        xid = int(value)
        if xid and xid != xids.get(key):
            events.append(
                RunEvent(
                    run=attempt.run, node=node, gpu_index=gpu, ts=datetime.fromtimestamp(seconds, tz=UTC),
                    kind=RunEventKind.XID, message=f"Xid {xid} on {gpu_label(gpu)}",
                    details={"xid": xid, "source": TelemetrySource.PROMETHEUS},
                )
            )  # fmt: skip
        xids[key] = xid
    return events


def store(
    attempt: Attempt, samples: dict[SampleKey, dict[str, float | None]], events: list[RunEvent], counts: PassCounts
) -> None:
    """The chunk's samples through the ingest path (batches of AIRBOARD_MAX_SAMPLES_PER_BATCH), then its events."""
    run = attempt.run
    rows = []
    for (node_id, gpu, seconds), read in sorted(samples.items()):
        values = dcgm_sample_values(read)
        if all(value is None for value in values.values()):
            continue  # every field blank at this instant: a gap, not a sample
        ts = datetime.fromtimestamp(seconds, tz=UTC).isoformat()
        rows.append([run.pk, node_id, gpu, ts, *map(values.get, ingest.SAMPLE_VALUE_COLUMNS)])
    size = settings.AIRBOARD_MAX_SAMPLES_PER_BATCH
    for i in range(0, len(rows), size):
        batch, _ = ingest.record_batch(run.team, BatchKind.GPU_SAMPLES, rows[i : i + size], TelemetrySource.PROMETHEUS)
        stored = ingest_process.process_batch(batch.pk)
        counts.inserted += stored.inserted if stored is not None else 0
    counts.rows += len(rows)
    if events:
        # A re-read event conflicts on (run, kind, ts, gpu_index) and is skipped.
        RunEvent.objects.bulk_create(events, ignore_conflicts=True)
        counts.events += len(events)
