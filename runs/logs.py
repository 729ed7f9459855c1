"""Assembling a node's log from its chunks, and the search and tail the log viewer shows.

A node's log is its LogChunks in `seq` order, concatenated as sent: a chunk may end in the
middle of a line, so lines are split only after joining. Logs can run to gigabytes, so
everything here streams chunk by chunk and keeps at most `limit` lines in memory; the page
renders a bounded tail and the download streams the whole text.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from runs.models import LogChunk, Node

# Lines rendered inline on the run page at once: the tail, or a window around a linked line; the
# viewer pages to earlier and later windows of as many, and the download has all of it. 2,000
# lines were ~200 KB of HTML and a 328 ms switch in Chromium; 300 are ~30 KB.
INLINE_LINE_LIMIT = 300
# Characters of one line rendered inline: a single 50 MB line (a dumped tensor, a base64 blob)
# must not end up in the DOM.
MAX_LINE_CHARS = 2_000
# Chunks fetched per database round trip while streaming.
CHUNK_BATCH = 50

# Terminal colour and cursor sequences (CSI ... final byte), which training scripts and tqdm emit.
ANSI_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


@dataclass(frozen=True)
class LogLine:
    """One line as displayed: its 1-based number in the whole log and highlighted segments."""

    number: int
    segments: tuple[tuple[str, bool], ...]
    truncated: bool = False

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.segments)


@dataclass(frozen=True)
class LogView:
    """What the log viewer shows: a bounded window of lines and the counts around it."""

    lines: list[LogLine]
    total_lines: int
    query: str
    match_count: int
    limit: int
    # Qualifying lines (all lines, or matches) before the first shown and after the last shown.
    earlier: int = 0
    later: int = 0

    @property
    def capped(self) -> bool:
        """True when more lines qualified (all lines, or all matches) than are shown."""
        return bool(self.earlier or self.later)

    @property
    def first(self) -> int:
        return self.lines[0].number if self.lines else 0

    @property
    def last(self) -> int:
        return self.lines[-1].number if self.lines else 0

    @property
    def at_tail(self) -> bool:
        """True when the window reaches the log's end (the live tail may append to it)."""
        return not self.later

    @property
    def empty(self) -> bool:
        return self.total_lines == 0


def chunk_texts(node: Node | int) -> Iterator[str]:
    """The texts of a node's chunks in order, fetched in batches (never the whole log at once)."""
    node_id = node if isinstance(node, int) else node.pk
    qs = LogChunk.objects.filter(node_id=node_id).order_by("seq").values_list("text", flat=True)
    yield from qs.iterator(chunk_size=CHUNK_BATCH)


def iter_lines(chunks: Iterable[str], *, partial: bool = True) -> Iterator[str]:
    """Split concatenated chunks into lines (without their newline), across chunk boundaries.

    `partial=False` leaves out a trailing line with no newline yet (a live tail must not
    send a line that is still being written).

    Only "\\n" ends a line (a trailing "\\r" is dropped): str.splitlines() would also split on
    form feeds and Unicode separators, and then our line numbers would disagree with `grep -n`
    on the downloaded file.
    """
    pending = ""
    for chunk in chunks:
        if not chunk:
            continue
        parts = (pending + chunk).split("\n")
        pending = parts.pop()
        for part in parts:
            yield part.removesuffix("\r")
    if pending and partial:
        yield pending.removesuffix("\r")


def display_text(line: str) -> str:
    """A raw line as a terminal would leave it: colour codes gone, `\\r` progress redraws collapsed."""
    line = ANSI_CSI.sub("", line)
    if "\r" in line:
        # tqdm redraws a bar with "\r"; what stays on screen is the text after the last one.
        line = line.rsplit("\r", 1)[-1]
    return line


def query_pattern(query: str) -> re.Pattern[str] | None:
    """A case-insensitive literal pattern for the search box (no regex: no ReDoS from a user)."""
    query = query.strip()
    if not query:
        return None
    return re.compile(re.escape(query), re.IGNORECASE)


def highlight(text: str, pattern: re.Pattern[str] | None) -> tuple[tuple[str, bool], ...]:
    """Split `text` into (segment, is_match) pairs; the template escapes each and marks matches."""
    if pattern is None:
        return ((text, False),)
    segments: list[tuple[str, bool]] = []
    position = 0
    for match in pattern.finditer(text):
        if match.start() > position:
            segments.append((text[position : match.start()], False))
        segments.append((match.group(), True))
        position = match.end()
    if position < len(text):
        segments.append((text[position:], False))
    return tuple(segments) or (("", False),)


def _display_line(number: int, raw: str, pattern: re.Pattern[str] | None) -> LogLine:
    text = display_text(raw)
    truncated = len(text) > MAX_LINE_CHARS
    if truncated:
        text = text[:MAX_LINE_CHARS]
    return LogLine(number=number, segments=highlight(text, pattern), truncated=truncated)


def build_log_view(
    chunks: Iterable[str], query: str = "", limit: int = INLINE_LINE_LIMIT, *, start: int | None = None,
    before: int | None = None,
) -> LogView:  # fmt: skip
    """A window of at most `limit` qualifying lines (every line, or with a query the matching ones).

    Which window: the last `limit` (the tail, by default); with `start`, the first `limit` from
    line number `start` on; with `before`, the last `limit` before line number `before` (the
    viewer's "earlier lines").

    1. Stream lines across chunks, numbering them from 1 as `grep -n` would.
    2. Keep the window's qualifying lines, count the ones before and after it (and all lines).
    3. Render (strip ANSI, collapse redraws, truncate, highlight) only the lines kept, so the
       cost of a huge log is one pass over it and `limit` rendered lines.
    """
    pattern = query_pattern(query)
    kept: deque[tuple[int, str]] = deque(maxlen=limit)
    total = matches = earlier = later = 0
    for total, raw in enumerate(iter_lines(chunks), start=1):
        if pattern is not None:
            if not pattern.search(display_text(raw)):
                continue
            matches += 1
        if start is not None:
            if total < start:
                earlier += 1
            elif len(kept) < limit:
                kept.append((total, raw))
            else:
                later += 1
        elif before is not None and total >= before:
            later += 1
        else:
            earlier += len(kept) == limit  # the deque drops its oldest line
            kept.append((total, raw))
    lines = [_display_line(number, raw, pattern) for number, raw in kept]
    return LogView(lines=lines, total_lines=total, query=query.strip(), match_count=matches, limit=limit,
                   earlier=earlier, later=later)  # fmt: skip


def grep_lines(chunks: Iterable[str], query: str) -> Iterator[str]:
    """Matching lines as `grep -n` prints them ("NUMBER:line\\n"), for the plain-text log URL."""
    pattern = query_pattern(query)
    for number, raw in enumerate(iter_lines(chunks), start=1):
        if pattern is None or pattern.search(display_text(raw)):
            yield f"{number}:{raw}\n"
