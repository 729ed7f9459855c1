"""A worker SIGKILLed in the middle of telemetry batches loses nothing and doubles nothing.

The batches are recorded in the database before they are queued. On Redis the killed
worker's unacknowledged message comes back after the visibility timeout (acks_late +
reject_on_worker_lost); kombu's filesystem broker hands a message out only once, so there the
beat sweeper (`requeue_pending`) queues the still-pending batch again. Either way the writes
are idempotent on (run, node, gpu_index, ts).
"""

from __future__ import annotations

import os
import re
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from runs import ingest, ingest_process
from runs.choices import BatchKind, BatchStatus
from runs.models import GpuSample, IngestBatch
from tests.conftest import T0, World, make_run, start_worker, stop_worker, wait_for

QUEUE = "ingest-kill-test"
BATCHES = 4
SECONDS_PER_BATCH = 1250  # x 8 GPUs = 10,000 samples, the API's largest batch
RECEIVED = re.compile(r"Task runs\.ingest_gpu_samples\[[0-9a-f-]+\] received")


def record_batches(world: World) -> list[IngestBatch]:
    run = make_run(world.vision, "long-run", ended_at=T0 + timedelta(hours=3))
    node = run.attempts.get().nodes.get()
    batches = []
    for b in range(BATCHES):
        rows = []
        for second in range(b * SECONDS_PER_BATCH, (b + 1) * SECONDS_PER_BATCH):
            ts = (T0 + timedelta(seconds=second)).isoformat()
            for gpu in range(8):
                rows.append([run.pk, node.pk, gpu, ts, 90.0 + gpu, 40.0, 60 * 2**30, 80 * 2**30, 650.0, 700.0, 70.0])
        batch, duplicate = ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, rows, "nvml")
        assert not duplicate
        batches.append(batch)
    return batches


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_sigkill_mid_batch_then_a_new_worker_stores_every_sample_once(world: World, tmp_path: Path) -> None:
    batches = record_batches(world)
    env = {"AIRBOARD_BROKER_VISIBILITY_TIMEOUT": "5", "AIRBOARD_BROKER_RESTORE_INTERVAL": "2"}
    first = start_worker(tmp_path / "first", queues=QUEUE, extra_env=env)
    for batch in batches:
        ingest.enqueue_batch(batch, queue=QUEUE)  # outside a transaction: sent at once

    # Kill as soon as the worker has taken the first batch: it is then mid-write. The line to
    # wait for is the task's "received", not the task's name: the start-up banner lists every
    # task, and a kill then lands in the worker's first steps (inside kombu's restore sweep,
    # whose lock then outlives the worker by five minutes, or between BRPOP and the unacked
    # index), where no later sweep can bring the message back.
    assert wait_for(lambda: RECEIVED.search(first.log()) is not None, timeout=60, interval=0.01), first.log()
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(timeout=10)
    pending = IngestBatch.objects.filter(status=BatchStatus.PENDING).count()
    assert pending >= 1, "the worker finished everything before it was killed; the test proved nothing"
    assert GpuSample.objects.count() < BATCHES * SECONDS_PER_BATCH * 8

    second = start_worker(tmp_path / "second", queues=QUEUE, extra_env=env)
    try:
        if not settings.REDIS_URL:
            # The filesystem broker handed the killed worker's message out already: the sweeper re-queues it.
            ingest_process.requeue_pending(timezone.now(), queue=QUEUE)
        done = wait_for(lambda: not IngestBatch.objects.filter(status=BatchStatus.PENDING).exists(), timeout=90)
        assert done, second.log()
    finally:
        stop_worker(second)
    assert GpuSample.objects.count() == BATCHES * SECONDS_PER_BATCH * 8
    assert GpuSample.objects.filter(gpu_index=3).values("ts").distinct().count() == BATCHES * SECONDS_PER_BATCH
