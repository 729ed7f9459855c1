"""Tasks of the project package: the live demo, which writes both apps' data.

The task keeps its name (`runs.collect_live_demo`), so beat schedules and routes stay as they were.
"""

from __future__ import annotations

from celery import shared_task

from dashboard.demo import live
from runs.tasks import COLLECT_OPTIONS


@shared_task(name="runs.collect_live_demo", **COLLECT_OPTIONS)
def collect_live_demo() -> int:
    """A minute of the demo fleet (a no-op outside a demo workspace); returns the runs it moved."""
    return live.tick().runs
