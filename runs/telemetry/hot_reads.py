"""How the hot raw table (GpuSample) is read: exact (node, time) ranges of its (node_id, ts) index.

The hot table holds the last AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES of every running run's
GPUs, and the minutes compaction has emptied whose dead rows vacuum has not removed yet. A read
of one run's live edge must touch that run's rows only, whatever the others hold. Two things
in PostgreSQL's planner got in the way, both measured on bench/run_page.py's 64-GPU run (its
last nine minutes, 31,360 rows, beside another team's 126,600 hot rows):

- With `node_id IN (...) AND ts >= a AND ts < b` it may pick the table's plain `ts` index
  and filter every running run's rows of the window: it did whenever its statistics were
  older than the last compaction pass (19,185 buffers, 34.7 ms). A row-value range
  `(node_id, ts) >= (n, a) AND (node_id, ts) < (n, b)` means the same rows, but only an index
  leading with (node_id, ts) can serve it, so that plan is no longer on offer (855 buffers,
  13.8 ms). `span_filter` writes every span that way, and `hot_rows` checks the run as
  `run_id + 0`, so that the natural key's run prefix (every row of the run in a partition,
  compacted ones included until vacuum has run) is not on offer either.
- Sequential scans read every page compaction emptied until vacuum has run (5,768 pages against
  743 through the index), and parallel workers on this 2-core box cost more than they split
  (17.4 ms with two, 13.8 ms without). `index_ranges` turns both off for the statements it wraps.

SQLite reads row values the same way (3.15+) and has neither setting.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    BigIntegerField,
    BooleanField,
    DateTimeField,
    Expression,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Value,
)

from runs.models import GpuSample

# (node, time span) terms OR-ed into one read of hot rows (SQLite caps an expression's depth at 1,000).
HOT_SPANS_PER_QUERY = 200


class SpanRanges(Expression):
    """`((node_id, ts) >= (n, a) AND (node_id, ts) < (n, b)) OR ...` over spans (n, a, b), written at once.

    One expression for all the spans, its SQL joined as text and its values bound: built from
    ORM row-value expressions, each span cost ~0.25 ms of Python to resolve and compile (8
    spans 3 ms, 64 spans 20 ms, more than the read itself).
    """

    conditional = True
    output_field = BooleanField()

    def __init__(self, spans: Iterable[tuple[int, datetime, datetime]]) -> None:
        super().__init__()
        self.spans = list(spans)
        self.key: tuple[Any, ...] = (F("node_id"), F("ts"))

    def get_source_expressions(self) -> list[Any]:
        return list(self.key)

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        self.key = tuple(exprs)

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:  # Django's (sql, params)
        node_sql, node_params = compiler.compile(self.key[0])
        ts_sql, ts_params = compiler.compile(self.key[1])
        if node_params or ts_params:
            raise ValueError("SpanRanges reads two plain columns")
        row = f"({node_sql}, {ts_sql})"
        one = f"({row} >= (%s, %s) AND {row} < (%s, %s))"
        stamp = DateTimeField()
        params: list[Any] = []
        for node_id, a, b in self.spans:
            params += [int(node_id), stamp.get_db_prep_value(a, connection), int(node_id),
                       stamp.get_db_prep_value(b, connection)]  # fmt: skip
        return "(" + " OR ".join([one] * len(self.spans)) + ")", tuple(params)


def span_filter(spans: Iterable[tuple[int, datetime, datetime]]) -> Q:
    """Rows whose (node_id, ts) lies in [(node, a), (node, b)) for one of `spans`: (node, a, b), b excluded.

    Each span is one exact range of the (node_id, ts) index (see the module text). No span: no row.
    """
    spans = list(spans)
    if not spans:
        return Q(pk__in=[])
    return Q(SpanRanges(spans))


def hot_rows(
    spans: Sequence[tuple[int, int, datetime, datetime]], start: datetime, end: datetime
) -> list[QuerySet[GpuSample]]:
    """The hot rows of `spans` (run, node, a, b; b excluded) cut to [start, end], as querysets of
    at most HOT_SPANS_PER_QUERY spans each (`span_filter`). Spans are disjoint: no row is in two.

    The run is checked on every row (a node id is one run's, but the read trusts no caller for
    that), as `run_id + 0`: a bare `run_id` would put the natural key (run_id, node_id,
    gpu_index, ts) on offer, whose run prefix walks every row of the run in a partition,
    compacted ones included until vacuum has run. So the (node_id, ts) ranges stay the only plan.
    Read them inside `index_ranges`.
    """
    after_end = end + timedelta(microseconds=1)
    cut = [(run_id, node_id, max(a, start), min(b, after_end)) for run_id, node_id, a, b in spans]
    cut = [span for span in cut if span[2] < span[3]]
    guard = ExpressionWrapper(F("run_id") + Value(0), output_field=BigIntegerField())
    out: list[QuerySet[GpuSample]] = []
    for first in range(0, len(cut), HOT_SPANS_PER_QUERY):
        part = cut[first : first + HOT_SPANS_PER_QUERY]
        runs = sorted({run_id for run_id, *_ in part})
        nodes = span_filter((node_id, a, b) for _, node_id, a, b in part)
        out.append(GpuSample.objects.alias(owner_run=guard).filter(nodes, owner_run__in=runs))
    return out


# The planner settings `index_ranges` turns off, and the value each takes meanwhile.
_SETTINGS = (("enable_seqscan", "off"), ("max_parallel_workers_per_gather", "0"))


@contextmanager
def index_ranges() -> Iterator[None]:
    """On PostgreSQL, the statements inside run without sequential scans or parallel workers.

    One statement reads the settings as they were and sets them for the transaction, one puts
    them back after: inside an outer transaction a SET LOCAL would last until it ends.
    """
    if connection.vendor != "postgresql":
        yield
        return
    names = [name for name, _ in _SETTINGS]
    with transaction.atomic(), connection.cursor() as cursor:
        reads = ", ".join("current_setting(%s)" for _ in names)
        sets = ", ".join("set_config(%s, %s, true)" for _ in names)
        cursor.execute(f"SELECT {reads}, {sets}", [*names, *(part for pair in _SETTINGS for part in pair)])
        before = cursor.fetchone()[: len(names)]
        try:
            yield
        finally:
            puts = ", ".join("set_config(%s, %s, true)" for _ in names)
            cursor.execute(f"SELECT {puts}", [part for pair in zip(names, before, strict=True) for part in pair])
