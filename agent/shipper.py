"""Ship batches to the site's HTTP API with the node's key: `POST /api/v1/gpu-samples?bad_rows=drop`.

A GPU node needs two things: the site's URL (AIRBOARD_URL) and its team's ingest key
(AIRBOARD_AGENT_KEY). No broker credentials: the node can push its team's samples and events
and nothing else. The standard library speaks HTTP here (urllib), so the agent installs
nothing but the NVML bindings.

`bad_rows=drop` (runs/collectors/agent.py) is the API's option for a sender that cannot fix its
rows: a bad row is dropped and counted by the site instead of failing the whole batch.

What a send can meet, and what the shipper does:

- 2xx: sent.
- No connection, a timeout, a 5xx, 429 (rate limit), 408, 401/403 (a key being rotated),
  404/405 or a redirect (a wrong AIRBOARD_URL; a redirect is never followed: urllib would resend
  the POST as a GET without its body): the
  site may take it later. The batch goes to the on-disk buffer, and batches go straight to disk
  for a backoff that doubles from BACKOFF_FIRST_SECONDS to BACKOFF_MAX_SECONDS; buffered
  batches are sent first, in order, the next time, so the site sees a node's batches in the
  order they were taken.
- Any other 4xx (a 413, a 422 for a malformed body): the site will never take this batch.
  It is dropped, counted in `refused`, and logged with the site's reason; retrying it would
  only block the batches behind it.

A batch sent twice (the site took it but the answer was lost) is harmless: the site stores its
rows once.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from agent.buffer import DiskBuffer

logger = logging.getLogger(__name__)

PUSH_PATH = "/api/v1/gpu-samples?bad_rows=drop"
TIMEOUT_SECONDS = 10.0
# After a failed send, batches go straight to disk for a while: each failed connect can cost
# the timeout, time the sampling loop should not lose at every ship.
BACKOFF_FIRST_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 300.0
# Statuses that say "not now" rather than "never": a key being rotated (401, 403), a wrong
# AIRBOARD_URL (404, 405: kept until the operator fixes it), a timeout, the rate limit.
RETRY_STATUSES = frozenset({401, 403, 404, 405, 408, 429})
MAX_REASON = 300
MAX_ERROR_BODY = 64 * 1024


class SiteUnavailable(Exception):
    """The site did not take the batch now; it may later."""


class BatchRefused(Exception):
    """The site will never take this batch (a 4xx about the batch itself)."""


def site_url(raw: str) -> str:
    """The site's base URL, checked: http(s) with a host. ValueError names what is wrong."""
    url = raw.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"AIRBOARD_URL={raw!r} is not an http(s) URL of the Airboard site")
    if parts.username or parts.password:
        raise ValueError("AIRBOARD_URL must not carry a user or password; the key authenticates the node")
    return url


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as it is: urllib would turn the POST into a GET without its body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpSender:
    """POSTs one payload to the site's push URL with the node's key."""

    def __init__(self, url: str, key: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = site_url(url) + PUSH_PATH
        self._headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirects)

    def __call__(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(payload, separators=(",", ":")).encode()
        # site_url() let http(s) through only.
        request = urllib.request.Request(self.url, data=body, headers=self._headers, method="POST")  # noqa: S310
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return _json(response.read())
        except urllib.error.HTTPError as exc:
            reason = _reason(exc)
            if 300 <= exc.code < 400:  # kept, not dropped: the operator fixes AIRBOARD_URL
                raise SiteUnavailable(f"HTTP {exc.code}: the site redirects; set AIRBOARD_URL to its target") from None
            if exc.code in RETRY_STATUSES or exc.code >= 500:
                raise SiteUnavailable(f"HTTP {exc.code}: {reason}") from None
            raise BatchRefused(f"HTTP {exc.code}: {reason}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise SiteUnavailable(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None


def _json(raw: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(raw)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        answer = _json(exc.read(MAX_ERROR_BODY))
    except OSError:
        answer = {}
    return str(answer.get("detail") or exc.reason)[:MAX_REASON]


class Shipper:
    """Sends batches through `send`, buffering while the site is away."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], dict[str, Any]],
        buffer: DiskBuffer,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.buffer = buffer
        self.sent = 0
        # Batches the site refused for good, and the rows it dropped from batches it took.
        self.refused = 0
        self.dropped_by_site = 0
        self._clock = clock
        self._backoff = 0.0
        self._retry_at = 0.0

    def send(self, payload: dict[str, Any]) -> None:
        """One send; SiteUnavailable when the site does not take it now. A refused batch is dropped here."""
        try:
            answer = self._send(payload)
        except BatchRefused as exc:
            self.refused += 1
            logger.error("the site refused a batch of %d sample(s) for good; dropped: %s",
                         len(payload.get("samples") or []), exc)  # fmt: skip
            return
        self.sent += 1
        dropped = int(answer.get("dropped_rows") or 0) + int(answer.get("dropped_events") or 0)
        if dropped:
            self.dropped_by_site += dropped
            problems = "; ".join(str(p) for p in (answer.get("problems") or [])[:3])
            logger.warning("the site dropped %d row(s) or event(s): %s", dropped, problems)

    def ship(self, payload: dict[str, Any], force: bool = False) -> bool:
        """Send the buffered batches, then this one; while the site is away, buffer what is left.

        While backing off after a failure the batch goes to disk without a try, unless `force`
        (the final flush). Returns True when `payload` itself was sent.
        """
        if not self.drain(force):
            self.buffer.append(payload)  # behind the older ones, to keep the order
            return False
        # The drop count rides only on a batch that is sent now: a buffered one could be dropped too.
        dropped = self.buffer.take_dropped()
        payload["dropped_samples"] = payload.get("dropped_samples", 0) + dropped
        try:
            self.send(payload)
        except SiteUnavailable as exc:
            payload["dropped_samples"] -= dropped
            self.buffer.add_dropped(dropped)
            self._failed(exc)
            self.buffer.append(payload)
            return False
        self._backoff = 0.0
        return True

    def drain(self, force: bool = False) -> bool:
        """Send what the buffer holds, oldest first; False when the site is (still) away."""
        if not force and self._clock() < self._retry_at:
            return False
        if not self.buffer.files():
            return True
        try:
            sent = self.buffer.drain(self.send)
        except SiteUnavailable as exc:
            self._failed(exc)
            return False
        self._backoff = 0.0
        if sent:
            logger.info("the site is back: sent %d buffered batch(es)", sent)
        return True

    def _failed(self, exc: BaseException) -> None:
        self._backoff = min(max(self._backoff * 2, BACKOFF_FIRST_SECONDS), BACKOFF_MAX_SECONDS)
        self._retry_at = self._clock() + self._backoff
        logger.warning("site unavailable (%s); buffering on disk, next try in %.0f s", exc, self._backoff)

    def close(self) -> None:
        """Nothing held open: each send is its own request."""
