"""Request and response pieces both apps' APIs share: ids, regions, times, and the error shape.

A bad field is named in a 422 before anything is written; these are the bounds every API reads.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from django.core.validators import MaxValueValidator, MinValueValidator
from ninja import Schema
from pydantic import AfterValidator, Field

from dashboard.kit.regions import INTERNET, REGION_PATTERN

ExternalId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\s/\x00]+$")]

RegionName = Annotated[str, Field(max_length=32, pattern=rf"^({REGION_PATTERN}|{INTERNET})?$")]

# Times outside this window are typing or clock errors, and PostgreSQL refuses some of them.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)

LATEST = datetime(2200, 1, 1, tzinfo=UTC)

# The same window for the date filters of pages: a filter's `day + 1` and its UTC midnight
# overflow at 0001-01-01 and 9999-12-31 (a 500); outside it a date is a form error.
DATE_BOUNDS = [MinValueValidator(EARLIEST.date()), MaxValueValidator((LATEST - timedelta(days=1)).date())]


def aware(value: datetime) -> datetime:
    """Timestamps without an offset are taken as UTC (NVML and MLflow clocks are epoch-based).

    Every time is stored in UTC: PostgreSQL refuses offsets beyond +-15:59 that Python accepts
    (the fuzz test sent -23:00), so the offset is applied here.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        value = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range") from None
    if not EARLIEST <= value < LATEST:
        raise ValueError("must be between 1970 and 2200")
    return value


Timestamp = Annotated[datetime, AfterValidator(aware)]


def refuse_nul(value: Any) -> Any:
    """U+0000 cannot be stored in PostgreSQL text: refuse it on every backend, naming the field."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL (U+0000) character")
    return value


# JSON kept in a JSONField: nesting beyond this is no real event's details.
MAX_JSON_DEPTH = 32


def unstorable_json(value: Any, depth: int = 0) -> str | None:
    """Why PostgreSQL's jsonb would refuse `value` (NaN, Infinity, U+0000, too deep), else None.

    Python's json reads NaN and Infinity and writes them back, so a collector's details pass
    SQLite; PostgreSQL refuses the whole statement, and with it every other row of the insert.
    """
    if depth > MAX_JSON_DEPTH:
        return "is nested too deeply"
    if isinstance(value, float) and not math.isfinite(value):
        return "holds NaN or Infinity"
    if isinstance(value, str):
        return "holds a NUL (U+0000) character" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            why = unstorable_json(key, depth + 1) or unstorable_json(item, depth + 1)
            if why:
                return why
    elif isinstance(value, list | tuple):
        for item in value:
            why = unstorable_json(item, depth + 1)
            if why:
                return why
    return None


class ErrorItem(Schema):
    field: str
    message: str


class ErrorOut(Schema):
    detail: str
    errors: list[ErrorItem] | None = None


ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}
