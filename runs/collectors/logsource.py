"""The log source collector: node logs from a directory tree or a command, into LogChunk.

Two ways in, the first configured wins:

- `AIRBOARD_LOG_SOURCE_DIR`, laid out as `<run external id>/<attempt number>/<node index>.log`
  (what a sync job or a shared volume produces). Files are tailed: the cursor remembers per
  file (keyed by its path relative to the directory) the bytes already read, the next chunk
  seq and the file's inode, so each pass reads only what was appended.
- `AIRBOARD_LOG_SOURCE_COMMAND`, a template with `{run_id}`, `{attempt}` and `{node}` that
  prints one node's whole log. For active runs and runs that ended within the last hour,
  only the part beyond what is stored is appended; the stored text is the cursor.

Only complete lines are stored while a log may still grow: a partial last line waits for
its newline, so a line is never split across a pass (it is flushed once the run has ended
and the file stopped growing).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from stat import S_ISREG
from typing import Any, BinaryIO

from django.conf import settings
from django.db.models import Max, Q, Sum
from django.db.models.functions import Length
from django.utils import timezone

from dashboard.kit.commands import CollectorError
from runs.choices import CollectorKind, RunEventKind, RunOrigin, RunStatus
from runs.collectors.air_logs import fetch_node_log, mlflow_node_log
from runs.collectors.mlflow_client import MlflowSource
from runs.collectors.state import CollectResult, isolated, save_cursor, track
from runs.ingest import IngestConflict, append_log_chunk, clean_log_text, node_for
from runs.models import Attempt, LogChunk, Node, Run, RunEvent

__all__ = ["CollectorError", "collect_once"]

NOT_CONFIGURED = "logs: not configured (set AIRBOARD_LOG_SOURCE_DIR or AIRBOARD_LOG_SOURCE_COMMAND)"
# Bytes per LogChunk: small enough for one row and one request, large enough that a
# gigabyte log is a few thousand rows.
CHUNK_BYTES = 256 * 1024
# Bytes read from one file in one pass: a huge backlog is caught up over several passes
# instead of one pass running past the task's time limit.
MAX_BYTES_PER_FILE_PASS = 64 * 1024 * 1024
# The command source also re-reads runs that ended this recently: a node's last lines
# often land after the run source has seen the run end.
RECENTLY_ENDED = timedelta(hours=1)
LOG_PATH = re.compile(r"^(?P<run>[^/]+)/(?P<attempt>\d+)/(?P<node>\d+)\.log$")


def chunk_limit() -> int:
    return min(CHUNK_BYTES, settings.AIRBOARD_MAX_LOG_CHUNK_BYTES)


def split_lines(data: bytes, limit: int) -> list[bytes]:
    """Cut data into pieces of at most `limit` bytes, at line ends where possible.

    A single line longer than the limit is cut inside, but never inside a UTF-8 sequence
    (continuation bytes are 0b10xxxxxx), so each piece decodes on its own.
    """
    pieces: list[bytes] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        if end < len(data):
            newline = data.rfind(b"\n", start, end)
            if newline >= start:
                end = newline + 1
            else:
                while end > start + 1 and (data[end] & 0xC0) == 0x80:
                    end -= 1
        pieces.append(data[start:end])
        start = end
    return pieces


def _next_seq(run: Run, attempt: int, node: int) -> int:
    top = LogChunk.objects.filter(node__attempt__run=run, node__attempt__number=attempt, node__index=node).aggregate(
        top=Max("seq")
    )["top"]
    return 0 if top is None else top + 1


def _store(run: Run, attempt: int, node: int, seq: int, pieces: list[bytes]) -> tuple[int, int]:
    """Append pieces as chunks from `seq`; returns (chunks stored, lines stored). Resends are no-ops."""
    stored = lines = 0
    for offset, piece in enumerate(pieces):
        outcome, chunk = append_log_chunk(run, attempt, node, seq + offset, piece.decode("utf-8", "replace"))
        if outcome == "stored":
            stored += 1
            lines += chunk.line_count
    return stored, lines


@dataclass
class Totals:
    """Counts for the operator's summary line."""

    files: int = 0
    chunks: int = 0
    lines: int = 0

    def line(self, what: str) -> str:
        return f"logs: {self.files} {what}, {self.chunks} chunk(s), {self.lines} line(s) stored"


# --- Directory tree ---------------------------------------------------------------------------


def _adopt_stored_prefix(node: Node | None, handle: BinaryIO) -> int:
    """Bytes of the file already stored for this node (a lost cursor, a file seen anew), else 0.

    The stored chunks are compared with the start of the file, chunk by chunk, so a resend
    of the same file never stores its lines twice.
    """
    if node is None:
        return 0
    matched = 0
    handle.seek(0)
    for text in node.log_chunks.order_by("seq").values_list("text", flat=True).iterator():
        expected = text.encode("utf-8")
        if handle.read(len(expected)) != expected:
            return 0
        matched += len(expected)
    return matched


class RefusedPath(Exception):
    """A log path that is not a plain file inside the log directory (a symlink, a hard link)."""


def open_inside(root: Path, relative: str) -> BinaryIO:
    """Open `root/relative` for reading without ever leaving `root`.

    Whoever can write to a shared log volume can plant `<run>/1/0.log -> /etc/passwd` (or a
    link to a directory elsewhere): each component is opened relative to its parent's file
    descriptor with O_NOFOLLOW, so a symlink anywhere on the path fails instead of being
    followed, even one swapped in between the walk and the read. A file with more than one
    hard link may be another file of this machine under a second name (a hard link needs no
    read access to its target), so it is refused too.
    """
    parts = relative.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RefusedPath(f"{part}/ is a symbolic link or not a directory") from None
                raise
            os.close(fd)
            fd = child
        try:
            file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RefusedPath("is a symbolic link") from None
            raise
    finally:
        os.close(fd)
    stat = os.fstat(file_fd)
    problem = (
        "is not a regular file" if not S_ISREG(stat.st_mode) else "has other hard links" if stat.st_nlink > 1 else ""
    )
    if problem:
        os.close(file_fd)
        raise RefusedPath(problem)
    return os.fdopen(file_fd, "rb")


def tail_file(
    handle: BinaryIO, relative: str, entry: dict[str, Any], run: Run, attempt: int, node: int, result: CollectResult
) -> tuple[dict[str, Any], int, int]:
    """Read what was appended to one file since `entry`; returns (new entry, chunks, lines).

    1. A new inode, or a file smaller than what was read, is a rotation or truncation:
       start again from byte 0 (seq goes on, so the stored log keeps both) and note it.
    2. Read from the offset to the size seen now (the file may grow meanwhile), at most
       MAX_BYTES_PER_FILE_PASS.
    3. Keep a partial last line for the next pass, unless the run has ended and the file
       has not grown since the last pass (then nothing more will come).
    4. Store complete lines in chunks of at most CHUNK_BYTES; the caller saves the cursor.
    """
    stat = os.fstat(handle.fileno())
    if not entry:
        existing = Node.objects.filter(attempt__run=run, attempt__number=attempt, index=node).first()
        entry = {"offset": _adopt_stored_prefix(existing, handle), "seq": _next_seq(run, attempt, node)}
    offset, seq = int(entry["offset"]), int(entry["seq"])
    if ("ino" in entry and entry["ino"] != stat.st_ino) or stat.st_size < offset:
        result.say(f"logs: {relative} was truncated or rotated; reading it again from the start")
        RunEvent.objects.get_or_create(
            run=run,
            kind=RunEventKind.NOTE,
            ts=timezone.now(),
            gpu_index=None,
            defaults={"message": f"Log file {relative} was truncated or rotated; read again from the start."},
        )
        offset = 0
    end = min(stat.st_size, offset + MAX_BYTES_PER_FILE_PASS)
    handle.seek(offset)
    data = handle.read(end - offset)
    complete = data[: data.rfind(b"\n") + 1]
    finished = run.status in RunStatus.finished() and entry.get("size") == stat.st_size
    if finished or len(data) - len(complete) >= chunk_limit():
        # A run that ended leaves no newline to wait for; a line longer than a chunk cannot wait.
        complete = data
    pieces = split_lines(complete, chunk_limit())
    chunks, lines = _store(run, attempt, node, seq, pieces)
    new_entry = {"offset": offset + len(complete), "seq": seq + len(pieces), "ino": stat.st_ino, "size": stat.st_size}
    return new_entry, chunks, lines


def collector_run(external_id: str) -> Run | None:
    """The run a log directory `<external id>/` belongs to: the run source collector's own.

    The directory and the command carry the source's (Databricks') run id, which names the
    run the collector wrote; a run a key pushed with the same id (in any team, under any
    source) is a different run and never receives these logs. Two collector runs with one
    id (serverless and classic) cannot be told apart here: neither gets the logs.
    """
    found = list(Run.objects.filter(external_id=external_id, origin=RunOrigin.COLLECTOR)[:2])
    return found[0] if len(found) == 1 else None


def tail_directory(root: Path, state: Any, result: CollectResult) -> None:
    """One pass over every `<run>/<attempt>/<node>.log` under root; the cursor is saved per file."""
    if not root.is_dir():
        raise CollectorError(f"AIRBOARD_LOG_SOURCE_DIR {str(root)!r} is not a directory")
    cursor: dict[str, Any] = dict(state.cursor or {})
    files: dict[str, Any] = dict(cursor.get("files") or {})
    totals = Totals()
    runs: dict[str, Run | None] = {}
    seen: set[str] = set()

    def unreadable(exc: OSError) -> None:  # a directory os.walk cannot list
        where = Path(exc.filename).relative_to(root).as_posix() if exc.filename else "?"
        result.skip(f"{where}/", f"cannot list: {exc.strerror or type(exc).__name__}")

    for dirpath, _dirnames, filenames in os.walk(root, onerror=unreadable):
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            relative = path.relative_to(root).as_posix()
            match = LOG_PATH.match(relative)
            if match is None:
                continue
            seen.add(relative)
            external_id = match["run"]
            if external_id not in runs:
                runs[external_id] = collector_run(external_id)
                if runs[external_id] is None:
                    result.say(f"logs: skipped {external_id}/: no run with this external id (yet)")
            run = runs[external_id]
            if run is None:
                continue
            # One file's odd data (an attempt number beyond any column) skips that file only.
            with isolated(result, relative, savepoint=False):
                try:
                    with open_inside(root, relative) as handle:
                        entry, chunks, lines = tail_file(
                            handle, relative, files.get(relative) or {}, run, int(match["attempt"]), int(match["node"]),
                            result,
                        )  # fmt: skip
                except RefusedPath as exc:
                    result.say(f"logs: refused {relative}: {exc}; only plain files inside the log directory are read")
                    continue
                except IngestConflict as exc:
                    result.say(f"logs: skipped {relative}: {exc}")
                    continue
                except FileNotFoundError:  # removed between the walk and the read: gone, not an error
                    continue
                except OSError as exc:
                    # A socket (ENXIO), a file without read permission, an I/O error: that file is
                    # skipped and named, the rest of the shared directory (every team's) is read.
                    result.skip(relative, f"cannot read: {exc.strerror or type(exc).__name__}")
                    continue
                totals.files += 1
                totals.chunks += chunks
                totals.lines += lines
                files[relative] = entry
                # Saved after each file's chunks are stored: a crash re-reads one file, and its
                # chunks come again with the same seq and text, which append_log_chunk ignores.
                save_cursor(state, {**cursor, "files": files})
    # Forget files that are gone, so the cursor does not grow with every run ever seen.
    save_cursor(state, {**cursor, "files": {key: value for key, value in files.items() if key in seen}})
    result.items += totals.chunks
    result.say(totals.line("file(s)"))


# --- Command ----------------------------------------------------------------------------------


def fetch_with_command(template: str, result: CollectResult) -> None:
    """One pass of the log command over active and recently ended runs.

    1. Pick the runs still active or ended within RECENTLY_ENDED, and each attempt's nodes
       (node 0 where none is known yet).
    2. Fetch the node's whole log; what is stored (its length in characters) is the prefix
       to skip, so only the rest is appended. A log shorter than what is stored (a reset)
       is reported and left alone.
    3. While the attempt is active, keep the partial last line for the next pass.
    A node whose fetch fails is reported; the pass fails only when every fetch failed.
    """
    cutoff = timezone.now() - RECENTLY_ENDED
    # Only the collector's runs: their external id is the source's run id the command expects.
    runs = Run.objects.filter(
        Q(status__in=RunStatus.active()) | Q(ended_at__gte=cutoff), origin=RunOrigin.COLLECTOR
    ).order_by("pk")
    totals = Totals()
    failures: list[str] = []
    attempts = Attempt.objects.filter(run__in=runs).select_related("run").prefetch_related("nodes")
    for attempt in attempts.order_by("run_id", "number"):
        run = attempt.run
        for index in [node.index for node in attempt.nodes.all()] or [0]:
            where = f"{run.external_id} attempt {attempt.number} node {index}"
            text: str | None
            try:
                # Plain text, or the AI Runtime logs endpoint / `air logs -o json` (air_logs).
                text = fetch_node_log(
                    template, run.external_id, attempt.number, index, settings.AIRBOARD_COLLECTOR_TIMEOUT_SECONDS,
                    skip=partial(result.skip, where),
                )  # fmt: skip
            except CollectorError as exc:
                text = _mlflow_fallback(attempt, index, exc, result)
                if text is None:
                    failures.append(str(exc))
                    result.say(f"logs: {where}: {exc}")
                    continue
            # One node's odd log (a value the store refuses) is skipped; the other nodes go on.
            # No savepoint: each chunk commits as it is stored, as for the directory's files.
            with isolated(result, where, savepoint=False):
                chunks, lines = _append_new_part(run, attempt, index, text, result)
                totals.files += 1
                totals.chunks += chunks
                totals.lines += lines
    if failures and not totals.files:
        raise CollectorError(f"every log fetch failed ({len(failures)}); first: {failures[0]}")
    result.items += totals.chunks
    result.say(totals.line("node log(s)"))


def _mlflow_fallback(attempt: Attempt, index: int, error: CollectorError, result: CollectResult) -> str | None:
    """The node's log from its attempt's MLflow artifacts when the command failed (air_logs), else None."""
    uri = settings.AIRBOARD_MLFLOW_TRACKING_URI
    if not (uri and attempt.mlflow_run_id):
        return None
    try:
        text = mlflow_node_log(MlflowSource(uri), attempt.mlflow_run_id, attempt.number, index)
    except CollectorError as exc:
        result.say(f"logs: {attempt.run.external_id} attempt {attempt.number} node {index}: MLflow fallback: {exc}")
        return None
    if text is not None:
        result.say(f"logs: {attempt.run.external_id} attempt {attempt.number} node {index}: read from MLflow ({error})")
    return text


def _append_new_part(run: Run, attempt: Attempt, index: int, text: str, result: CollectResult) -> tuple[int, int]:
    text = clean_log_text(text)
    stored = LogChunk.objects.filter(node__attempt=attempt, node__index=index)
    stored_chars = stored.aggregate(chars=Sum(Length("text")))["chars"] or 0
    if len(text) < stored_chars:
        result.say(f"logs: {run.external_id} attempt {attempt.number} node {index}: shorter than stored; left alone")
        return 0, 0
    new = text[stored_chars:]
    if attempt.status in RunStatus.active():
        new = new[: new.rfind("\n") + 1]
    if not new:
        return 0, 0
    node_for(run, attempt.number, index)
    pieces = split_lines(new.encode(), chunk_limit())
    return _store(run, attempt.number, index, _next_seq(run, attempt.number, index), pieces)


def collect_once() -> CollectResult:
    """One pass of the log source: the directory if configured, else the command, else a note."""
    directory = settings.AIRBOARD_LOG_SOURCE_DIR.strip()
    command = settings.AIRBOARD_LOG_SOURCE_COMMAND.strip()
    if not directory and not command:
        return CollectResult(lines=[NOT_CONFIGURED])
    with track("logs", CollectorKind.LOGS, settings.AIRBOARD_LOG_SOURCE_INTERVAL_SECONDS) as (state, result):
        if directory:
            if command:
                result.say("logs: both a directory and a command are set; reading the directory")
            tail_directory(Path(directory), state, result)
        else:
            fetch_with_command(command, result)
    return result
