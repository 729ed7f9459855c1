"""Writing what sources push: run upserts, log chunks, and telemetry batches recorded.

Everything here is idempotent on natural keys: a resend updates or is recognised as a
duplicate, never doubles. A stale update (a late 'running' after 'succeeded') never moves a
run backwards. A recorded batch's rows are stored later by the worker
(`runs.ingest_process.process_batch`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction
from django.db.models import Max, Q, Value
from django.utils import timezone

from dashboard.kit.queue import enqueue_on_commit
from runs.choices import (
    GPUS_PER_NODE,
    AcceleratorType,
    BatchKind,
    RunOrigin,
    RunSource,
    RunStatus,
    accelerator_count_problem,
)
from runs.failures import logphrases
from runs.models import Attempt, IngestBatch, LogChunk, Node, Run
from runs.models.instance_types import instance_gpus
from runs.models.plausible import Span, merged_problems
from runs.telemetry.store import INSERT_COLUMNS

logger = logging.getLogger(__name__)

RUN_FIELDS = (
    "experiment_name", "creator", "state_message", "accelerator_type", "instance_type", "num_accelerators",
    "gpus_per_node", "region", "home_region", "submitted_at", "started_at", "ended_at", "timeout_minutes",
    "max_retries", "usage_policy_name", "parameters", "workload_yaml", "mlflow_run_id", "mlflow_url",
    "run_page_url",
)  # fmt: skip


class IngestConflict(Exception):
    """The write contradicts what is stored; nothing was changed."""


@dataclass
class UpsertResult:
    run: Run
    created: bool
    ignored: list[str] = field(default_factory=list)


def with_workload(data: dict[str, Any]) -> dict[str, Any]:
    """Validate `workload_yaml` (raising WorkloadError) and fill fields the caller left out from it."""
    from runs.workload.schema import parse_workload

    text = data.get("workload_yaml") or ""
    if not text.strip():
        return data
    workload = parse_workload(text)
    derived = workload.run_fields()
    merged = {key: value for key, value in derived.items() if value is not None}
    merged.update({key: value for key, value in data.items() if value not in (None, "", {})})
    return merged


def _moves_backwards(current: str, incoming: str) -> bool:
    """A finished run (or attempt) never returns to queued/running on a late message."""
    return current in RunStatus.finished() and incoming in RunStatus.active()


def _user_for(creator: str) -> User | None:
    if not creator:
        return None
    return User.objects.filter(Q(email__iexact=creator) | Q(username=creator)).order_by("pk").first()


class IngestInvalid(Exception):
    """A value the request may not carry (a NaN, an infinity); `field` names where it is."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _items(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """Every (path, item) of nested JSON-like data, mapping keys included as items of their own path.

    Iterative, so a deeply nested payload costs a loop, not the stack.
    """
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        path, item = stack.pop()
        yield path, item
        if isinstance(item, dict):
            for key, sub in item.items():
                sub_path = f"{path}.{key}" if path else str(key)
                yield sub_path, key
                stack.append((sub_path, sub))
        elif isinstance(item, list | tuple):
            stack += [(f"{path}[{i}]", sub) for i, sub in enumerate(item)]


def non_finite_paths(value: Any, prefix: str) -> list[str]:
    """Where NaN or an infinity sits in nested JSON-like data ('parameters.lr', 'attempts[0]...').

    JSON columns cannot hold them (SQLite's json check and PostgreSQL's jsonb refuse them),
    and Python's json reads `NaN`, `Infinity` and `1e400` without complaint.
    """
    return sorted(path for path, item in _items(value, prefix) if isinstance(item, float) and not math.isfinite(item))


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def unencodable_paths(value: Any, prefix: str) -> list[str]:
    """Where a string (a key or a value) holds a lone surrogate: JSON's "\\ud800" decodes to one.

    UTF-8 cannot encode it, so once stored every page showing it answered 500 (PostgreSQL's
    jsonb refuses it, with a misleading 422).
    """
    return sorted(path for path, item in _items(value, prefix) if isinstance(item, str) and _unencodable(item))


def upsert_run(team: Group, data: dict[str, Any], origin: str = RunOrigin.KEY) -> UpsertResult:
    """Create or update a run (and its attempts and nodes) by (source, external_id).

    Ownership (SECURITY.md, "Ownership"): a run belongs to the team and the kind of writer
    (`origin`) that wrote it first, and only they change it afterwards.

    1. Refuse NaN and infinities anywhere in `data` (IngestInvalid, naming the field).
    2. Find the run: the collector looks up its own runs by (source, external id); a key or an
       operator looks up within `team` only, so another team's run with the same id is
       invisible: it neither answers differently nor is touched. A run of the same team
       written by another kind of writer is a conflict: a collector never adopts a key's run,
       and a key never edits the collector's.
    3. Apply only the fields the caller sent; a status that would move backwards is ignored.
    4. Upsert attempts by number and their nodes by index, with the same status rule.
    An IntegrityError (a concurrent create of the same run) is retried once, as an update;
    a second one is an IngestConflict naming the run.
    """
    bad = non_finite_paths(data, "")
    if bad:
        raise IngestInvalid(bad[0], "must be a finite number (NaN and Infinity cannot be stored)")
    unencodable = unencodable_paths(data, "")
    if unencodable:
        raise IngestInvalid(unencodable[0], "contains a lone surrogate (\\ud800-\\udfff), which is not text")
    for attempt in range(2):
        try:
            with transaction.atomic():
                return _upsert_run_once(team, data, origin)
        except IntegrityError:
            if attempt:
                raise IngestConflict(
                    f"run {data['external_id']!r} ({data['source']}) was written concurrently and still "
                    "conflicts after a retry; send it again"
                ) from None
            logger.info("upsert of %s raced another writer; retrying once as an update", data["external_id"])
    raise AssertionError("unreachable")  # the loop returns or raises


def _owned_run(team: Group, source: str, external_id: str, origin: str) -> Run | None:
    """The run this writer may change, locked; None when it is theirs to create (step 2 above)."""
    if origin == RunOrigin.COLLECTOR:
        run = Run.objects.select_for_update().filter(source=source, external_id=external_id, origin=origin).first()
        other = None if run else Run.objects.filter(team=team, source=source, external_id=external_id).first()
    else:
        run = Run.objects.select_for_update().filter(team=team, source=source, external_id=external_id).first()
        other = run if run is not None and run.origin != origin else None
    if other is not None:
        raise IngestConflict(
            f"run {external_id!r} ({source}) was written by the {other.get_origin_display().lower()}; "
            f"only that writer may change it"
        )
    return run


def _upsert_run_once(team: Group, data: dict[str, Any], origin: str) -> UpsertResult:
    source, external_id = data["source"], data["external_id"]
    ignored: list[str] = []
    run = _owned_run(team, source, external_id, origin)
    created = run is None
    if run is None:
        run = Run(source=source, external_id=external_id, team=team, origin=origin)

    for name in RUN_FIELDS:
        if name in data and data[name] is not None:
            setattr(run, name, data[name])
    previous_status = None if created else run.status
    status = data.get("status")
    if status:
        if not created and _moves_backwards(run.status, status):
            ignored.append(f"status: stored '{run.status}' is final, '{status}' ignored")
        else:
            run.status = status
    if "gpus_per_node" not in data and run.accelerator_type:
        run.gpus_per_node = GPUS_PER_NODE.get(AcceleratorType(run.accelerator_type), run.gpus_per_node)
    elif "gpus_per_node" not in data and origin == RunOrigin.KEY and run.source == RunSource.CLASSIC:
        # A pushed classic run is billed by instance: its nodes hold what its instance type holds.
        spec = instance_gpus(run.instance_type) if run.instance_type else None
        run.gpus_per_node = max(run.gpus_per_node, spec.count) if spec else run.gpus_per_node
    if "creator" in data:
        run.user = _user_for(run.creator)
    _check_shape(run)
    run.save()

    ignored += _upsert_attempts(run, data.get("attempts") or [])
    if origin == RunOrigin.KEY:
        _check_merged(run)  # rolls the whole upsert back when the merged run is implausible
    if run.status != previous_status:
        classify_later(run)  # on commit, and only for failed runs
    return UpsertResult(run=run, created=created, ignored=ignored)


def _check_shape(run: Run) -> None:
    if run.accelerator_type:
        problem = accelerator_count_problem(run.accelerator_type, run.num_accelerators)
        if problem:
            raise IngestConflict(problem)
    if run.started_at and run.ended_at and run.ended_at < run.started_at:
        raise IngestConflict("ended_at is before started_at")


ATTEMPT_FIELDS = ("started_at", "ended_at", "exit_code", "mlflow_run_id", "state_message")
NODE_FIELDS = ("host", "started_at", "ended_at", "exit_code")


def _upsert_attempts(run: Run, attempts: list[dict[str, Any]]) -> list[str]:
    """Upsert a run's attempts by number and their nodes by index, in a constant number of queries.

    One query reads the attempts named, one the nodes of those attempts; new ones are
    inserted and changed ones updated in bulk (1,000 attempts x 4 nodes took 17.8 s as a
    get_or_create and a save each). A status that would move backwards is ignored, as for
    the run. A concurrent insert raises IntegrityError, which `upsert_run` retries once.
    """
    ignored: list[str] = []
    if not attempts:
        return ignored
    stored = {a.number: a for a in Attempt.objects.filter(run=run, number__in=[d["number"] for d in attempts])}
    new_attempts: list[Attempt] = []
    for data in attempts:
        attempt = stored.get(data["number"])
        if attempt is None:
            attempt = stored[data["number"]] = Attempt(run=run, number=data["number"])
            new_attempts.append(attempt)
        for name in ATTEMPT_FIELDS:
            if data.get(name) not in (None, ""):
                setattr(attempt, name, data[name])
        status = data.get("status")
        if status:
            if _moves_backwards(attempt.status, status):
                ignored.append(f"attempts[{attempt.number}].status: stored '{attempt.status}' is final")
            else:
                attempt.status = status
    Attempt.objects.bulk_create(new_attempts, batch_size=500)
    fresh = {id(a) for a in new_attempts}
    Attempt.objects.bulk_update(
        [a for a in stored.values() if id(a) not in fresh], ["status", *ATTEMPT_FIELDS], batch_size=500
    )
    if any(a.pk is None for a in new_attempts):  # backends that return no ids from a bulk insert
        stored = {a.number: a for a in Attempt.objects.filter(run=run, number__in=list(stored))}
    wanted = [(stored[d["number"]], n) for d in attempts for n in d.get("nodes") or []]
    if not wanted:
        return ignored
    nodes = {
        (n.attempt_id, n.index): n
        for n in Node.objects.filter(attempt__in={a.pk for a, _ in wanted}, index__in={n["index"] for _, n in wanted})
    }
    new_nodes: list[Node] = []
    for attempt, data in wanted:
        node = nodes.get((attempt.pk, data["index"]))
        if node is None:
            node = nodes[(attempt.pk, data["index"])] = Node(attempt=attempt, index=data["index"])
            new_nodes.append(node)
        for name in NODE_FIELDS:
            if data.get(name) not in (None, ""):
                setattr(node, name, data[name])
        node_status = data.get("status")
        if node_status and not _moves_backwards(node.status, node_status):
            node.status = node_status
    Node.objects.bulk_create(new_nodes, batch_size=500)
    fresh = {id(n) for n in new_nodes}
    Node.objects.bulk_update(
        [n for n in nodes.values() if id(n) not in fresh], ["status", *NODE_FIELDS], batch_size=500
    )
    return ignored


def _check_merged(run: Run) -> None:
    """The money bounds of a pushed run as stored after the merge (`runs.models.plausible`), or IngestInvalid."""
    spans = [
        Span(f"attempts[{number}].", start, end)
        for number, start, end in Attempt.objects.filter(run=run)
        .order_by("number")
        .values_list("number", "started_at", "ended_at")
    ]
    problems = merged_problems(run, spans, timezone.now())
    if problems:
        raise IngestInvalid(*problems[0])


def clean_log_text(text: str) -> str:
    """Keep bad bytes visible instead of failing: lone surrogates and NULs become U+FFFD.

    PostgreSQL text cannot hold NUL, and a str with lone surrogates cannot be encoded to UTF-8.
    """
    cleaned = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return cleaned.replace("\x00", "\ufffd")


def node_for(run: Run, attempt_number: int | None, node_index: int, host: str = "") -> Node:
    """The node a pushed row belongs to, created on first sight (agents may report before the source)."""
    if attempt_number is None:
        attempt = run.attempts.order_by("-number").first()
        if attempt is None:
            attempt, _ = Attempt.objects.get_or_create(
                run=run, number=1, defaults={"status": run.status, "started_at": run.started_at}
            )
    else:
        attempt, _ = Attempt.objects.get_or_create(run=run, number=attempt_number, defaults={"status": run.status})
    node, _ = Node.objects.get_or_create(attempt=attempt, index=node_index, defaults={"host": host})
    if host and not node.host:
        Node.objects.filter(pk=node.pk).update(host=host)
    return node


# A node a pushed row names: (run, attempt number or None for the run's latest, node index, host).
NodeWanted = tuple[Run, int | None, int, str]


def nodes_for(wanted: list[NodeWanted]) -> dict[tuple[int, int | None, int], int]:
    """`node_for` for many nodes at once: (run id, attempt as asked, node index) -> node id.

    A constant number of queries however many nodes (a 10,000-node push asked three to five
    each: 25-47 s with the write lock held): the runs' latest attempts, the attempts and the
    nodes named, each read in one query and the missing ones inserted in bulk (conflicts
    ignored: a concurrent writer's row is read back). A node created here gets the host its
    first row names; a stored node without a host gets one.
    """
    if not wanted:
        return {}
    runs = {run.pk: run for run, *_ in wanted}
    latest_of = {run.pk for run, attempt, _, _ in wanted if attempt is None}
    latest: dict[int, int] = dict(
        Attempt.objects.filter(run_id__in=latest_of)
        .values("run_id")
        .annotate(n=Max("number"))
        .values_list("run_id", "n")
    )
    first = [Attempt(run=runs[r], number=1, status=runs[r].status, started_at=runs[r].started_at)
             for r in latest_of if r not in latest]  # fmt: skip
    Attempt.objects.bulk_create(first, ignore_conflicts=True)
    latest |= {attempt.run_id: 1 for attempt in first}
    number = {(run.pk, attempt): attempt if attempt is not None else latest[run.pk] for run, attempt, _, _ in wanted}
    pairs = {(run_id, n) for (run_id, _), n in number.items()}

    def read_attempts() -> dict[tuple[int, int], int]:
        found = Attempt.objects.filter(run_id__in={r for r, _ in pairs}, number__in={n for _, n in pairs})
        return {(r, n): pk for pk, r, n in found.values_list("pk", "run_id", "number") if (r, n) in pairs}

    attempts = read_attempts()
    missing = [Attempt(run=runs[r], number=n, status=runs[r].status) for r, n in pairs if (r, n) not in attempts]
    if missing:
        Attempt.objects.bulk_create(missing, ignore_conflicts=True)
        attempts = read_attempts()
    hosts: dict[tuple[int, int], str] = {}
    for run, attempt, index, host in wanted:
        key = (attempts[(run.pk, number[(run.pk, attempt)])], index)
        if host or key not in hosts:
            hosts[key] = hosts.get(key) or host

    def read_nodes() -> dict[tuple[int, int], tuple[int, str]]:
        found = Node.objects.filter(attempt_id__in={a for a, _ in hosts}, index__in={i for _, i in hosts})
        return {
            (a, i): (pk, h) for pk, a, i, h in found.values_list("pk", "attempt_id", "index", "host") if (a, i) in hosts
        }

    nodes = read_nodes()
    new = [Node(attempt_id=a, index=i, host=hosts[(a, i)]) for a, i in hosts if (a, i) not in nodes]
    if new:
        Node.objects.bulk_create(new, ignore_conflicts=True)
        nodes = read_nodes()
    named: dict[str, list[int]] = defaultdict(list)
    for key, (pk, host) in nodes.items():
        if hosts[key] and not host:
            named[hosts[key]].append(pk)
    for host, pks in named.items():
        Node.objects.filter(pk__in=pks, host="").update(host=host)
    return {
        (run.pk, attempt, index): nodes[(attempts[(run.pk, number[(run.pk, attempt)])], index)][0]
        for run, attempt, index, _ in wanted
    }


def append_log_chunk(
    run: Run, attempt: int, node_index: int, seq: int, text: str, host: str = ""
) -> tuple[str, LogChunk]:
    """Store one chunk; the same chunk again is 'duplicate', a different text for its seq a conflict.

    A concurrent writer of the same (node, seq) makes the insert fail: the stored chunk is
    then read again once (and is a duplicate or a conflict), never retried without end.
    """
    text = clean_log_text(text)
    for retry in range(2):
        with transaction.atomic():
            node = node_for(run, attempt, node_index, host)
            existing = LogChunk.objects.filter(node=node, seq=seq).first()
            if existing is not None:
                if existing.text == text:
                    return "duplicate", existing
                raise IngestConflict(
                    f"chunk seq {seq} of attempt {attempt} node {node_index} is already stored with other text"
                )
            try:
                with transaction.atomic():
                    chunk = LogChunk.objects.create(
                        node=node, seq=seq, text=text, line_count=_count_lines(text), phrases_noted=True
                    )
                    logphrases.note_text(run.pk, text)  # advice's evidence: its page never scans log text
            except IntegrityError:
                if retry:
                    raise IngestConflict(
                        f"chunk seq {seq} of attempt {attempt} node {node_index} conflicts with a concurrent write"
                    ) from None
                continue
            classify_later(run)  # late logs of a failed run: classify again
        return "stored", chunk
    raise AssertionError("unreachable")  # the loop returns or raises


def _count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


# --- Telemetry batches ----------------------------------------------------------------------

# A recorded sample row: every column the insert writes but `source`, which is per batch.
SAMPLE_COLUMNS = INSERT_COLUMNS[:-1]
# A sample row: ids and time first, then the value fields in this order.
SAMPLE_VALUE_COLUMNS = SAMPLE_COLUMNS[4:]
METRIC_COLUMNS = ("run_id", "key", "step", "ts", "value")
# A sample row's width before the NVLink columns were appended after `processes`.
SAMPLE_V1_WIDTH = SAMPLE_COLUMNS.index("processes") + 1


def trim_sample_rows(rows: list[list[Any]]) -> list[list[Any]]:
    """Rows without their trailing missing values past the first layout's width, in place.

    A batch without NVLink then records (and hashes) exactly as it did before the columns were
    added, so one re-sent across the upgrade is still a duplicate; process_batch pads them back.
    """
    for row in rows:
        while len(row) > SAMPLE_V1_WIDTH and row[-1] is None:
            row.pop()
    return rows


# Where orjson's text could differ from json.dumps's: an exponent (orjson 1e+16 and 1e-20 may
# be spelt otherwise), a float under 1e-4 (json writes 1e-05, orjson 0.00001), DEL (json
# escapes it). Plain substring tests (a string value holding one only costs the slow path).
_ORJSON_UNSAFE = (b"e+", b"e-", b"E+", b"E-", b"0.0000", b"\x7f")
# Every exponent holds one of these: a text without either (a batch of NVML numbers and
# times) skips the four two-byte scans, ~7 ms of a 10,000-row batch (a one-byte scan is memchr's).
_EXPONENT_LETTERS = (b"e", b"E")


def _orjson_unsafe(text: bytes) -> bool:
    """Whether the text holds a spelling where orjson's and json.dumps's may differ (_ORJSON_UNSAFE)."""
    if b"\x7f" in text or b"0.0000" in text:
        return True
    if not any(letter in text for letter in _EXPONENT_LETTERS):
        return False
    return any(marker in text for marker in _ORJSON_UNSAFE)


ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def rows_json(rows: list[list[Any]]) -> str:
    """The rows as compact JSON: hashed for the duplicate check, and stored as they are.

    The text is json.dumps's (sorted keys, ASCII escapes), byte for byte, so the hash of a
    batch is the one it had before and a batch re-sent across an upgrade is still a duplicate.
    orjson writes it five times faster and identically for everything a sample row holds,
    except the cases _ORJSON_UNSAFE and a non-ASCII character catch; those take json.dumps.
    """
    try:
        # Datetimes and dataclasses go to `default` as json.dumps sends them (str), not orjson's own way.
        text = orjson.dumps(rows, option=ORJSON_OPTIONS, default=str)
    except orjson.JSONEncodeError:  # an integer past 64 bits: json.dumps writes it
        text = b"\x80"
    if text.isascii() and not _orjson_unsafe(text):
        return text.decode()
    return json.dumps(rows, separators=(",", ":"), sort_keys=True, default=str)


def _content_hash(rows_json: str, extra: str = "") -> str:
    return hashlib.sha256((rows_json + extra).encode()).hexdigest()


def record_batch(team: Group, kind: str, rows: list[list[Any]], source: str = "") -> tuple[IngestBatch, bool]:
    """Store the batch durably (before any queueing); returns (batch, duplicate).

    The rows are serialized once: the JSON text that is hashed is also what the database
    stores, as it is (runs.models.collection.JSONTextField), instead of JSONField encoding the
    same 10,000 rows again and PostgreSQL parsing them into jsonb.
    """
    if kind == BatchKind.GPU_SAMPLES:
        trim_sample_rows(rows)
    text = rows_json(rows)
    digest = _content_hash(text, source)
    existing = IngestBatch.objects.filter(team=team, kind=kind, content_hash=digest).first()
    if existing is not None:
        return existing, True
    body = {"source": source, "rows": rows}
    stored = Value(f'{{"source":{json.dumps(source)},"rows":{text}}}')  # stored as it is (JSONTextField)
    try:
        with transaction.atomic():
            batch = IngestBatch.objects.create(
                team=team, kind=kind, content_hash=digest, rows=stored, row_count=len(rows)
            )
    except IntegrityError:
        return IngestBatch.objects.get(team=team, kind=kind, content_hash=digest), True
    batch.rows = body  # the instance holds what was stored, not the expression that stored it
    return batch, False


def classify_later(run: Run) -> None:
    """Queue `runs.classify_run` for a failed run once the current transaction commits.

    Classification reads whole logs: it runs with the collectors (the collect queue), never on
    the ingest queue. A broker that is down is logged; `manage.py classify_runs` catches up.
    """
    if run.status in RunStatus.failed():
        enqueue_on_commit("runs.classify_run", [run.pk])  # routed to "collect" by name


def enqueue_batch(batch: IngestBatch, queue: str | None = None) -> None:
    """Queue the batch's task once the transaction that recorded it commits.

    If the broker is down the batch stays pending in the database and the sweeper
    (`runs.requeue_pending_batches`) queues it again later: nothing accepted is lost.
    `queue` overrides the routed queue (tests use a private one).
    """
    name = "runs.ingest_gpu_samples" if batch.kind == BatchKind.GPU_SAMPLES else "runs.ingest_metrics"
    enqueue_on_commit(name, [batch.pk], queue=queue)


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch's 50,000-odd dicts and lists are built.

    They hold no cycles (reference counting frees them), but their allocation triggers the
    collector again and again over everything the process holds: ~15% of the accept path,
    and ~40% of a worker's Python time for a batch (186 -> 107 ms).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
