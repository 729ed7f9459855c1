"""Why did this run fail? The classifier applied to a whole run, stored, and the post-mortem helpers.

`runs.classify` judges one log. A run has many: every node of every attempt, plus exit codes,
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

from django.db import transaction
from django.utils import timezone

from runs.choices import RunEventKind, RunStatus
from runs.classify import Classification, classify_lines, match_rule, scan_text
from runs.classify_rules import CLASSES, EXIT_CODE_CLASSES, ROOT, SYMPTOM, TRACEBACK
from runs.logs import MAX_LINE_CHARS, chunk_texts, display_text, iter_lines
from runs.models import Attempt, FailureAnalysis, Node, PostMortem, Run, RunEvent

FAILED_STATUSES = (RunStatus.FAILED, RunStatus.TIMED_OUT)
# Classification reads whole logs: it runs with the collectors, never on the ingest queue.
CLASSIFY_QUEUE = "collect"
# Runtime caps of serverless GPU runs: notebook runs (no workload file) and CLI runs.
NOTEBOOK_CAP = timedelta(days=7)
CLI_CAP = timedelta(days=14)
# Tier given to a verdict with no evidence line (an exit code, `none`): after every log match.
NO_LINE_TIER = TRACEBACK + 1
# Lines of log shown either side of the evidence on the failure page.
CONTEXT_RADIUS = 30
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
    verdict = classify_lines(lines, exit_code=exit_code)
    at = line_timestamp(verdict.evidence) if verdict.line is not None else None
    return Candidate(verdict, evidence_tier(verdict), attempt.number, node.index if node else None, at)


def _event_candidates(run: Run) -> list[Candidate]:
    events = RunEvent.objects.filter(run=run, kind__in=[RunEventKind.GPU_LOST, RunEventKind.XID])
    candidates = []
    for event in events.select_related("node__attempt").order_by("ts"):
        failure = CLASSES["gpu_hardware"]
        gpu = f" GPU {event.gpu_index}" if event.gpu_index is not None else ""
        evidence = f"{event.get_kind_display()}{gpu}: {event.message}".strip().rstrip(":")
        verdict = Classification("gpu_hardware", None, evidence, failure.remedy, failure.title)
        node = event.node
        candidates.append(
            Candidate(verdict, ROOT, node.attempt.number if node else None, node.index if node else None, event.ts)
        )
        break  # the first event is the cause; later ones are the same GPU going down
    return candidates


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
    cap, kind = (CLI_CAP, "CLI") if run.workload_yaml else (NOTEBOOK_CAP, "notebook")
    if ran >= cap:
        timed_out = True
        notes.append(f"Ran {_hours(ran)}: {kind} runs stop at {cap.days} days, whatever their timeout.")
    return timed_out, " ".join(notes)


def _hours(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


def analyse_run(run: Run) -> tuple[Candidate | None, str]:
    """The chosen evidence for a run's failure (None: nothing found) and a timing note.

    1. Classify every node's log of every attempt, in attempt and node order; an attempt
       without nodes is judged on its exit code alone.
    2. Add the first GPU event (gpu_lost / xid) as ROOT evidence of `gpu_hardware`.
    3. Pick the best candidate (lowest tier, then earliest timestamp, attempt, node).
    4. If nothing better than a generic exception was found and the run ran into its
       timeout or runtime cap, the answer is `timeout`, with the timing as evidence.
    """
    candidates: list[Candidate] = []
    for attempt in run.attempts.prefetch_related("nodes").order_by("number"):
        nodes = sorted(attempt.nodes.all(), key=lambda n: n.index)
        for node in nodes or [None]:
            candidates.append(_node_candidate(attempt, node))
    candidates.extend(_event_candidates(run))
    best = _pick(candidates)
    timed_out, note = _timing(run)
    # A kill at the timeout often leaves only an exit code (137, -9): the timing explains it better.
    weak = best is None or best.tier > SYMPTOM or (best.verdict.line is None and best.tier != ROOT)
    if timed_out and weak:
        failure = CLASSES["timeout"]
        evidence = note or f"The run source reports the run as {run.get_status_display().lower()}."
        last = run.attempts.order_by("-number").first()
        verdict = Classification("timeout", None, evidence, failure.remedy, failure.title)
        best = Candidate(verdict, NO_LINE_TIER, last.number if last else None, None, run.ended_at)
    elif best is None and run.status == RunStatus.CANCELLED:
        failure = CLASSES["cancelled"]
        verdict = Classification("cancelled", None, "The run was cancelled.", failure.remedy, failure.title)
        best = Candidate(verdict, NO_LINE_TIER, None, None, run.ended_at)
    return best, note


def _failed_at(run: Run, best: Candidate) -> datetime | None:
    if best.at is not None:
        return best.at
    attempt = run.attempts.filter(number=best.attempt_number).first() if best.attempt_number else None
    return (attempt.ended_at if attempt else None) or run.ended_at or run.submitted_at


def classify_run(run: Run) -> FailureAnalysis:
    """Classify a run from all its logs, exit codes, events and timing, and store the verdict.

    Idempotent: a second call overwrites the stored analysis with the same (or a newer) one.
    """
    best, note = analyse_run(run)
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
            "note": note,
            "failed_at": _failed_at(run, best),
            "classified_at": timezone.now(),
        },
    )
    return analysis


def enqueue_classification(run: Run) -> None:
    """Queue `runs.classify_run` for a failed run once the current transaction commits."""
    if run.status not in FAILED_STATUSES:
        return
    from runs.tasks import classify_run as task

    run_id = run.pk
    transaction.on_commit(lambda: task.apply_async((run_id,), queue=CLASSIFY_QUEUE))


@dataclass(frozen=True)
class ContextLine:
    """A line of log around the evidence, as the failure page shows it."""

    number: int
    text: str
    is_error: bool
    is_evidence: bool


def log_context(node: Node, line: int, radius: int = CONTEXT_RADIUS) -> list[ContextLine]:
    """Lines `line - radius` .. `line + radius` of a node's log, error lines flagged."""
    first, last = max(line - radius, 1), line + radius
    shown = []
    for number, raw in enumerate(iter_lines(chunk_texts(node)), start=1):
        if number < first:
            continue
        if number > last:
            break
        text = display_text(raw)[:MAX_LINE_CHARS]
        shown.append(ContextLine(number, text, is_error_line(text), number == line))
    return shown


# --- Post-mortem write-ups ------------------------------------------------------------------

# What a rendered post-mortem body may contain: Markdown's output, no raw HTML beyond it.
MARKDOWN_TAGS = {
    "a", "abbr", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
    "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
MARKDOWN_URL_SCHEMES = {"http", "https", "mailto"}
ACTION_ITEM = re.compile(r"^\s*[-*]?\s*\[(?P<done>[ xX])\]\s*(?P<text>.*?)(?:\s+@(?P<owner>[\w.@+-]+))?\s*$")


def render_markdown(text: str) -> str:
    """Markdown to HTML that is safe to mark safe: nh3 keeps only MARKDOWN_TAGS and http(s)/mailto links.

    Raw HTML in the source (a `<script>`, an `onerror=`) and `javascript:` URLs do not survive.
    """
    import markdown
    import nh3

    html = markdown.markdown(text, extensions=["fenced_code", "tables", "sane_lists"])
    return nh3.clean(
        html,
        tags=MARKDOWN_TAGS,
        attributes={"a": {"href", "title"}, "abbr": {"title"}, "code": {"class"}, "td": {"align"}, "th": {"align"}},
        url_schemes=MARKDOWN_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )


def parse_action_items(text: str) -> list[dict[str, object]]:
    """Action items from lines like `- [ ] Lower the batch size @alice` ([x] when done)."""
    items: list[dict[str, object]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = ACTION_ITEM.match(line)
        if match is None:
            items.append({"text": line.strip().lstrip("-* ").strip(), "owner": "", "done": False})
        else:
            items.append({"text": match["text"], "owner": match["owner"] or "", "done": match["done"].lower() == "x"})
    return items


def format_action_items(items: Iterable[dict]) -> str:
    """The inverse of `parse_action_items`, for the edit form and the Markdown export."""
    lines = []
    for item in items:
        owner = f" @{item['owner']}" if item.get("owner") else ""
        lines.append(f"- [{'x' if item.get('done') else ' '}] {item.get('text', '')}{owner}")
    return "\n".join(lines)


def root_cause_text(analysis: FailureAnalysis | None) -> str:
    """The classifier's verdict as a paragraph, to prefill a new post-mortem's root cause."""
    if analysis is None or analysis.class_id == "none":
        return ""
    where = ""
    if analysis.attempt_number is not None:
        where = f" (attempt {analysis.attempt_number}"
        where += f", node {analysis.node_index}" if analysis.node_index is not None else ""
        where += f", line {analysis.line})" if analysis.line else ")"
    evidence = f"\n\nEvidence{where}:\n\n    {analysis.evidence}" if analysis.evidence else ""
    return f"{analysis.title}.{evidence}\n\nRemedy: {analysis.remedy}"


def postmortem_markdown(pm: PostMortem) -> str:
    """A post-mortem as one Markdown document (the export)."""
    run = pm.run
    owner = pm.owner.get_username() if pm.owner else "nobody"
    parts = [
        f"# {pm.title}",
        "",
        f"- Run: {run.external_id} ({run.experiment_name or 'no experiment'})",
        f"- Team: {run.team.name}",
        f"- Status: {pm.get_status_display()}",
        f"- Owner: {owner}",
        f"- Updated: {pm.updated_at.isoformat(timespec='minutes')}",
        "",
        "## Summary",
        "",
        pm.summary or "_None._",
        "",
        "## Root cause",
        "",
        pm.root_cause or "_Not written yet._",
        "",
        "## Action items",
        "",
        format_action_items(pm.action_items) or "_None._",
        "",
        "## Details",
        "",
        pm.body or "_None._",
        "",
    ]
    return "\n".join(parts)
