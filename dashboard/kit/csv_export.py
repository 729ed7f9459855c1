"""One CSV download for every table: `csv_response(filename, header, rows)`.

Cells are written for spreadsheets: exact decimals as plain digits ('12.5', never '1.25E+1'),
datetimes as UTC ISO 8601 with the fraction of a second only as long as it needs
('09:40:00.123+00:00', as PostgreSQL writes it), None as empty. A text cell that starts with
`= + - @` (or a tab / carriage return) would be run as a formula by Excel or LibreOffice, and
run names, error messages and notes come from users and remote systems, so such cells get a
leading apostrophe (OWASP "CSV injection"). Numbers are never escaped: -3 stays a number.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, cast

from django.db import connection, transaction
from django.db.models import (
    CharField,
    DateTimeField,
    F,
    Func,
    IntegerField,
    QuerySet,
    TextField,
)
from django.db.models.expressions import Expression
from django.http import HttpResponse, StreamingHttpResponse

if TYPE_CHECKING:
    from django.db.backends.postgresql.operations import DatabaseOperations as PostgresOperations

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# Memory for one streamed COPY's sort, per PostgreSQL process, for its transaction only.
COPY_WORK_MEM = "32MB"
# Rows a streamed download writes per chunk: one chunk a row was 100,000 writes for the run list.
STREAM_CHUNK_ROWS = 1000


def cell(value: object) -> object:
    """One value as written to the CSV."""
    kind = type(value)
    if kind is str:  # most cells: a fast path, the same answer as the end of this function
        # value is a str here; mypy narrows on `type(value) is str` but not through `kind`.
        return "'" + value if value.startswith(FORMULA_PREFIXES) else value  # type: ignore[attr-defined, operator]
    if kind is int:
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    if isinstance(value, datetime):
        return iso_datetime(value.astimezone(UTC) if value.tzinfo else value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int | float):
        return value
    text = str(value)
    if text.startswith(FORMULA_PREFIXES):
        return "'" + text
    return text


# --- The same cells written by PostgreSQL ---------------------------------------------------------
#
# The run list's CSV at 100,000 runs is 25 MB: Python's csv module alone takes ~0.4 s to write it
# on a 2-core machine, and reading the rows about as long again. PostgreSQL's COPY writes the same
# file in C. What COPY is given is the `cell()` rules as SQL, one expression a column kind, and
# what it writes is pinned byte for byte to `csv_streaming_response`'s file by
# tests/dashboard/kit/test_csv_copy.py on PostgreSQL; other backends take the Python path.

# Every formula prefix is one ASCII character, so "starts with one of them" is a test of the first
# character's code, `ascii(text) IN (...)`: no substring is built (about half the cost of `left()`).
FORMULA_CODES = tuple(ord(prefix) for prefix in FORMULA_PREFIXES)
assert all(len(prefix) == 1 and ord(prefix) < 128 for prefix in FORMULA_PREFIXES)


class SqlTextCell(Func):
    """A text column as `cell()` writes it: an empty string as nothing, a formula behind an apostrophe.

    Most cells start with a letter, past every formula prefix's code (at most '@', 64): that
    test comes first and ends there. `ascii('')` is 0.
    """

    output_field = TextField()

    # The stubs type the params as a tuple; Django's own Func.as_sql returns a list, as this does.
    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:  # type: ignore[override]
        inner, params = compiler.compile(self.source_expressions[0])
        codes = ", ".join(str(code) for code in FORMULA_CODES)
        sql = (
            f"(CASE WHEN ascii({inner}) > {max(FORMULA_CODES)} THEN {inner} WHEN ascii({inner}) = 0 THEN NULL"
            f" WHEN ascii({inner}) IN ({codes}) THEN '''' || {inner} ELSE {inner} END)"
        )
        return sql, params * sql.count(inner)


class SqlDatetimeCell(Func):
    """A timestamptz as `cell()` writes a datetime (`iso_datetime`): UTC ISO 8601, the fraction of
    a second without trailing zeros. PostgreSQL's own text for the UTC timestamp, under DateStyle
    ISO (`_copy_chunks` sets it), with the 'T' and the offset: less than half the time of `to_char`."""

    output_field = TextField()
    template = "(replace((%(expressions)s AT TIME ZONE 'UTC')::text, ' ', 'T') || '+00:00')"


class SqlIntegerCell(Func):
    """An integer as `cell()` writes it: its digits."""

    output_field = TextField()
    template = "(%(expressions)s)::text"


class SqlDecimalCell(Func):
    """An exact decimal as `cell()` writes one: its digits without trailing zeros (PostgreSQL 13+)."""

    output_field = TextField()
    template = "trim_scale(%(expressions)s)::text"


def sql_cell(queryset: QuerySet[Any], name: str) -> Expression:
    """The SQL that writes column `name` of `queryset` (a field path such as "team__name") as `cell()` would."""
    field = queryset.query.resolve_ref(name).output_field
    if isinstance(field, DateTimeField):
        return SqlDatetimeCell(F(name))
    if isinstance(field, IntegerField):  # AutoField too; BooleanField is not one
        return SqlIntegerCell(F(name))
    if isinstance(field, CharField | TextField):
        return SqlTextCell(F(name))
    raise TypeError(f"no SQL cell for {name} ({type(field).__name__})")


@dataclass(frozen=True)
class Tail:
    """The last `count` added cells of the rows the COPY writes, from another table: `rows` is a
    values_list of SQL text (`sql_cell`'s rules, no cell holding a comma, quote or line
    break): a row's id, then its `count` cells joined by commas, read by one COPY before the download's and put
    after each row whose id it has (empty where it has none). Joined inside the download's COPY,
    such a table was an index probe a row, which the COPY's order (an index's) cannot avoid: a
    hash join loses the order and PostgreSQL sorts every row before the first byte leaves.
    """

    count: int
    rows: QuerySet[Any]  # two text columns: the id, and the `count` cells joined by commas


TAIL_LINE = re.compile(rb"^([^,\n]*),(.*)$", re.MULTILINE)


# Cells a download adds after a row's own, for the rows SQL cannot write them: (header, the ids
# of those rows, row ids -> each row's added cells, and the `Tail` of the others). See `_splice`.
Added = tuple[Sequence[str], QuerySet[Any], Callable[[list[int]], dict[int, list[object]]], Tail | None]


def copy_streaming_response(
    filename: str,
    header: Sequence[str],
    queryset: QuerySet[Any],
    *,
    in_index_order: bool = False,
    added: Added | None = None,
) -> StreamingHttpResponse:
    """`csv_streaming_response`'s file, its rows written by PostgreSQL (COPY ... TO STDOUT).

    `queryset` is a `values_list` of text cells (`sql_cell`, or SQL that keeps the same rules).
    COPY ends a row with "\n" and sends one row a message, so each row's end is made "\r\n" as
    the Python writer's is (a newline inside a quoted cell stays as it is). Chunks of
    STREAM_CHUNK_ROWS rows, as `csv_streaming_response`; the COPY is one query, and Django's
    debug cursor counts it as one.

    `in_index_order`: an index holds the queryset's whole ORDER BY, so the COPY runs in one
    process and reads the rows in that order. PostgreSQL's planner otherwise shares the
    formatting out to parallel workers, each of which sorts its formatted rows for the leader to
    merge: at 100,000 runs on 2 cores that took 292 ms where the one process took 240 (median of
    9, alternated). Where no index holds the order the parallel sort is the faster (a run list
    sorted by experiment: 378 against 561 ms), so it stays the default. Nor a hash join: a table
    joined a row (the run list's stored cost figures) is probed by its key in the index's order,
    where the planner's hash join read the runs unordered and sorted all 100,000 before the
    first byte left (2.4 s to the first byte against 0.4 s, the COPY ~1.0 s either way).
    """
    sql, params = queryset.query.sql_with_params()
    chunks = _copy_chunks(header, sql, params, in_index_order, added)
    response = StreamingHttpResponse(chunks, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_safe_name(filename)}"'
    return response


def _copy_chunks(
    header: Sequence[str], sql: str, params: Sequence[Any], in_index_order: bool, added: Added | None = None
) -> Iterator[bytes]:
    """The file in chunks. With `added`, each COPY row is led by its id (`_splice`),
    and the flagged rows' added cells are read before the COPY (the connection answers no
    other query while it runs), in the same transaction, before the COPY's own settings."""
    head = io.StringIO()
    csv.writer(head, lineterminator="").writerow([cell(h) for h in header])  # ended by the join below
    rows: list[bytes] = [head.getvalue().encode()]
    # A reader that stops early closes this generator mid-COPY: psycopg cancels the COPY, which
    # aborts the transaction it ran in; in a savepoint of its own only the savepoint is lost.
    with transaction.atomic(), connection.cursor() as cursor:
        # For this transaction only: SqlDatetimeCell reads PostgreSQL's timestamp text, which
        # DateStyle shapes (ISO here whatever the server or role says), as psycopg does reading the
        # added cells' times; and the formatted rows are sorted in memory (COPY_WORK_MEM a
        # process), where at the default 4 MB each parallel worker's sort spilled 6-10 MB to disk
        # at 100,000 runs.
        cursor.execute(
            "SELECT set_config('DateStyle', 'ISO, MDY', true), set_config('work_mem', %s, true)", [COPY_WORK_MEM]
        )
        # The added cells' reads under the planner's own settings: with the COPY's below (no hash
        # join) the stored figures' read probed the runs a row (317 ms against 100 at 100,000 runs).
        splice = _splice(*added) if added is not None else None
        if in_index_order:
            # In an index's order: no parallel workers and no hash join, for the COPY alone.
            serial = "set_config('max_parallel_workers_per_gather', '0', true)"
            cursor.execute(f"SELECT {serial}, set_config('enable_hashjoin', 'off', true)")
        ops = cast("PostgresOperations", connection.ops)  # this path runs on PostgreSQL only
        statement = ops.compose_sql(f"COPY ({sql}) TO STDOUT (FORMAT csv)", params)
        with cursor.copy(statement) as copy:
            for row in copy:
                # bytes: held memoryviews are GC-tracked (a full collection a download)
                rows.append(row[:-1].tobytes() if splice is None else splice(row[:-1].tobytes()))
                if len(rows) > STREAM_CHUNK_ROWS:
                    yield b"\r\n".join(rows) + b"\r\n"
                    rows = []
    if rows:
        yield b"\r\n".join(rows) + b"\r\n"


def _splice(
    header: Sequence[str],
    flagged: QuerySet[Any],
    cells: Callable[[list[int]], dict[int, list[object]]],
    tail: Tail | None = None,
) -> Callable[[bytes], bytes]:
    """A COPY row (id, its cells, the last len(`header`) of them the added ones) as the file's row.

    A row whose id is not among `flagged` has its added cells from SQL. A flagged row (`flagged`
    is read first, in one query, STREAM_CHUNK_ROWS ids a `cells` call) has them replaced by
    `cells`' answer, written
    by Python's csv writer through `cell()`. What SQL wrote there must hold no comma, quote or
    line break (numbers, times, fixed words), so the row's own cells end at the len(`header`)-th
    comma from its end. Every cell quotes alone, so the bytes are the ones the Python writer
    writes for the whole row. A row flagged but not found (changed in between) gets them empty.
    With a `tail`, SQL writes all but its last `tail.count` added cells, and each row that is not
    flagged gets those from the tail's rows, read here (empty where its id is not among them).
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="")
    ids = list(flagged)
    written: dict[bytes, bytes] = {}
    for i in range(0, len(ids), STREAM_CHUNK_ROWS):
        for key, values in cells(ids[i : i + STREAM_CHUNK_ROWS]).items():
            buffer.seek(0)
            buffer.truncate()
            writer.writerow([cell(v) for v in values])
            written[str(key).encode()] = buffer.getvalue().encode()
    blank = b"," * (len(header) - 1)
    count = len(header) - (tail.count if tail else 0)  # the added cells SQL wrote
    stored: dict[bytes, bytes] = {}
    if tail is not None:
        sql, params = tail.rows.query.sql_with_params()
        # One value, not a row each: psycopg reads a COPY or a result a row at a time in Python
        # (~1.7 us a row), where this is one text split in C.
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT convert_to(string_agg(t.id || ',' || t.cells, E'\\n'), 'UTF8') FROM ({sql}) AS t (id, cells)",  # noqa: S608 (a compiled queryset)
                params,
            )
            blob = bytes(cursor.fetchone()[0] or b"")
        stored = dict(TAIL_LINE.findall(blob))
    empty = b"," * (tail.count - 1) if tail else b""

    replaced = {str(pk).encode() for pk in ids}

    def splice(row: bytes) -> bytes:
        key, rest = row.split(b",", 1)
        if key not in replaced:
            return rest if tail is None else rest + b"," + stored.get(key, empty)
        return (rest.rsplit(b",", count)[0] if count else rest) + b"," + written.get(key, blank)

    return splice


def iso_datetime(value: datetime) -> str:
    """ISO 8601 with the fraction of a second cut after its last non-zero digit, and none when
    zero: '2026-11-02T09:40:00.123+00:00' where isoformat() writes '.123000' (Databricks times
    are milliseconds). PostgreSQL's own text for a timestamp is the same, which the COPY path uses."""
    text = value.isoformat()
    if not value.microsecond:
        return text
    head, _, rest = text.partition(".")
    return f"{head}.{rest[:6].rstrip('0')}{rest[6:]}"


def unescape(text: str) -> str:
    """A cell read back from one of our CSVs: the apostrophe `cell()` put before a formula goes.

    Files we export are loaded again (the price book): what was written as "'=x" is read as "=x".
    """
    if text.startswith("'") and text[1:].startswith(FORMULA_PREFIXES):
        return text[1:]
    return text


class TextSink(Protocol):
    """What `write_csv` writes to: a text file, an HttpResponse."""

    def write(self, text: str, /) -> object: ...


def write_csv(
    file: TextSink, header: Sequence[str], rows: Iterable[Sequence[object]], lineterminator: str = "\r\n"
) -> int:
    """Write `header` then `rows` to `file`, every cell through `cell()`; returns the rows written.

    The one CSV writer of the project: every download and file export goes through it.
    """
    writer = csv.writer(file, lineterminator=lineterminator)
    writer.writerow([cell(h) for h in header])
    count = 0
    for row in rows:
        writer.writerow([cell(v) for v in row])
        count += 1
    return count


def csv_response(filename: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> HttpResponse:
    """An attachment download of `header` then `rows`, every cell through `cell()`."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_safe_name(filename)}"'
    write_csv(response, header, rows)
    return response


def _csv_chunks(header: Sequence[str], rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """`write_csv`'s text in chunks of STREAM_CHUNK_ROWS rows, header first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow([cell(h) for h in header])
    for count, row in enumerate(rows, 1):
        writer.writerow([cell(v) for v in row])
        if count % STREAM_CHUNK_ROWS == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def csv_streaming_response(
    filename: str, header: Sequence[str], rows: Iterable[Sequence[object]]
) -> StreamingHttpResponse:
    """`csv_response` for tables too long to build in memory: rows are written as they are read.

    The same cells (`cell()`), header and line ends as `csv_response`; the first bytes leave
    before the last row is read (the run list's ?format=csv at 100,000 runs).
    """
    response = StreamingHttpResponse(_csv_chunks(header, rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_safe_name(filename)}"'
    return response


def _safe_name(filename: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
