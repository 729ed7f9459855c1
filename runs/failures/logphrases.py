"""Advice's log evidence, noted as logs are written: which runs' logs hold which phrases.

The advice page (runs/clusters/advice.py) asks, per kind of evidence, which runs' logs mention
one of its phrases. Searching every stored chunk's text per view cost 0.4 s with 1.1 MB of logs
and 3.2 s with 10 MB. The log write path (`runs.ingest.append_log_chunk`, behind the push API,
the log collector, the launcher and the live demo) already holds each chunk's text, so it notes
the kinds a chunk holds as `LogPhrase(run, kind)` rows, once a run and kind however many chunks
repeat it; the page reads those rows, one per run and kind at most.

A phrase matches case-insensitively inside one chunk, as the `icontains` search did (a phrase
split across two chunks was not found then either). Chunks written some other way (a bulk load,
rows stored before this existed) carry `phrases_noted=False`; `catch_up` notes them, and advice
calls it first, so its answer never misses one; with every writer noting, it reads nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from runs.models import LogChunk, LogPhrase, Node

# Log phrases (matched case-insensitively), by what they are evidence of.
LOG_PHRASES: dict[str, tuple[str, ...]] = {
    "horovod": ("HorovodRunner", "sparkdl.horovod"),
    "genai": ("databricks_genai", "databricks-genai"),
    "serialize": (
        "serialized results",
        "cannot serialize a bytes object larger than 4 GiB",
        "maxResultSize",
    ),
    "checkpoint": ("checkpoint", "save_pretrained", "torch.save"),
    "unity_catalog": ("unity catalog",),
    "fgac": ("row filter", "column mask", "fine-grained", "streaming table", "materialized view"),
}
_LOWER = {kind: tuple(p.lower() for p in phrases) for kind, phrases in LOG_PHRASES.items()}
# Chunks noted per query by `catch_up`.
CATCH_UP_BATCH = 500


def kinds_in(text: str) -> set[str]:
    """The evidence kinds whose phrases `text` holds, case-insensitively."""
    lowered = text.lower()
    return {kind for kind, phrases in _LOWER.items() if any(p in lowered for p in phrases)}


def note_text(run_id: int, text: str) -> None:
    """Note the kinds a chunk of this run being stored holds (the write path; the chunk is stored noted)."""
    kinds = kinds_in(text)
    if kinds:
        LogPhrase.objects.bulk_create([LogPhrase(run_id=run_id, kind=k) for k in sorted(kinds)], ignore_conflicts=True)


def note(chunks: Iterable[LogChunk]) -> int:
    """Note the kinds these stored chunks hold for their runs, and mark them noted; returns rows added."""
    chunks = list(chunks)
    if not chunks:
        return 0
    run_of = dict(Node.objects.filter(pk__in={c.node_id for c in chunks}).values_list("pk", "attempt__run_id"))
    found = {(run_of[c.node_id], kind) for c in chunks for kind in kinds_in(c.text)}
    LogPhrase.objects.bulk_create(
        [LogPhrase(run_id=run_id, kind=kind) for run_id, kind in sorted(found)], ignore_conflicts=True
    )
    LogChunk.objects.filter(pk__in=[c.pk for c in chunks]).update(phrases_noted=True)
    return len(found)


def catch_up() -> int:
    """Note every chunk not noted yet (`logchunk_unnoted_idx`), in batches; returns the chunks noted."""
    done = 0
    unnoted = LogChunk.objects.filter(phrases_noted=False).order_by("pk").only("pk", "node_id", "text")
    while batch := list(unnoted[:CATCH_UP_BATCH]):
        note(batch)
        done += len(batch)
    return done
