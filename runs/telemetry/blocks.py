"""The compacted raw tier: one GpuSampleBlock per (run, node, minute, source), all GPUs of the node.

The raw tier has a hot part and a cold part, as TimescaleDB's compressed chunks do:

    part   table           holds                                      written by
    hot    GpuSample       the last AIRBOARD_TELEMETRY_COMPACT_AFTER   store_sample_rows (runs/telemetry/store.py)
                           _MINUTES, one row per sample
    cold   GpuSampleBlock  everything older, one row per node-minute   compact_samples (beat, every minute)

A block's `data` holds the minute's samples of every GPU of the node, ordered by (GPU, time),
column by column: the GPU indexes, the microsecond offsets into the minute, then each value
field as one pcodec chunk (pcodec finds the integer steps, the quantised and the slowly moving
series that GPU counters are, losslessly), a null mask where an integer field has gaps, and the
process lists as zlib-compressed JSON. A field no sample reported costs one byte, a constant
one nine; a float field's None is NaN (stored values are always finite: the API refuses
infinities and NaN, the importers and MLflow store them as None). One block per node rather
than per GPU: pcodec's per-chunk header (~28 bytes a column) and the row's own overhead and
index entries are shared by the node's 8 GPUs, which measured ~10 bytes a sample less.

Invariants that keep ingest idempotent and the rollups exact:
- A (run, node, minute) is either compacted or open. `store_sample_rows` reopens a compacted
  minute a late batch touches (`reopen_minutes`: the block goes back to GpuSample rows) before
  inserting, so the natural key still refuses a re-sent sample and the minute rollup is rebuilt
  from every sample of that minute.
- A batch with samples in a minute that compaction is folding waits for it (`minute_lock`),
  then reopens the new block: no hot row sits beside a block, so readers read the hot table
  only in the node-minutes no block covers (`raw_rows_of_runs`), never the rows compaction
  deleted and vacuum has not removed yet. A row written beside a block some other way (a
  restore) is not read until the next pass merges it (the block's sample wins at an instant
  both hold, as the natural key would have it).
"""

from __future__ import annotations

import logging
import math
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, Q, QuerySet
from django.utils import timezone
from pcodec import ChunkConfig, standalone

from runs.choices import BatchKind, BatchStatus
from runs.models import GpuSample, GpuSampleBlock, IngestBatch, Node
from runs.telemetry import hot_reads

logger = logging.getLogger(__name__)

# The value fields a block stores, in order (GpuSample's, between `ts` and `processes`).
FLOAT_FIELDS = frozenset(
    f.name for f in GpuSample._meta.concrete_fields if f.get_internal_type() == "FloatField"
)  # fmt: skip
INT_FIELDS = frozenset(
    f.name for f in GpuSample._meta.concrete_fields if f.get_internal_type() == "BigIntegerField"
)  # fmt: skip
VALUE_FIELDS = tuple(f.name for f in GpuSample._meta.concrete_fields if f.name in FLOAT_FIELDS | INT_FIELDS)
# Fields added after version 1: a version 1 block has no column for them (they read None), and
# rows carry them after `processes`, as stored ingest batches do (runs/ingest.SAMPLE_COLUMNS).
ADDED_IN_V2 = ("nvlink_tx_kbps", "nvlink_rx_kbps")
V1_VALUE_FIELDS = tuple(name for name in VALUE_FIELDS if name not in ADDED_IN_V2)
# The value fields a block of each format version holds, in the order they are written.
FIELDS_BY_VERSION = {1: V1_VALUE_FIELDS, 2: VALUE_FIELDS}
# Row shape of `block_rows` and GpuSample inserts (runs/telemetry/store.INSERT_COLUMNS order).
ROW_COLUMNS = ("run_id", "node_id", "gpu_index", "ts", *V1_VALUE_FIELDS, "processes", *ADDED_IN_V2, "source")
_ROW_AT = {name: i for i, name in enumerate(ROW_COLUMNS)}
_PROCESSES_AT = _ROW_AT["processes"]

FORMAT_VERSION = 2
# Field tags in `data`.
ALL_NULL, FLOATS, INTS, INTS_WITH_NULLS, CONSTANT_FLOAT, CONSTANT_INT = 0, 1, 2, 3, 4, 5
NO_PROCESSES, PROCESSES = 0, 1
# Minutes one compaction pass folds at most: a pass stays short; the next one continues.
MINUTES_PER_PASS = 30
# Minutes OR-ed into one query when a late batch reopens them (see reopen_minutes).
MINUTES_PER_QUERY = 200
PCODEC = ChunkConfig()
# pg_advisory_xact_lock(MINUTE_LOCK, minutes since 1970): held alone by the compaction pass folding
# that minute, shared by a batch writing samples into it (see `minute_lock`).
MINUTE_LOCK = 0x636F_6D70  # "comp"
ONE_MINUTE = timedelta(minutes=1)


def _constant(values: Sequence[Any]) -> bool:
    """Every value the same, type and bits included (0.0 and -0.0 differ, 1 and 1.0 too)."""
    first = values[0]
    if first is None:
        return False
    same = all(v == first and type(v) is type(first) for v in values)
    if same and first == 0 and isinstance(first, float):
        return all(math.copysign(1.0, v) == math.copysign(1.0, first) for v in values)
    return same


def _chunk(values: np.ndarray) -> bytes:
    data = standalone.simple_compress(np.ascontiguousarray(values), PCODEC)
    return struct.pack("<I", len(data)) + data


def encode_block(
    gpus: Sequence[int], offsets_us: Sequence[int], columns: Mapping[str, Sequence[Any]], processes: Sequence[Any]
) -> bytes:
    """One node-minute as bytes: GPU indexes, offsets (microseconds into the minute), value fields, process lists.

    Samples should come in (GPU, offset) order (the columns compress best so). Lossless for
    every value GpuSample can hold (floats are kept as float64 bits; integers as int64), None
    included.
    """
    count = len(offsets_us)
    out = [
        struct.pack("<BH", FORMAT_VERSION, count),
        _chunk(np.asarray(gpus, dtype=np.int64)),
        _chunk(np.asarray(offsets_us, dtype=np.int64)),
    ]
    for name in VALUE_FIELDS:
        values = columns.get(name) or [None] * count  # a field the caller has no column for: all missing
        present = [v is not None for v in values]
        first = values[0]
        if not any(present):
            out.append(bytes([ALL_NULL]))
        elif _constant(values):
            # Memory total, power limit, ECC counters: one value for the minute.
            if name in FLOAT_FIELDS:
                out.append(bytes([CONSTANT_FLOAT]) + struct.pack("<d", first))
            else:
                out.append(bytes([CONSTANT_INT]) + struct.pack("<q", first))
        elif name in FLOAT_FIELDS:
            floats = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
            out.append(bytes([FLOATS]) + _chunk(floats))
        elif all(present):
            out.append(bytes([INTS]) + _chunk(np.array(values, dtype=np.int64)))
        else:
            mask = np.packbits(np.array(present, dtype=bool)).tobytes()
            ints = np.array([0 if v is None else v for v in values], dtype=np.int64)
            out.append(bytes([INTS_WITH_NULLS]) + _chunk(ints) + mask)
    if any(p is not None for p in processes):
        packed = zlib.compress(orjson.dumps(list(processes)))
        out.append(bytes([PROCESSES]) + struct.pack("<I", len(packed)) + packed)
    else:
        out.append(bytes([NO_PROCESSES]))
    return b"".join(out)


@dataclass(frozen=True)
class DecodedBlock:
    gpus: list[int]
    offsets_us: list[int]
    columns: dict[str, list[Any]]
    processes: list[Any]


def _read_chunk(data: memoryview, at: int) -> tuple[np.ndarray, int]:
    (length,) = struct.unpack_from("<I", data, at)
    at += 4
    return standalone.simple_decompress(bytes(data[at : at + length])), at + length


def _read_header(view: memoryview) -> tuple[tuple[str, ...], int, np.ndarray, np.ndarray, int]:
    """A block's stored fields (by its version), sample count, GPU indexes, offsets, and where its columns start."""
    version, count = struct.unpack_from("<BH", view, 0)
    stored = FIELDS_BY_VERSION.get(version)
    if stored is None:
        raise ValueError(f"GpuSampleBlock data version {version}, expected one of {sorted(FIELDS_BY_VERSION)}")
    gpus, at = _read_chunk(view, 3)
    offsets, at = _read_chunk(view, at)
    return tuple(stored), count, gpus, offsets, at


def decode_block(data: bytes | memoryview, fields: Iterable[str] | None = None) -> DecodedBlock:
    """The inverse of `encode_block`; with `fields`, only those value fields are decompressed (the rest read None)."""
    view = memoryview(data)
    stored, count, gpus, offsets, at = _read_header(view)
    # Fields a block of an older version never held read as missing.
    columns: dict[str, list[Any]] = {name: [None] * count for name in VALUE_FIELDS if name not in stored}
    wanted = set(VALUE_FIELDS if fields is None else fields)
    for name in stored:
        tag = view[at]
        at += 1
        if name not in wanted and tag in (FLOATS, INTS, INTS_WITH_NULLS):
            (length,) = struct.unpack_from("<I", view, at)
            at += 4 + length + ((count + 7) // 8 if tag == INTS_WITH_NULLS else 0)
            columns[name] = [None] * count
        elif tag == ALL_NULL:
            columns[name] = [None] * count
        elif tag in (CONSTANT_FLOAT, CONSTANT_INT):
            (value,) = struct.unpack_from("<d" if tag == CONSTANT_FLOAT else "<q", view, at)
            at += 8
            columns[name] = [value] * count
        elif tag == FLOATS:
            values, at = _read_chunk(view, at)
            columns[name] = [None if v != v else v for v in values.tolist()]  # NaN != NaN
        else:
            values, at = _read_chunk(view, at)
            ints = values.tolist()
            if tag == INTS_WITH_NULLS:
                mask_len = (count + 7) // 8
                present = np.unpackbits(np.frombuffer(view[at : at + mask_len], dtype=np.uint8))[:count]
                at += mask_len
                ints = [v if p else None for v, p in zip(ints, present.tolist(), strict=True)]
            columns[name] = ints
    if view[at] == PROCESSES and (fields is None or "processes" in wanted):
        (length,) = struct.unpack_from("<I", view, at + 1)
        processes = orjson.loads(zlib.decompress(bytes(view[at + 5 : at + 5 + length])))
    else:
        processes = [None] * count
    return DecodedBlock(gpus=gpus.tolist(), offsets_us=offsets.tolist(), columns=columns, processes=processes)


def block_rows(block: GpuSampleBlock) -> list[list[Any]]:
    """A block's samples as ROW_COLUMNS rows (aware `ts`), in time order."""
    decoded = decode_block(block.data)
    rows = []
    for i, (gpu, offset) in enumerate(zip(decoded.gpus, decoded.offsets_us, strict=True)):
        ts = block.minute + timedelta(microseconds=offset)
        v1 = [decoded.columns[name][i] for name in V1_VALUE_FIELDS]
        added = [decoded.columns[name][i] for name in ADDED_IN_V2]
        rows.append([block.run_id, block.node_id, gpu, ts, *v1, decoded.processes[i], *added, block.source])
    return rows


def _encode_rows(minute: datetime, rows: Sequence[Sequence[Any]]) -> bytes:
    """ROW_COLUMNS rows of one block, sorted by (GPU, ts), as `encode_block` bytes."""
    offsets = [(row[3] - minute) // timedelta(microseconds=1) for row in rows]
    columns = {name: [row[_ROW_AT[name]] for row in rows] for name in VALUE_FIELDS}
    return encode_block([row[2] for row in rows], offsets, columns, [row[_PROCESSES_AT] for row in rows])


def _minute(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(second=0, microsecond=0)


def minute_lock(minutes: Iterable[datetime], *, shared: bool) -> None:
    """Hold these minutes' compaction lock to the end of the transaction (PostgreSQL; SQLite has one writer).

    Compaction takes a minute's lock alone before reading its rows; `store_sample_rows` takes
    the minutes of its late samples shared before looking for their blocks. A batch therefore
    either lands before the pass reads the minute (its rows are folded too) or after the block
    is committed (it reopens the block): no hot row is left beside a block, so readers skip the
    hot table wherever a block covers the node-minute (`raw_rows_of_runs`).
    """
    numbers = sorted({int(minute.timestamp()) // 60 for minute in minutes})
    if not numbers or connection.vendor != "postgresql":
        return
    sql = (
        "SELECT pg_advisory_xact_lock_shared(%s, m) FROM unnest(%s::int[]) AS m"
        if shared
        else "SELECT pg_advisory_xact_lock(%s, m) FROM unnest(%s::int[]) AS m"
    )
    with connection.cursor() as cursor:
        # In the array's (sorted) order: two batches never wait on each other crosswise.
        cursor.execute(sql, [MINUTE_LOCK, numbers])


def compact_cutoff(now: datetime | None = None) -> datetime:
    """The latest cutoff a pass may use: minutes that start before this instant may be compacted.

    AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES before `now`, as a minute start. A pass may hold
    back further (`held_cutoff`), never less: `store_sample_rows` looks for blocks before it.
    """
    now = now or timezone.now()
    return _minute(now - timedelta(minutes=settings.AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES))


def held_cutoff(now: datetime | None = None) -> datetime:
    """The cutoff a compaction pass uses: `compact_cutoff`, held back while GPU-sample batches wait.

    The hot window is kept short (3 minutes by default: the agent ships at least once a
    minute), because every read of a live run's last minutes pays per hot row and GPU: a
    64-GPU run's 15-minute panels read 37,900 hot rows in 16 ms with a 10-minute window,
    9,500 in 5 ms with 3. A short window must not turn a worker backlog into reopened
    blocks (each late batch would undo a block, and the next pass redo it, just when the
    workers are behind), so the cutoff also stays COMPACT_AFTER minutes before the oldest
    GPU-sample batch still pending (its samples were taken before it was received). The hold
    is bounded: never more than AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES before `now`, so one
    team's stuck batches cannot keep every team's minutes hot.
    """
    now = now or timezone.now()
    cutoff = compact_cutoff(now)
    oldest = (
        IngestBatch.objects.filter(status=BatchStatus.PENDING, kind=BatchKind.GPU_SAMPLES)
        .order_by("received_at")
        .values_list("received_at", flat=True)
        .first()
    )
    if oldest is None or compact_cutoff(oldest) >= cutoff:
        return cutoff
    floor = min(cutoff, _minute(now - timedelta(minutes=settings.AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES)))
    return max(compact_cutoff(oldest), floor)


@dataclass(frozen=True)
class CompactResult:
    minutes: int
    samples: int
    blocks: int


def compact_samples(now: datetime | None = None, max_minutes: int = MINUTES_PER_PASS) -> CompactResult:
    """Fold the hot rows of closed minutes into blocks, one minute per transaction, oldest first.

    1. The oldest hot row before the cutoff names the minute to fold.
    2. In one transaction: read that minute's rows (`gpusample_ts_idx` range), lock the blocks
       already there for the same (series, minute) keys (rows that landed beside a block),
       merge (the block's sample wins over a row at the same instant), upsert the blocks and
       delete exactly the rows read.
    3. Repeat for at most `max_minutes` minutes; the next pass continues.
    Idempotent and safe beside ingest: a row that arrives for the minute after step 2 read it
    stays a row and is merged next pass.
    """
    cutoff = held_cutoff(now)
    minutes = samples = blocks = 0
    pending = GpuSample.objects.filter(ts__lt=cutoff)
    while minutes < max_minutes:
        # Searched from the minute just folded on: the index entries of the rows deleted
        # before it are dead until vacuum, and a search from the start walked them all again
        # each time (3M samples folded at 5,900/s instead of ~16,000).
        oldest = pending.order_by("ts").values_list("ts", flat=True).first()
        if oldest is None:
            break
        minute = _minute(oldest)
        pending = GpuSample.objects.filter(ts__gte=minute + ONE_MINUTE, ts__lt=cutoff)
        folded, written = _compact_minute(minute)
        minutes += 1
        samples += folded
        blocks += written
    return CompactResult(minutes=minutes, samples=samples, blocks=blocks)


def _compact_minute(minute: datetime) -> tuple[int, int]:
    end = minute + ONE_MINUTE
    with transaction.atomic():
        minute_lock([minute], shared=False)
        hot = list(GpuSample.objects.filter(ts__gte=minute, ts__lt=end).values_list("id", *ROW_COLUMNS))
        groups: dict[tuple, dict[tuple[int, datetime], list[Any]]] = {}
        for row in hot:
            key = (row[1], row[2], row[-1])  # run, node, source
            groups.setdefault(key, {}).setdefault((row[3], row[4]), list(row[1:]))  # (gpu, ts)
        existing = GpuSampleBlock.objects.select_for_update().filter(
            minute=minute, run_id__in={k[0] for k in groups}, node_id__in={k[1] for k in groups}
        )
        for block in existing:
            key = (block.run_id, block.node_id, block.source)
            if key in groups:
                # The block's samples win: they were stored first.
                groups[key].update({(row[2], row[3]): row for row in block_rows(block)})
        new_blocks = []
        for (run_id, node_id, source), by_key in groups.items():
            rows = [by_key[key] for key in sorted(by_key)]
            new_blocks.append(
                GpuSampleBlock(
                    run_id=run_id,
                    node_id=node_id,
                    minute=minute,
                    source=source,
                    samples=len(rows),
                    data=_encode_rows(minute, rows),
                )
            )
        GpuSampleBlock.objects.bulk_create(
            new_blocks,
            update_conflicts=True,
            unique_fields=["run", "node", "minute", "source"],
            update_fields=["samples", "data"],
            batch_size=500,
        )
        ids = [row[0] for row in hot]
        for start in range(0, len(ids), 10_000):
            GpuSample.objects.filter(ts__gte=minute, ts__lt=end, id__in=ids[start : start + 10_000]).delete()
    return len(hot), len(new_blocks)


def reopen_minutes(keys: Iterable[tuple[int, int, int, datetime]]) -> list[list[Any]]:
    """Take the blocks holding these (run, node, GPU, minute) keys back out of the cold part.

    Called by the store path, inside its transaction, for the keys of a batch that are old
    enough to have been compacted. Returns the blocks' samples as ROW_COLUMNS rows (for the
    caller to insert as hot rows) and deletes the blocks; the next compaction pass folds the
    minute again, with the late samples in it.
    """
    wanted = set(keys)
    if not wanted:
        return []
    nodes = {(k[0], k[1], k[3]) for k in wanted}
    runs_by_minute: dict[datetime, set[int]] = {}
    for run_id, _, _, minute in wanted:
        runs_by_minute.setdefault(minute, set()).add(run_id)
    minutes = sorted(runs_by_minute)
    rows: list[list[Any]] = []
    taken = []
    # At most MINUTES_PER_QUERY OR-ed terms a query: SQLite caps an expression's depth at 1,000.
    for start in range(0, len(minutes), MINUTES_PER_QUERY):
        q = Q()
        for minute in minutes[start : start + MINUTES_PER_QUERY]:
            q |= Q(minute=minute, run_id__in=runs_by_minute[minute])
        for block in GpuSampleBlock.objects.select_for_update().filter(q):
            # The whole node-minute reopens, its other GPUs too: a block is one node's minute.
            if (block.run_id, block.node_id, block.minute) in nodes:
                rows.extend(block_rows(block))
                taken.append(block.pk)
    if taken:
        GpuSampleBlock.objects.filter(pk__in=taken).delete()
    return rows


def raw_rows(
    run_id: int,
    start: datetime,
    end: datetime,
    fields: Sequence[str],
    gpu_index: int | None = None,
    node_ids: Iterable[int] | None = None,
) -> list[tuple]:
    """(node_id, gpu_index, ts, *fields) of one run's raw samples in [start, end], both parts, in series and time order.

    `fields` are GpuSample value fields or "processes". Hot rows are read only in the
    node-minutes no block covers (see `raw_rows_of_runs`).
    `node_ids`, when given, keeps only those nodes' samples (a block holds one node).
    """
    return raw_rows_of_runs([run_id], start, end, fields, gpu_index, node_ids).get(run_id, [])


def raw_rows_of_runs(
    run_ids: Iterable[int],
    start: datetime,
    end: datetime,
    fields: Sequence[str],
    gpu_index: int | None = None,
    node_ids: Iterable[int] | None = None,
) -> dict[int, list[tuple]]:
    """`raw_rows` of many runs: run id -> rows, in three queries or so whatever their number.

    1. The blocks of the window, decoded; each notes its (run, node, minute) as covered.
    2. The runs' nodes (one query; `node_ids` narrows them).
    3. The hot rows of the node-minutes no block covers (`uncovered_spans`), at most
       `hot_reads.HOT_SPANS_PER_QUERY` spans a query, each an exact (node_id, ts) index range
       (runs/telemetry/hot_reads.py). A covered minute holds no hot row (`store_sample_rows`
       reopens it first, and waits for a pass folding it: `minute_lock`), so the hot table is
       never read where compaction deleted rows: the read does not wait for vacuum to remove
       them. A window with no uncovered minute does not read the hot table at all.
    """
    run_ids = list(run_ids)
    if not run_ids:
        return {}
    cold = GpuSampleBlock.objects.filter(run_id__in=run_ids, minute__gte=_minute(start), minute__lte=end)
    nodes = Node.objects.filter(attempt__run_id__in=run_ids)
    if node_ids is not None:
        node_ids = list(node_ids)
        cold, nodes = cold.filter(node_id__in=node_ids), nodes.filter(pk__in=node_ids)
    merged: dict[tuple[int, int, int, datetime], tuple] = {}
    covered: set[tuple[int, int, datetime]] = set()
    for run_id, node_id, minute, data in cold.values_list("run_id", "node_id", "minute", "data"):
        covered.add((run_id, node_id, minute))
        decoded = decode_block(data, fields)
        columns = [decoded.processes if f == "processes" else decoded.columns[f] for f in fields]
        for i, (gpu, offset) in enumerate(zip(decoded.gpus, decoded.offsets_us, strict=True)):
            ts = minute + timedelta(microseconds=offset)
            if start <= ts <= end and (gpu_index is None or gpu == gpu_index):
                merged.setdefault((run_id, node_id, gpu, ts), tuple(column[i] for column in columns))
    spans = uncovered_spans(covered, nodes.values_list("attempt__run_id", "pk"), start, end)
    with hot_reads.index_ranges():
        for hot in hot_reads.hot_rows(spans, start, end):
            if gpu_index is not None:
                hot = hot.filter(gpu_index=gpu_index)
            for run_id, node_id, gpu, ts, *values in hot.values_list("run_id", "node_id", "gpu_index", "ts", *fields):
                merged.setdefault((run_id, node_id, gpu, ts), tuple(values))
    out: dict[int, list[tuple]] = {}
    for (run_id, *key), values in sorted(merged.items()):
        out.setdefault(run_id, []).append((*key, *values))
    return out


def uncovered_spans(
    covered: set[tuple[int, int, datetime]], scope: Iterable[tuple[int, int]], start: datetime, end: datetime
) -> list[tuple[int, int, datetime, datetime]]:
    """(run, node, from, to) of the minutes in [start, end] no block covers, for each (run, node) of `scope`.

    `covered` holds the (run, node, minute) of the window's blocks. Spans are whole minutes,
    `to` excluded, merged where they touch: a node with no block in the window is one span.
    """
    by_node: dict[tuple[int, int], list[datetime]] = {}
    for run_id, node_id, minute in covered:
        by_node.setdefault((run_id, node_id), []).append(minute)
    first, stop = _minute(start), _minute(end) + ONE_MINUTE
    spans = []
    for run_id, node_id in sorted(set(scope)):
        at = first
        for minute in sorted(by_node.get((run_id, node_id), [])):
            if minute > at:
                spans.append((run_id, node_id, at, minute))
            at = max(at, minute + ONE_MINUTE)
        if at < stop:
            spans.append((run_id, node_id, at, stop))
    return spans


def time_span(rows: QuerySet, field: str) -> tuple[datetime, datetime] | None:
    """MIN and MAX of `field` over one run's rows, or None when there are none.

    Grouped by run on purpose: a plain MIN/MAX lets PostgreSQL walk the table's time index
    from one end looking for the run's first row, which for a run with no rows there (an old
    run whose minutes were pruned) reads the whole index: 3.4 s at 100,000 runs. Grouped, it
    reads the run's own rows through the natural key, which leads with the run.
    """
    grouped = rows.order_by().values("run_id").annotate(first=Min(field), last=Max(field)).values_list("first", "last")
    return next(iter(grouped), None)


def raw_extent(run_id: int) -> tuple[datetime, datetime] | None:
    """First and last instant of a run's raw samples, both parts (a block's minute bounds it)."""
    hot = time_span(GpuSample.objects.filter(run_id=run_id), "ts")
    cold = time_span(GpuSampleBlock.objects.filter(run_id=run_id), "minute")
    if cold is not None:
        cold = (cold[0], cold[1] + timedelta(seconds=59))
    spans = [span for span in (hot, cold) if span is not None]
    if not spans:
        return None
    return min(span[0] for span in spans), max(span[1] for span in spans)


def has_samples(**filters: Any) -> bool:
    """Whether any raw sample matches `filters` (fields both models share: run, node, source...), in either part."""
    return GpuSample.objects.filter(**filters).exists() or GpuSampleBlock.objects.filter(**filters).exists()


def node_ids_with(**filters: Any) -> set[int]:
    """Node ids that have raw samples matching `filters`, in either part."""
    hot = GpuSample.objects.filter(**filters).values_list("node_id", flat=True).distinct()
    cold = GpuSampleBlock.objects.filter(**filters).values_list("node_id", flat=True).distinct()
    return set(hot) | set(cold)


def decode_arrays(
    data: bytes | memoryview, fields: Iterable[str]
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """A block's GPU indexes, microsecond offsets and `fields` as numpy arrays: floats, NaN where missing.

    The chart path's decode: no Python object per sample (`decode_block` builds lists of
    ints, floats and None, which for a 64-GPU hour cost more than the decompression itself).
    Integer fields come back as float64 (memory bytes stay exact below 2**53).
    """
    view = memoryview(data)
    stored, count, gpus, offsets, at = _read_header(view)
    wanted = set(fields)
    columns = {name: np.full(count, np.nan) for name in wanted if name not in stored}
    for name in stored:
        tag = view[at]
        at += 1
        mask_len = (count + 7) // 8 if tag == INTS_WITH_NULLS else 0
        if name not in wanted:
            # Stepped over, whatever its tag: nothing is built for a field not asked (a block
            # holds a dozen, a panel asks one or two).
            if tag in (FLOATS, INTS, INTS_WITH_NULLS):
                (length,) = struct.unpack_from("<I", view, at)
                at += 4 + length + mask_len
            elif tag in (CONSTANT_FLOAT, CONSTANT_INT):
                at += 8
            continue
        if tag == ALL_NULL:
            values = np.full(count, np.nan)
        elif tag in (CONSTANT_FLOAT, CONSTANT_INT):
            (value,) = struct.unpack_from("<d" if tag == CONSTANT_FLOAT else "<q", view, at)
            at += 8
            values = np.full(count, float(value))
        else:
            raw, at = _read_chunk(view, at)
            values = raw.astype(np.float64)
            if tag == INTS_WITH_NULLS:
                present = np.unpackbits(np.frombuffer(view[at : at + mask_len], dtype=np.uint8))[:count]
                at += mask_len
                values[present == 0] = np.nan
        columns[name] = values
    return gpus, offsets, columns
