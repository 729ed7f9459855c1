"""Fixed-window counters in Django's cache: ingest rate per API key, login failures per user and IP.

A fixed window (the clock's current minute, or quarter hour) costs one atomic `incr` per
request on Redis and needs no list of timestamps. Its known slack: a client can spend one
window's allowance at the end of a window and the next one's at the start, so at most twice
the limit passes in a short burst; for a flood guard and a password-guessing brake that is fine.

On the default LocMemCache each web process counts on its own; set `REDIS_URL` so that every
process shares one count (the deployment default).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

from django.core.cache import cache
from django.http import HttpRequest


@dataclass(frozen=True)
class Limit:
    """At most `count` events per `seconds`-long window of the clock."""

    count: int
    seconds: int


@dataclass(frozen=True)
class Decision:
    """The count after this event, and the seconds until its window closes (for Retry-After)."""

    allowed: bool
    count: int
    retry_after: int


def _window(limit: Limit, now: float) -> tuple[int, int]:
    """The window's start (seconds since the epoch) and the whole seconds left in it (at least 1)."""
    start = int(now // limit.seconds) * limit.seconds
    return start, max(1, math.ceil(start + limit.seconds - now))


def _cache_key(scope: str, ident: str, start: int) -> str:
    # Hashed so that any identifier (a username with spaces, an IPv6 address) makes a short,
    # memcached-safe key, and so that a raw identifier never sits in the cache.
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"rl:{scope}:{digest}:{start}"


def hit(scope: str, ident: str, limit: Limit, now: float | None = None, weight: int = 1) -> Decision:
    """Count `weight` events (one by default) for `ident`; `allowed` is False once the count passes the limit."""
    start, left = _window(limit, time.time() if now is None else now)
    key = _cache_key(scope, ident, start)
    # add() creates the counter with its expiry only if absent; incr() is atomic on Redis and
    # under LocMemCache's lock. The key can expire between the two calls: start it again then.
    cache.add(key, 0, timeout=limit.seconds + 1)
    try:
        count = cache.incr(key, weight)
    except ValueError:
        cache.set(key, weight, timeout=limit.seconds + 1)
        count = weight
    return Decision(allowed=count <= limit.count, count=count, retry_after=left)


def peek(scope: str, ident: str, limit: Limit, now: float | None = None) -> Decision:
    """The window's count so far, without counting: `allowed` is False when it is already used up."""
    start, left = _window(limit, time.time() if now is None else now)
    count = int(cache.get(_cache_key(scope, ident, start), 0))
    return Decision(allowed=count < limit.count, count=count, retry_after=left)


def reset(scope: str, ident: str, limit: Limit, now: float | None = None) -> None:
    """Forget the current window's count (after a successful login, say)."""
    start, _ = _window(limit, time.time() if now is None else now)
    cache.delete(_cache_key(scope, ident, start))


def client_ip(request: HttpRequest, trusted_proxies: int = 0) -> str:
    """The caller's address: REMOTE_ADDR, or with `trusted_proxies` hops in front, the address
    the outermost trusted proxy saw (counted from the right of X-Forwarded-For, because the left
    part is whatever the client chose to send)."""
    remote = request.META.get("REMOTE_ADDR", "") or "unknown"
    if trusted_proxies <= 0:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    if len(hops) < trusted_proxies:
        return remote
    return hops[-trusted_proxies]
