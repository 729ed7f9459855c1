"""Celery tasks of runs/: thin wrappers that take ids, re-fetch and call the domain code."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from runs import ingest

# Batches are idempotent on natural keys, so a task whose worker died is safely re-run:
# late acknowledgement plus reject-on-worker-lost puts it back on the queue.
BATCH_TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "max_retries": 5,
    "soft_time_limit": 120,
    "time_limit": 180,
}


@shared_task(name="runs.ingest_gpu_samples", **BATCH_TASK_OPTIONS)
def ingest_gpu_samples(batch_id: int) -> None:
    ingest.process_batch(batch_id)


@shared_task(name="runs.ingest_metrics", **BATCH_TASK_OPTIONS)
def ingest_metrics(batch_id: int) -> None:
    ingest.process_batch(batch_id)


@shared_task(name="runs.requeue_pending_batches", soft_time_limit=60, time_limit=90)
def requeue_pending_batches(older_than_seconds: int = 120) -> int:
    """Queue again the batches still pending after a while (a broker that lost them, a queue that was down)."""
    from runs.models import IngestBatch

    count = 0
    for batch in IngestBatch.objects.filter(
        pk__in=list(ingest.pending_batches(timezone.now() - timedelta(seconds=older_than_seconds)))[:1000]
    ):
        ingest.enqueue_batch(batch)
        count += 1
    return count
