"""Post-mortem write-ups: the Markdown renderer, action items, the drafted body and the export.

A new post-mortem starts from what the classify pass stored (`runs.failures.classify_pass`):
`root_cause_text` and `draft_body` read the run's `FailureAnalysis`, its attempts, events and telemetry.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import nh3
from markdown_it import MarkdownIt

from runs.models import FailureAnalysis, GpuMinute, PostMortem, Run, RunEvent

# What a rendered post-mortem body may contain: Markdown's output, no raw HTML beyond it.
MARKDOWN_TAGS = {
    "a", "abbr", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
    "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
MARKDOWN_URL_SCHEMES = {"http", "https", "mailto"}
# Characters of a post-mortem field the form accepts, and of a stored one the page renders.
# The renderer is linear, but at ~15 µs a character on a loaded worker: 20,000 characters of
# the worst input ("![" repeated) stay near a third of a second. A drafted body is ~8,000.
MARKDOWN_MAX_CHARS = 20_000
ACTION_ITEMS_MAX_CHARS = 10_000
_OWNER = re.compile(r"[\w.@+-]+")


@functools.cache
def _markdown() -> MarkdownIt:
    # CommonMark (markdown-it-py) rather than Python-Markdown: the latter's inline patterns
    # rescan the rest of the text from every `[` or `<a `, so 20,000 `[` took minutes and nested
    # lists raised RecursionError. markdown-it is built to stay linear on pathological input.
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    # Every link is parsed as one and nh3 drops the href of any scheme outside
    # MARKDOWN_URL_SCHEMES, so `[x](javascript:...)` renders as plain "x", not as source text.
    md.validateLink = lambda url: True  # type: ignore[method-assign]  # markdown-it's documented override
    return md


def render_markdown(text: str) -> str:
    """Markdown to HTML that is safe to mark safe: nh3 keeps only MARKDOWN_TAGS and http(s)/mailto links.

    Raw HTML in the source (a `<script>`, an `onerror=`) and `javascript:` URLs do not survive.
    Text past MARKDOWN_MAX_CHARS (only rows stored before the form's limit) is cut, and says so.
    """
    cut = len(text) - MARKDOWN_MAX_CHARS
    if cut > 0:
        text = f"{text[:MARKDOWN_MAX_CHARS]}\n\n*({cut:,} more characters not shown)*\n"
    html = _markdown().render(text)
    return nh3.clean(
        html,
        tags=MARKDOWN_TAGS,
        attributes={"a": {"href", "title"}, "abbr": {"title"}, "code": {"class"}, "td": {"align"}, "th": {"align"}},
        url_schemes=MARKDOWN_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )


def parse_action_item(line: str) -> dict[str, object]:
    """One `- [ ] text @owner` line ([x] when done; the bullet is optional, the owner is the last word).

    String operations, not a pattern: the old `\\s*[-*]?\\s*\\[...\\](.*?)(\\s+@...)?\\s*$` backtracked
    over every split of a run of spaces (a line of 40,000 spaces took 32 s to save).
    """
    stripped = line.strip()
    rest = stripped[1:].lstrip() if stripped.startswith(("-", "*")) else stripped
    if rest[:3] not in ("[ ]", "[x]", "[X]"):
        return {"text": stripped.lstrip("-* ").strip(), "owner": "", "done": False}
    done, tail = rest[1] in "xX", rest[3:].rstrip()
    words = tail.rsplit(None, 1)
    last = words[-1] if words else ""
    # The owner is a last word of its own (whitespace before it) that is `@` and a name.
    if last != tail and last.startswith("@") and _OWNER.fullmatch(last[1:]):
        return {"text": tail[: -len(last)].strip(), "owner": last[1:], "done": done}
    return {"text": tail.strip(), "owner": "", "done": done}


def parse_action_items(text: str) -> list[dict[str, object]]:
    """Action items from lines like `- [ ] Lower the batch size @alice` ([x] when done)."""
    return [parse_action_item(line) for line in text.splitlines() if line.strip()]


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


# Minutes of per-minute telemetry a drafted write-up tabulates before the failure.
SNAPSHOT_MINUTES = 10


def telemetry_snapshot(run: Run, attempt_number: int | None, at: datetime | None) -> list[dict[str, Any]]:
    """Per minute, over the GPUs of the attempt, in the SNAPSHOT_MINUTES up to `at`: mean
    utilization, the fullest GPU's memory share, mean power as a share of its limit."""
    if at is None:
        return []
    rows = GpuMinute.objects.filter(run=run, minute__gte=at - timedelta(minutes=SNAPSHOT_MINUTES), minute__lte=at)
    if attempt_number is not None:
        rows = rows.filter(node__attempt__number=attempt_number)
    minutes: dict[datetime, dict[str, list[float]]] = {}
    for minute, util, used, total, power, limit in rows.values_list(
        "minute", "utilization_gpu_avg", "memory_used_bytes_max", "memory_total_bytes", "power_watts_avg",
        "power_limit_watts",
    ):  # fmt: skip
        bucket = minutes.setdefault(minute, {"util": [], "memory": [], "power": []})
        if util is not None:
            bucket["util"].append(util)
        if used is not None and total:
            bucket["memory"].append(used / total)
        if power is not None and limit:
            bucket["power"].append(power / limit)
    snapshot = []
    for minute in sorted(minutes):
        b = minutes[minute]
        snapshot.append(
            {
                "minute": minute,
                "utilization": sum(b["util"]) / len(b["util"]) if b["util"] else None,
                "memory": max(b["memory"]) if b["memory"] else None,
                "power": sum(b["power"]) / len(b["power"]) if b["power"] else None,
            }
        )
    return snapshot


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if value else "?"


def _pct(value: object) -> str:
    return f"{value:.0%}" if isinstance(value, float) else "-"


def draft_body(run: Run, analysis: FailureAnalysis | None, *, failed_cost: str | None, links: dict[str, str]) -> str:
    """The write-up a new post-mortem starts from, in Markdown: timeline, cost, telemetry,
    evidence and links. Everything in it is read from what Airboard stored; people edit the rest.

    `failed_cost` comes formatted (`billing.prices.money.format_usd`) by the caller: this module
    is on the runs write path (the classify task), which never imports billing."""
    parts = ["## Timeline", "", "| When | What |", "| --- | --- |"]
    events: list[tuple[datetime, str]] = []
    causes = {a["attempt"]: a for a in (analysis.earlier_attempts if analysis else [])}
    if run.submitted_at:
        events.append((run.submitted_at, "Run submitted"))
    for attempt in run.attempts.order_by("number"):
        if attempt.started_at:
            events.append((attempt.started_at, f"Attempt {attempt.number} started"))
        if attempt.ended_at:
            what = f"Attempt {attempt.number} ended: {attempt.get_status_display().lower()}"
            if attempt.exit_code not in (None, 0):
                what += f", exit code {attempt.exit_code}"
            cause = causes.get(attempt.number)
            if analysis is not None and attempt.number == analysis.attempt_number and analysis.class_id != "none":
                what += f" ({analysis.title}; the attempt that ended the run)"
            elif cause is not None and cause["class_id"] != "none":
                what += f" ({cause['title']})"
            events.append((attempt.ended_at, what))
    for event in RunEvent.objects.filter(run=run).order_by("ts")[:50]:
        gpu = f" GPU {event.gpu_index}" if event.gpu_index is not None else ""
        message = f": {event.message}" if event.message else ""
        events.append((event.ts, f"{event.get_kind_display()}{gpu}{message}"))
    for when, what in sorted(events, key=lambda e: e[0]):
        parts.append(f"| {_when(when)} | {what.replace('|', '/')} |")
    parts += ["", "## Cost of the failed attempts", ""]
    parts.append(failed_cost if failed_cost is not None else "No cost estimate (no price for this run).")
    parts += ["", "## Telemetry before the failure", ""]
    snapshot = telemetry_snapshot(run, analysis.attempt_number if analysis else None,
                                  analysis.failed_at if analysis else run.ended_at)  # fmt: skip
    if snapshot:
        parts += ["| Minute | GPU utilization | Fullest GPU memory | Power (of limit) |", "| --- | --- | --- | --- |"]
        for row in snapshot:
            util = f"{row['utilization']:.0f}%" if row["utilization"] is not None else "-"
            parts.append(f"| {_when(row['minute'])} | {util} | {_pct(row['memory'])} | {_pct(row['power'])} |")
    else:
        parts.append("_No GPU telemetry in the minutes before the failure._")
    signal = analysis.telemetry if analysis else {}
    if signal.get("memory_at_limit"):
        parts += ["", f"GPU memory was at its limit ({_pct(signal.get('memory_peak'))} on {signal.get('memory_gpu')})."]
    if signal.get("hang"):
        parts += ["", f"Hang signature: utilization pinned while power sat near idle for {signal.get('hang_minutes')} "
                      "minutes."]  # fmt: skip
    parts += ["", "## Evidence", ""]
    if analysis is not None and analysis.class_id != "none":
        where = f"attempt {analysis.attempt_number}" if analysis.attempt_number is not None else "the run"
        where += f", node {analysis.node_index}" if analysis.node_index is not None else ""
        where += f", line {analysis.line}" if analysis.line else ""
        confidence = f", confidence {analysis.confidence:.0%}" if analysis.confidence is not None else ""
        parts += [f"{analysis.title} ({where}{confidence}):", ""]
        parts += [f"    {analysis.evidence}", ""] if analysis.evidence else []
        for earlier in analysis.earlier_attempts:
            parts.append(f"- Attempt {earlier['attempt']}: {earlier['title']}"
                         + (f": `{str(earlier['evidence'])[:160]}`" if earlier.get("evidence") else ""))  # fmt: skip
    else:
        parts.append("_The classifier found no failure._")
    parts += ["", "## Links", ""]
    parts += [f"- [{label}]({url})" for label, url in links.items() if url]
    return "\n".join(parts) + "\n"


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
