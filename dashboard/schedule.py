"""Celery beat's schedule: every periodic job, in one place, each with why it runs."""

from celery.schedules import crontab

BEAT_SCHEDULE = {
    # Telemetry batches are recorded before they are queued; this re-queues any the broker
    # lost (Redis restarted, worker queue purged) so accepted data always lands.
    "requeue-pending-batches": {
        "task": "runs.requeue_pending_batches",
        "schedule": crontab(minute="*"),
    },
}
