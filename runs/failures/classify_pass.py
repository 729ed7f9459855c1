"""Why did this run fail? The classifier applied to a whole run and stored: the worker's classify pass.

`runs.failures.classify` judges one log. A run has many: every node of every attempt, plus exit codes,
GPU events and its timing. `classify_run` reads them all and stores one `FailureAnalysis`.

How the first causal error is chosen across logs (`_pick`):

* Each node's log gets its own verdict from `classify_lines` (with the node's exit code,
  else its attempt's), and the verdict's tier from the rule that matched its evidence.
* The lowest tier wins: a ROOT cause (an OOM on rank 3) beats the SYMPTOM it set off on the
  other ranks (NCCL watchdog timeouts), whatever the order of the nodes.
* Among equal tiers: when both evidence lines carry a timestamp, the earlier one; else the
  earlier attempt, then the lower node index. So without timestamps the answer is the first
  failing attempt's first node with a match of the best tier.
* A GPU event (`gpu_lost`, `xid`) is ROOT-tier evidence of `gpu_hardware` timed by its event
  time: it wins over a log ROOT match only when that line is stamped later than the event.
* With nothing better than a generic exception, a run that ran to its `timeout_minutes`
  (or was recorded as timed out) is `timeout`; one that reached the runtime cap (7 days for
  notebook runs, 14 for CLI runs) says so in `note`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from runs.choices import RunEventKind, RunStatus
from runs.failures.classify import Classification, classify_lines, match_rule, scan_text
from runs.failures.rules import CLASSES, EXCEPTION, EXIT_CODE_CLASSES, ROOT, SYMPTOM, TRACEBACK
from runs.logs import chunk_texts, iter_lines
from runs.models import Attempt, FailureAnalysis, GpuMinute, Node, Run, RunEvent

FAILED_STATUSES = tuple(RunStatus.failed())
# Tier given to a verdict with no evidence line (an exit code, `none`): after every log match.
NO_LINE_TIER = TRACEBACK + 1
# A timestamp near the start of a line: ISO 8601 or "2026-11-02 09:14:03,123", optionally bracketed.
LINE_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?\d*\s*(Z|[+-]\d{2}:?\d{2})?")
# Characters of a line searched for its timestamp (a "[rank3]: " prefix may come first).
TIMESTAMP_WINDOW = 40
_SIGNATURE_FOLDS = (
    (re.compile(r"0x[0-9a-f]+", re.IGNORECASE), "0x…"),
    (re.compile(r"(/[\w.@-]+)+"), "/…"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
)
SIGNATURE_CHARS = 200


@dataclass(frozen=True)
class Candidate:
    """One piece of evidence for the run's failure, and how to rank it."""

    verdict: Classification
    tier: int
    attempt_number: int | None
    node_index: int | None
    at: datetime | None

    def key(self) -> tuple:
        return (self.tier, self.attempt_number or 0, self.node_index or 0)


def line_timestamp(text: str) -> datetime | None:
    """The timestamp a log line starts with (naive means UTC), or None."""
    match = LINE_TIMESTAMP.search(text[:TIMESTAMP_WINDOW])
    if match is None:
        return None
    day, clock, fraction, zone = match.groups()
    raw = f"{day}T{clock}" + (f".{fraction.ljust(6, '0')}" if fraction else "")
    if zone:
        raw += zone if zone == "Z" or ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def evidence_tier(verdict: Classification) -> int:
    """The tier of the rule that matched the verdict's evidence; NO_LINE_TIER without a line."""
    if verdict.line is None:
        # A telling exit code (137, 139) ranks with the signals torchrun reports.
        return SYMPTOM if verdict.class_id in EXIT_CODE_CLASSES.values() else NO_LINE_TIER
    if verdict.class_id == "nan_divergence":
        return ROOT
    rule = match_rule(verdict.evidence)
    return rule.tier if rule is not None else TRACEBACK


def is_error_line(text: str) -> bool:
    """True when a rule of tier SYMPTOM or lower claims the line (the failure page highlights it)."""
    rule = match_rule(scan_text(text))
    return rule is not None and rule.tier <= SYMPTOM


def signature(evidence: str) -> str:
    """The evidence with numbers, hex ids and paths folded: 'rank 3' and 'rank 5' group together."""
    text = evidence.lower()
    for pattern, replacement in _SIGNATURE_FOLDS:
        text = pattern.sub(replacement, text)
    return text.strip()[:SIGNATURE_CHARS]


def _node_candidate(attempt: Attempt, node: Node | None) -> Candidate:
    exit_code = node.exit_code if node is not None and node.exit_code is not None else attempt.exit_code
    lines: Iterable[str] = ()
    if node is not None:
        lines = iter_lines(chunk_texts(node))
    # A node of an attempt the source reports failed is never "no failure": with no rule matching
    # it is an unrecognised failure, evidenced by the likeliest line of its log's tail.
    verdict = classify_lines(lines, exit_code=exit_code, failed=attempt.status == RunStatus.FAILED)
    at = line_timestamp(verdict.evidence) if verdict.line is not None else None
    return Candidate(verdict, evidence_tier(verdict), attempt.number, node.index if node else None, at)


def _state_message_candidate(attempt: Attempt) -> Candidate | None:
    """The run source's own one-line account of how the attempt ended (Jobs `state_message`).

    Read by the same rules as a log line; it has no line number, so a log line of the same tier
    outranks it (the log shows context, the message does not).
    """
    message = attempt.state_message.strip()
    if not message:
        return None
    found = classify_lines([message], exit_code=attempt.exit_code)
    if found.class_id in ("none", "other") and found.line is None:
        return None  # nothing in the message beyond the exit code the nodes already report
    verdict = Classification(found.class_id, None, found.evidence, found.remedy, found.title)
    tier = evidence_tier(found)
    return Candidate(verdict, tier, attempt.number, None, attempt.ended_at)


def _event_candidates(run: Run, attempt: Attempt) -> list[Candidate]:
    """The attempt's first GPU event (gpu_lost, xid): ROOT evidence of gpu_hardware."""
    events = RunEvent.objects.filter(run=run, kind__in=[RunEventKind.GPU_LOST, RunEventKind.XID])
    of_attempt = events.filter(node__attempt=attempt)
    if attempt.started_at is not None:
        window = events.filter(node__isnull=True, ts__gte=attempt.started_at)
        if attempt.ended_at is not None:
            window = window.filter(ts__lte=attempt.ended_at)
        of_attempt = of_attempt | window
    event = of_attempt.select_related("node").order_by("ts").first()
    if event is None:
        return []  # later events are the same GPU going down; the first is the cause
    failure = CLASSES["gpu_hardware"]
    gpu = f" GPU {event.gpu_index}" if event.gpu_index is not None else ""
    evidence = f"{event.get_kind_display()}{gpu}: {event.message}".strip().rstrip(":")
    verdict = Classification("gpu_hardware", None, evidence, failure.remedy, failure.title)
    node_index = event.node.index if event.node else None
    return [Candidate(verdict, ROOT, attempt.number, node_index, event.ts)]


def _better(a: Candidate, b: Candidate) -> bool:
    """True when `a` ranks before `b` (see the module docstring)."""
    if a.tier != b.tier:
        return a.tier < b.tier
    if a.at is not None and b.at is not None and a.at != b.at:
        return a.at < b.at
    if a.verdict.line is None and b.verdict.line is not None:
        return False  # an event without a line never beats an untimed log line of its tier
    if b.verdict.line is None and a.verdict.line is not None:
        return True
    return a.key() < b.key()


def _pick(candidates: list[Candidate]) -> Candidate | None:
    best: Candidate | None = None
    for candidate in candidates:
        if candidate.verdict.class_id == "none":
            continue
        if best is None or _better(candidate, best):
            best = candidate
    return best


def _timing(run: Run) -> tuple[bool, str]:
    """(ran into its timeout, a note about timeout or runtime cap) from the run's start and end."""
    if run.started_at is None:
        return run.status == RunStatus.TIMED_OUT, ""
    ran = (run.ended_at or timezone.now()) - run.started_at
    notes = []
    timed_out = run.status == RunStatus.TIMED_OUT
    if run.timeout_minutes and ran >= timedelta(minutes=run.timeout_minutes):
        timed_out = True
        notes.append(f"Ran {_hours(ran)} against a timeout of {run.timeout_minutes} minutes.")
    cap, kind = run.runtime_cap, run.runtime_kind
    if ran >= cap:
        timed_out = True
        notes.append(f"Ran {_hours(ran)}: {kind} runs stop at {cap.days} days, whatever their timeout.")
    return timed_out, " ".join(notes)


def _hours(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


# --- Telemetry as evidence -------------------------------------------------------------------

# Minutes of GPU telemetry read before an attempt's end.
SIGNAL_WINDOW = timedelta(minutes=10)
# A GPU this full of memory just before the crash ran out of it (the allocator fails the next
# request, which is rarely small enough to fit in the last percent).
MEMORY_AT_LIMIT = 0.95
# A hang: utilization pinned at or above HANG_UTILIZATION while power stays under
# HANG_POWER_SHARE of its limit. A spinning NCCL kernel keeps the SMs "busy" without doing math,
# so it draws little more than idle power; real training at that utilization draws most of it.
HANG_UTILIZATION = 90.0
HANG_POWER_SHARE = 0.4
HANG_MINUTES = 3


@dataclass(frozen=True)
class TelemetrySignal:
    """What an attempt's GPU telemetry says about how it ended (the minutes before its end)."""

    memory_peak: float | None  # highest share of a GPU's memory in use in the window
    memory_gpu: str  # where: "node 0 GPU 3"
    hang_minutes: int  # trailing minutes with utilization pinned and power near idle
    utilization: float | None  # mean utilization over those minutes
    power_share: float | None  # mean power over those minutes, as a share of the limit
    window_end: datetime | None

    @property
    def memory_at_limit(self) -> bool:
        return self.memory_peak is not None and self.memory_peak >= MEMORY_AT_LIMIT

    @property
    def hang(self) -> bool:
        return self.hang_minutes >= HANG_MINUTES

    def memory_text(self) -> str:
        return f"GPU memory reached {self.memory_peak:.1%} of capacity on {self.memory_gpu} before the attempt ended"

    def hang_text(self) -> str:
        return (
            f"GPU utilization pinned at {self.utilization:.0f}% while power sat at {self.power_share:.0%} of its "
            f"limit for the last {self.hang_minutes} minutes: a hung collective, not training"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "memory_peak": self.memory_peak,
            "memory_gpu": self.memory_gpu,
            "memory_at_limit": self.memory_at_limit,
            "hang_minutes": self.hang_minutes,
            "hang": self.hang,
            "utilization": self.utilization,
            "power_share": self.power_share,
        }


def telemetry_signal(attempt: Attempt) -> TelemetrySignal | None:
    """GPU memory and the hang signature in the SIGNAL_WINDOW before the attempt's end, from the
    per-minute rollups of its nodes; None when the attempt has no end or no telemetry."""
    end = attempt.ended_at
    if end is None:
        return None
    rows = list(
        GpuMinute.objects.filter(
            run_id=attempt.run_id, node__attempt=attempt, minute__gte=end - SIGNAL_WINDOW, minute__lte=end
        )
        .values_list(
            "minute", "node__index", "gpu_index", "memory_used_bytes_max", "memory_total_bytes",
            "utilization_gpu_avg", "power_watts_avg", "power_limit_watts",
        )
        .order_by("minute")
    )  # fmt: skip
    if not rows:
        return None
    peak, where = None, ""
    minutes: dict[datetime, list[tuple[float, float]]] = {}
    for minute, node_index, gpu, used, total, util, power, limit in rows:
        if used is not None and total:
            share = used / total
            if peak is None or share > peak:
                peak, where = share, f"node {node_index} GPU {gpu}"
        if util is not None and power is not None and limit:
            minutes.setdefault(minute, []).append((util, power / limit))
    hung, utils, powers = 0, [], []
    for minute in sorted(minutes, reverse=True):  # trailing run of hung minutes, newest first
        values = minutes[minute]
        util = sum(u for u, _ in values) / len(values)
        power = sum(p for _, p in values) / len(values)
        if util < HANG_UTILIZATION or power > HANG_POWER_SHARE:
            break
        hung += 1
        utils.append(util)
        powers.append(power)
    return TelemetrySignal(
        memory_peak=peak,
        memory_gpu=where,
        hang_minutes=hung,
        utilization=sum(utils) / len(utils) if utils else None,
        power_share=sum(powers) / len(powers) if powers else None,
        window_end=end,
    )


# How sure a verdict is, by what it rests on: a cause named in the log, a symptom, a generic
# exception, a bare traceback; an exit code alone; telemetry alone.
TIER_CONFIDENCE = {ROOT: 0.9, SYMPTOM: 0.7, EXCEPTION: 0.45, TRACEBACK: 0.3}
TELLING_EXIT_CODE_CONFIDENCE = 0.5
BARE_EXIT_CODE_CONFIDENCE = 0.2
TELEMETRY_ONLY_CONFIDENCE = 0.6
TELEMETRY_AGREES = 0.08
TELEMETRY_DISAGREES = 0.2


def _confidence(best: Candidate) -> float:
    if best.verdict.line is None and best.tier == NO_LINE_TIER:
        return TELLING_EXIT_CODE_CONFIDENCE if best.verdict.class_id != "other" else BARE_EXIT_CODE_CONFIDENCE
    if best.verdict.line is None and best.tier == SYMPTOM and best.verdict.class_id in EXIT_CODE_CLASSES.values():
        return TELLING_EXIT_CODE_CONFIDENCE
    return TIER_CONFIDENCE.get(best.tier, BARE_EXIT_CODE_CONFIDENCE)


def _weak(best: Candidate | None) -> bool:
    """True when the best evidence is no better than a generic exception or a bare exit code."""
    return best is None or best.tier > SYMPTOM or (best.verdict.line is None and best.tier != ROOT)


def combine_with_telemetry(
    best: Candidate | None, signal: TelemetrySignal | None, attempt: Attempt | None
) -> tuple[Candidate | None, float | None]:
    """One verdict from the log (and the source's message) and the telemetry, with a confidence.

    * The log names a cause and the telemetry agrees (OOM with memory at its limit, a collective
      timeout with the hang signature): the confidence rises.
    * The log names a GPU OOM but memory never came near its limit: the confidence falls.
    * The log has nothing better than an exception or an exit code: memory at its limit makes it
      a GPU OOM, the hang signature a collective timeout, with the telemetry as the evidence.
    """
    if best is None and signal is None:
        return None, None
    confidence = _confidence(best) if best is not None else None
    if signal is not None and attempt is not None:
        if best is not None and best.verdict.class_id == "cuda_oom" and signal.memory_peak is not None:
            delta = TELEMETRY_AGREES if signal.memory_at_limit else -TELEMETRY_DISAGREES
            confidence = (confidence or 0) + delta
        elif best is not None and best.verdict.class_id == "nccl_timeout" and signal.hang:
            confidence = (confidence or 0) + TELEMETRY_AGREES
        elif _weak(best) and (signal.memory_at_limit or signal.hang):
            class_id, evidence = ("cuda_oom", signal.memory_text()) if signal.memory_at_limit else (
                "nccl_timeout", signal.hang_text())  # fmt: skip
            failure = CLASSES[class_id]
            verdict = Classification(class_id, None, evidence, failure.remedy, failure.title)
            best = Candidate(verdict, SYMPTOM, attempt.number, None, signal.window_end)
            confidence = TELEMETRY_ONLY_CONFIDENCE
    if confidence is not None:
        confidence = round(min(max(confidence, 0.05), 0.99), 2)
    return best, confidence


@dataclass(frozen=True)
class RunAnalysis:
    """The verdict on a run: the attempt that ended it, earlier attempts' causes, the telemetry."""

    best: Candidate | None
    note: str
    confidence: float | None
    earlier: list[dict[str, object]]
    signal: TelemetrySignal | None


def _attempt_candidates(run: Run, attempt: Attempt) -> list[Candidate]:
    nodes = sorted(attempt.nodes.all(), key=lambda n: n.index)
    targets: list[Node | None] = [*nodes] or [None]  # an attempt without nodes: the attempt itself
    candidates = [_node_candidate(attempt, node) for node in targets]
    message = _state_message_candidate(attempt)
    if message is not None:
        candidates.append(message)
    candidates.extend(_event_candidates(run, attempt))
    return candidates


def _summary(best: Candidate | None) -> dict[str, object]:
    if best is None:
        return {"class_id": "none", "title": CLASSES["none"].title, "evidence": ""}
    verdict = best.verdict
    return {"class_id": verdict.class_id, "title": verdict.title, "evidence": verdict.evidence[:SIGNATURE_CHARS]}


def analyse_run(run: Run) -> RunAnalysis:
    """The verdict on the attempt that ended the run, and what earlier attempts died of.

    1. The final attempt (the highest number) is the one that ended the run: retries that
       failed before it are listed with their own causes, never chosen over it.
    2. In that attempt: classify every node's log, the run source's state message and the
       first GPU event; pick the best (lowest tier, then earliest timestamp, then node).
    3. Combine with the attempt's telemetry (`combine_with_telemetry`) into one verdict and a
       confidence.
    4. If nothing better than a generic exception was found and the run ran into its timeout
       or runtime cap, the answer is `timeout`, with the timing as evidence; a cancelled run
       with no evidence is `cancelled`.
    """
    attempts = list(run.attempts.prefetch_related("nodes").order_by("number"))
    earlier: list[dict[str, object]] = []
    best: Candidate | None = None
    final: Attempt | None = attempts[-1] if attempts else None
    for attempt in attempts:
        picked = _pick(_attempt_candidates(run, attempt))
        if attempt is final:
            best = picked
        elif attempt.status in FAILED_STATUSES or picked is not None:
            earlier.append({"attempt": attempt.number, **_summary(picked)})
    signal = telemetry_signal(final) if final is not None else None
    best, confidence = combine_with_telemetry(best, signal, final)
    timed_out, note = _timing(run)
    # A kill at the timeout often leaves only an exit code (137, -9) or the signal the launcher
    # got (SIGTERM): the timing explains it better.
    if timed_out and (_weak(best) or (best is not None and best.verdict.class_id == "cancelled")):
        failure = CLASSES["timeout"]
        evidence = note or f"The run source reports the run as {run.get_status_display().lower()}."
        verdict = Classification("timeout", None, evidence, failure.remedy, failure.title)
        best = Candidate(verdict, NO_LINE_TIER, final.number if final else None, None, run.ended_at)
        confidence = TIER_CONFIDENCE[ROOT] if note else TELLING_EXIT_CODE_CONFIDENCE
    elif best is None and run.status == RunStatus.CANCELLED:
        failure = CLASSES["cancelled"]
        verdict = Classification("cancelled", None, "The run was cancelled.", failure.remedy, failure.title)
        best = Candidate(verdict, NO_LINE_TIER, final.number if final else None, None, run.ended_at)
        confidence = TIER_CONFIDENCE[ROOT]
    return RunAnalysis(best, note, confidence, earlier, signal)


def _failed_at(run: Run, best: Candidate) -> datetime | None:
    if best.at is not None:
        return best.at
    attempt = run.attempts.filter(number=best.attempt_number).first() if best.attempt_number else None
    return (attempt.ended_at if attempt else None) or run.ended_at or run.submitted_at


def classify_run(run: Run) -> FailureAnalysis:
    """Classify a run from all its logs, exit codes, events, telemetry and timing, and store it.

    Idempotent: a second call overwrites the stored analysis with the same (or a newer) one.
    """
    result = analyse_run(run)
    best = result.best
    if best is None and run.status == RunStatus.FAILED:
        # The source says the run failed and nothing says why: an unrecognised failure, never "none".
        failure = CLASSES["other"]
        evidence = "The run source reports the run as failed; no log line says why."
        best = Candidate(
            Classification("other", None, evidence, failure.remedy, failure.title), NO_LINE_TIER, None, None, None
        )
    if best is None:
        failure = CLASSES["none"]
        best = Candidate(
            Classification("none", None, "", failure.remedy, failure.title), NO_LINE_TIER, None, None, None
        )
    verdict = best.verdict
    analysis, _ = FailureAnalysis.objects.update_or_create(
        run=run,
        defaults={
            "class_id": verdict.class_id,
            "title": verdict.title,
            "attempt_number": best.attempt_number,
            "node_index": best.node_index,
            "line": verdict.line,
            "evidence": verdict.evidence,
            "signature": signature(verdict.evidence),
            "remedy": verdict.remedy,
            "note": result.note,
            "failed_at": _failed_at(run, best),
            "confidence": result.confidence,
            "earlier_attempts": result.earlier,
            "telemetry": result.signal.as_dict() if result.signal is not None else {},
            "classified_at": timezone.now(),
        },
    )
    return analysis
