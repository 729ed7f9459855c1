"""When a log line was written, read from the line's own leading timestamp, where it has one.

The failure page puts the log's evidence line on the charts' time axis: the time the line
itself states (`2026-11-02T09:14:03Z`, `2026-11-02 09:14:03,512`, `[2026-11-02 09:14:03]`);
a line without a dated stamp has no time. One anchored regex over the line's first 40
characters, so reading a line costs the same whatever the rest of it holds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

LEADING_TIME = re.compile(
    r"^\W{0,3}(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,9}))?"
    r"\s?(?P<zone>Z|UTC|[+-]\d{2}:?\d{2})?"
)


def line_time(text: str) -> datetime | None:
    """The timestamp a line starts with, as an aware datetime (UTC when the line names no zone)."""
    match = LEADING_TIME.match(text[:40])
    if match is None:
        return None
    try:
        at = datetime.fromisoformat(f"{match['date']}T{match['time']}")
    except ValueError:
        return None
    if match["frac"]:
        at += timedelta(microseconds=int(match["frac"][:6].ljust(6, "0")))
    zone = match["zone"]
    if zone and zone not in ("Z", "UTC"):
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        return at.replace(tzinfo=timezone(sign * offset)).astimezone(UTC)
    return at.replace(tzinfo=UTC)
