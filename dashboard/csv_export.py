"""One CSV download for every table: `csv_response(filename, header, rows)`.

Cells are written for spreadsheets: exact decimals as plain digits ('12.5', never '1.25E+1'), datetimes as UTC ISO 8601,
None as empty. A text cell that starts with `= + - @` (or a tab / carriage return) would be run
as a formula by Excel or LibreOffice, and run names, error messages and notes come from users
and remote systems, so such cells get a leading apostrophe (OWASP "CSV injection"). Numbers are
never escaped: -3 stays a number.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import IO, Any

from django.db import connection
from django.db.models import BigIntegerField, Func
from django.db.models.expressions import Expression
from django.http import HttpResponse, StreamingHttpResponse

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# Rows a streamed download writes per chunk: one chunk a row was 100,000 writes for the run list.
STREAM_CHUNK_ROWS = 1000


def cell(value: object) -> object:
    """One value as written to the CSV."""
    kind = type(value)
    if kind is str:  # most cells: a fast path, the same answer as the end of this function
        return "'" + value if value.startswith(FORMULA_PREFIXES) else value
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
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int | float):
        return value
    text = str(value)
    if text.startswith(FORMULA_PREFIXES):
        return "'" + text
    return text


class EpochMicros(Func):
    """A PostgreSQL timestamp as whole microseconds since the Unix epoch, exact on every version."""

    template = (
        "(EXTRACT(EPOCH FROM date_trunc('second', %(expressions)s))::bigint * 1000000"
        " + MOD(EXTRACT(MICROSECONDS FROM %(expressions)s)::bigint, 1000000))"
    )
    output_field = BigIntegerField()


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_column(field: str) -> tuple[str | Expression, Callable[[Any], datetime | None]]:
    """What a long download reads for a datetime column, and how it gets back the same datetime.

    On PostgreSQL Django reads timestamptz with psycopg's Python parser (its UTC loader
    subclasses it): 300,000 of them were most of the run list's CSV at 100,000 runs. Read as
    an integer (C code) and rebuilt with C arithmetic it is the same aware UTC datetime,
    written by `cell()` as any other; on other backends the column is read as it is.
    """
    if connection.vendor != "postgresql":
        return field, _same
    return EpochMicros(field), _from_micros


def _same(value: datetime | None) -> datetime | None:
    return value


def _from_micros(value: int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=value)


def unescape(text: str) -> str:
    """A cell read back from one of our CSVs: the apostrophe `cell()` put before a formula goes.

    Files we export are loaded again (the price book): what was written as "'=x" is read as "=x".
    """
    if text.startswith("'") and text[1:].startswith(FORMULA_PREFIXES):
        return text[1:]
    return text


def write_csv(
    file: IO[str], header: Sequence[str], rows: Iterable[Sequence[object]], lineterminator: str = "\r\n"
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
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    response["Content-Disposition"] = f'attachment; filename="{safe_name}"'
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
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    response["Content-Disposition"] = f'attachment; filename="{safe_name}"'
    return response
