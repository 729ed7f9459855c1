"""Ship batches to the server as the Celery task `runs.ingest_agent_batch`, by name.

The agent never imports Django or the project's tasks: a minimal Celery app knows only the
broker, and `send_task` names the task the server's workers run. When the broker cannot take
a batch, it goes to the on-disk buffer; buffered batches are sent first, in order, the next
time, so the server sees a node's batches in the order they were taken. A batch sent twice
(a broker that took it but failed to say so) is harmless: the server stores its rows once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.exceptions import ChannelError, OperationalError

from agent import TASK_NAME
from agent.buffer import DiskBuffer

logger = logging.getLogger(__name__)

QUEUE = "ingest"
# After a failed send, batches go straight to disk for a while: each failed connect costs
# seconds (redis-py retries with backoff), time the sampling loop should not lose every ship.
BACKOFF_FIRST_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 300.0
# What an unreachable or broken broker raises: kombu wraps socket errors as OperationalError;
# the filesystem transport raises ChannelError for a folder it cannot write.
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    ChannelError,
    ConnectionError,
    TimeoutError,
    OSError,
)


def make_celery_app(broker_url: str, transport_options: Mapping[str, Any] | None = None) -> Celery:
    """A Celery app that can only send: JSON, no result backend, short connection timeouts."""
    app = Celery("airboard-agent", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        broker_transport_options=dict(transport_options or {}),
        # Fail fast to the disk buffer rather than block sampling while the broker is away.
        broker_connection_timeout=3,
        broker_connection_retry_on_startup=False,
    )
    return app


def celery_app_from_env(env: Mapping[str, str] | None = None) -> Celery:
    """The broker the server uses: REDIS_URL, else kombu's filesystem transport in AIRBOARD_BROKER_DIR.

    These are the same variables (and defaults) as the server's settings; the filesystem
    broker only works where the node shares that folder with the server.
    """
    env = os.environ if env is None else env
    redis_url = env.get("REDIS_URL", "").strip()
    if redis_url:
        if not redis_url.startswith(("redis://", "rediss://")):
            raise ValueError("REDIS_URL must start with redis:// or rediss://")
        return make_celery_app(redis_url, {"visibility_timeout": 3600})
    folder = Path(env.get("AIRBOARD_BROKER_DIR") or "var/broker")
    (folder / "queue").mkdir(parents=True, exist_ok=True)
    return make_celery_app(
        "filesystem://",
        {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        },
    )


class Shipper:
    """Sends batches through `app`, buffering on broker errors."""

    def __init__(
        self,
        app: Celery,
        buffer: DiskBuffer,
        queue: str = QUEUE,
        clock: Callable[[], float] = time.monotonic,
        key: str = "",
    ) -> None:
        self.app = app
        self.buffer = buffer
        # The node's ingest key, added at send time only: buffered batches on disk never hold it.
        self.key = key
        self.queue = queue
        self.sent = 0
        self._clock = clock
        self._backoff = 0.0
        self._retry_at = 0.0

    def send(self, payload: dict[str, Any]) -> None:
        """One send; raises a BROKER_ERRORS member when the broker does not take it."""
        # retry=False: kombu's default retry policy would block the sampling loop for seconds.
        self.app.send_task(TASK_NAME, args=[{**payload, "key": self.key}], queue=self.queue, retry=False)
        self.sent += 1

    def ship(self, payload: dict[str, Any], force: bool = False) -> bool:
        """Send the buffered batches, then this one; on a broker error buffer what is left.

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
        except BROKER_ERRORS as exc:
            payload["dropped_samples"] -= dropped
            self.buffer.add_dropped(dropped)
            self._failed(exc)
            self.buffer.append(payload)
            return False
        self._backoff = 0.0
        return True

    def drain(self, force: bool = False) -> bool:
        """Send what the buffer holds, oldest first; False when the broker is (still) away."""
        if not force and self._clock() < self._retry_at:
            return False
        if not self.buffer.files():
            return True
        try:
            sent = self.buffer.drain(self.send)
        except BROKER_ERRORS as exc:
            self._failed(exc)
            return False
        self._backoff = 0.0
        if sent:
            logger.info("broker is back: sent %d buffered batch(es)", sent)
        return True

    def _failed(self, exc: BaseException) -> None:
        self._backoff = min(max(self._backoff * 2, BACKOFF_FIRST_SECONDS), BACKOFF_MAX_SECONDS)
        self._retry_at = self._clock() + self._backoff
        logger.warning("broker unreachable (%s: %s); buffering on disk, next try in %.0f s",
                       type(exc).__name__, exc, self._backoff)  # fmt: skip

    def close(self) -> None:
        """Release the broker connections (the app's producer pool)."""
        with contextlib.suppress(BROKER_ERRORS):
            self.app.close()
