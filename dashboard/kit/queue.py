"""Enqueue a Celery task by its name once the current transaction commits.

Domain code never imports a tasks module (that is how import cycles start: tasks import the
domain to run it). It names the task instead; the routes in settings pick the queue by name.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction

from dashboard.celery import app

logger = logging.getLogger(__name__)


def enqueue_on_commit(name: str, args: Sequence[object], *, queue: str | None = None) -> None:
    """Send task `name` with `args` after commit. A broker that is down is logged, not raised:
    the caller's data is committed, and each caller says what recovers it (a sweeper, a command)."""

    def send() -> None:
        try:
            app.send_task(name, args=list(args), queue=queue, retry=False)
        except Exception:  # the broker's errors vary by transport
            logger.warning("could not queue %s%r", name, tuple(args), exc_info=True)

    transaction.on_commit(send)
