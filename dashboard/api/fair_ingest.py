"""Fair ingest: what one request and one key may make the server do (SECURITY.md, "Limits").

Rows per request are capped by AIRBOARD_MAX_SAMPLES_PER_BATCH on every path
(`dashboard.api.core.check_count`), requests per key by AIRBOARD_INGEST_RATE_PER_MINUTE. Two more
bounds keep one key's pushes from taking the write path from everyone else:

- the distinct (run, attempt, node) a telemetry request names, AIRBOARD_MAX_NODES_PER_BATCH:
  each may create an attempt and a node (a 1 MB push naming 10,000 took 25-47 s to accept);
  more is a 413 naming the count and the limit;
- the rows a key writes a minute, AIRBOARD_INGEST_ROWS_PER_MINUTE, across samples, telemetry
  files, metric points and egress records: past it a 429 with Retry-After naming the limit.
  Counted in the same cache as the request rate (Redis when REDIS_URL is set).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import HttpError

from dashboard.api.core import Access, RateLimited
from dashboard.kit import ratelimit


def check_nodes(count: int) -> None:
    """A 413 when one request names more distinct (run, attempt, node) than AIRBOARD_MAX_NODES_PER_BATCH."""
    cap = settings.AIRBOARD_MAX_NODES_PER_BATCH
    if count > cap:
        raise HttpError(
            413,
            f"{count} distinct (run, attempt, node) in one request; the limit is {cap}. Send a batch per node "
            "or per few nodes.",
        )


def charge_rows(request: HttpRequest, rows: int, what: str) -> None:
    """Count `rows` against the key's rows a minute; a 429 with Retry-After once the minute's budget is spent."""
    key = Access(request).key
    if key is None:
        return
    limit = ratelimit.Limit(settings.AIRBOARD_INGEST_ROWS_PER_MINUTE, 60)
    decision = ratelimit.hit("ingest-rows", key.key_hash, limit, weight=rows)
    if not decision.allowed:
        raise RateLimited(
            f"These {rows} {what} would take this key past {limit.count} rows a minute; retry after "
            f"{decision.retry_after} s. Nothing was stored.",
            decision.retry_after,
        )
