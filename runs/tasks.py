"""Celery tasks of runs/: thin wrappers that take ids, re-fetch and call the domain code."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from runs import ingest_process

# Batches are idempotent on natural keys, so a task whose worker died is safely re-run:
# late acknowledgement plus reject-on-worker-lost puts it back on the queue.
BATCH_TASK_OPTIONS: dict[str, Any] = {
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
    ingest_process.process_batch(batch_id)


@shared_task(name="runs.ingest_metrics", **BATCH_TASK_OPTIONS)
def ingest_metrics(batch_id: int) -> None:
    ingest_process.process_batch(batch_id)


@shared_task(name="runs.requeue_pending_batches", soft_time_limit=60, time_limit=90)
def requeue_pending_batches(older_than_seconds: int = 120) -> int:
    """Queue again the batches still pending after a while (a broker that lost them, a queue that was down)."""
    return ingest_process.requeue_pending(timezone.now() - timedelta(seconds=older_than_seconds))


# Collectors: each pass is idempotent (natural keys, cursors saved after writes), so a pass
# re-run after a lost worker is harmless. The modules are imported in the task body so a
# worker starts even where a collector's optional client is not installed.
COLLECT_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": 5,
    "max_retries": 3,
    "soft_time_limit": 300,
    "time_limit": 360,
}


@shared_task(name="runs.collect_mlflow", **COLLECT_OPTIONS)
def collect_mlflow() -> int:
    from runs.collectors import mlflow

    return mlflow.collect_once().items


@shared_task(name="runs.collect_runs", **COLLECT_OPTIONS)
def collect_runs() -> int:
    from runs.collectors import runsource

    return runsource.collect_once().items


@shared_task(name="runs.collect_logs", **COLLECT_OPTIONS)
def collect_logs() -> int:
    from runs.collectors import logsource

    return logsource.collect_once().items


@shared_task(name="runs.collect_prometheus", **COLLECT_OPTIONS)
def collect_prometheus() -> int:
    from runs.collectors import prometheus

    return prometheus.collect_once().items


# Retention: idempotent (deletes only what is past the cutoff), so a lost worker re-runs it.
@shared_task(
    name="runs.prune_telemetry",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=3000,
    time_limit=3300,
)
def prune_telemetry() -> int:
    """Delete raw GPU samples older than AIRBOARD_TELEMETRY_RAW_DAYS; rollups are kept."""
    from runs.telemetry import retention

    return retention.prune_raw_samples().deleted


# Compaction of closed minutes into GpuSampleBlock rows: idempotent (a minute already folded
# has no hot rows left), one minute per transaction, so a lost worker re-runs it harmlessly.
@shared_task(
    name="runs.compact_telemetry",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=50,
    time_limit=55,
)
def compact_telemetry() -> int:
    """Fold raw samples older than AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES into blocks; returns samples folded."""
    from runs.telemetry import blocks

    return blocks.compact_samples().samples


# Partition upkeep: creates only what is missing, under an advisory lock, so a doubled beat or
# a re-run after a lost worker changes nothing. A lock wait past lock_timeout raises
# OperationalError: retried a few times, then the next hourly run tries again.
@shared_task(
    name="runs.maintain_telemetry_partitions",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=30,
    max_retries=3,
    soft_time_limit=600,
    time_limit=660,
)
def maintain_telemetry_partitions() -> int:
    """PostgreSQL: create the daily partitions of both raw tables ahead; returns how many were made."""
    from runs.telemetry import partitions

    return sum(len(partitions.ensure_partitions(table=table)) for table in partitions.ALL_TABLES)


# Failure classification: overwrites one FailureAnalysis row per run, so re-running is harmless.
# Sent by name by runs.ingest.classify_later; CELERY_TASK_ROUTES puts it on the collect queue.
@shared_task(
    name="runs.classify_run",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=5,
    max_retries=3,
    soft_time_limit=300,
    time_limit=360,
)
def classify_run(run_id: int) -> str:
    """Classify a failed run's logs and store the verdict; '' when the run is gone."""
    from runs.failures import classify_pass
    from runs.models import Run

    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return ""
    return classify_pass.classify_run(run).class_id
