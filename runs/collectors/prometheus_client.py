"""A narrow adapter over the HTTP API every Prometheus-compatible server answers: `query_range` only.

Prometheus, VictoriaMetrics, Mimir and Thanos all serve `POST /api/v1/query_range` with the same
form fields and the same `{"status": "success", "data": {"resultType": "matrix", "result": [...]}}`
answer (https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries), so a server
upgrade or swap touches only this file.

Two kinds of failure, kept apart because the collector treats them differently:

- `SourceDown`: the server cannot be used at all (unreachable, the credentials refused, not a
  Prometheus API). The pass stops; what it stored so far stays.
- `QueryRefused`: this one query failed (a 400/422 naming the query, a timeout, an answer too
  large or not a matrix). The collector skips it, counts it, and goes on.

Credentials (a bearer token, or basic auth) travel in headers only; no message here names them,
and any URL quoted in one goes through the one redactor.
"""

from __future__ import annotations

import json
from typing import Any

import requests

from dashboard.kit.commands import CollectorError
from dashboard.kit.redaction import redact

# The most an answer may weigh: a query sized by the collector is a few MB; a server (or a
# proxy in front of it) answering more is refused rather than read into memory.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_ERROR = 300


class SourceDown(CollectorError):
    """The server cannot be used at all this pass."""


class QueryRefused(Exception):
    """One query failed; the others may not."""


class PrometheusSource:
    """`query_range` against one server, with its credentials set once."""

    def __init__(
        self, url: str, *, token: str = "", username: str = "", password: str = "", timeout: float = 30.0
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        elif username:
            self.session.auth = (username, password)

    @property
    def shown_url(self) -> str:
        return redact(self.url)

    def query_range(self, query: str, start: int, end: int, step: int) -> list[dict[str, Any]]:
        """The matrix of `query` from `start` to `end` (Unix seconds) every `step` seconds."""
        form = {"query": query, "start": str(start), "end": str(end), "step": f"{step}s"}
        try:
            response = self.session.post(
                f"{self.url}/api/v1/query_range", data=form, timeout=self.timeout, stream=True, allow_redirects=False
            )
        except requests.ConnectionError as exc:  # a connect timeout too: the server is not there
            raise SourceDown(f"{self.shown_url} cannot be reached: {type(exc).__name__}") from None
        except requests.Timeout:  # it answers, but not this query in time
            raise QueryRefused(f"no answer within {self.timeout:g}s") from None
        except requests.RequestException as exc:
            raise SourceDown(f"{self.shown_url} cannot be reached: {type(exc).__name__}") from None
        with response:
            if response.status_code in (401, 403):
                raise SourceDown(f"{self.shown_url} refused the credentials (HTTP {response.status_code})")
            if response.status_code == 404 or 300 <= response.status_code < 400:
                raise SourceDown(
                    f"{self.shown_url} has no /api/v1/query_range (HTTP {response.status_code}): "
                    "AIRBOARD_PROMETHEUS_URL is the server's base URL"
                )
            body = _limited_body(response)
        try:
            answer = json.loads(body)
        except ValueError:
            raise QueryRefused(f"HTTP {response.status_code}, not JSON") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error") if isinstance(answer, dict) else None
            kind = answer.get("errorType") if isinstance(answer, dict) else None
            raise QueryRefused(f"HTTP {response.status_code} {kind or 'error'}: {redact(str(error))[:MAX_ERROR]}")
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise QueryRefused("the answer is not a matrix")
        return data["result"]


def _limited_body(response: requests.Response) -> bytes:
    parts: list[bytes] = []
    size = 0
    for part in response.iter_content(chunk_size=1 << 16):
        size += len(part)
        if size > MAX_RESPONSE_BYTES:
            raise QueryRefused(f"answer larger than {MAX_RESPONSE_BYTES // (1024 * 1024)} MiB")
        parts.append(part)
    return b"".join(parts)
