"""Redis stopped and restarted in the middle of telemetry ingest: nothing accepted is lost or doubled.

The test runs its own `redis-server` on a free loopback port (never the shared one), points
this process's Celery app and a real worker at it, and posts GPU sample batches through the
API. Half-way through it kills Redis: the API keeps answering 202, because a batch is recorded
in the database before it is queued and a failed send leaves it pending. Redis comes back
empty (no persistence: whatever was queued is gone too); the beat sweeper's domain function
(`requeue_pending`, run in production by `runs.requeue_pending_batches`) queues the pending
batches again and the worker, which reconnected on its own, writes each sample exactly once.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import kombu.pools
import pytest
from django.test import Client
from django.utils import timezone

from dashboard.celery import app
from runs import ingest, ingest_process
from runs.choices import BatchStatus
from runs.models import GpuSample, IngestBatch
from tests.conftest import T0, World, make_run, serverless_api, start_worker, stop_worker, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not on PATH: cannot run a private Redis to kill"
)

QUEUE = "ingest-redis-restart-test"
BATCHES_BEFORE, BATCHES_DURING, BATCHES_AFTER = 3, 3, 2
SECONDS_PER_BATCH = 50  # x 8 GPUs = 400 samples a batch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    """A throwaway redis-server this test may kill and restart at will."""

    def __init__(self, tmp_dir: Path) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.tmp_dir = tmp_dir
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--dir", str(self.tmp_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if not wait_for(self._answers, timeout=15):
            self.stop()
            raise RuntimeError(f"private redis-server did not start on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGKILL, like a crashed or OOM-killed Redis: no clean shutdown, nothing saved."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


def _reset_producer_pool() -> None:
    """Drop the pooled broker connections (only to switch URL; the fault itself needs no reset)."""
    kombu.pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def private_redis(tmp_path: Path, settings) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    saved = (app.conf.broker_url, app.conf.broker_transport_options)
    options = {"visibility_timeout": 5, "unacked_restore_interval": 2, "unacked_restore_throttle": 1}
    settings.CELERY_BROKER_URL = redis.url
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    _reset_producer_pool()
    app.conf.broker_url = redis.url
    app.conf.broker_transport_options = options
    try:
        yield redis
    finally:
        redis.stop()
        _reset_producer_pool()
        app.conf.broker_url, app.conf.broker_transport_options = saved


def _batch(run_external_id: str, first_second: int) -> dict:
    samples = []
    for second in range(first_second, first_second + SECONDS_PER_BATCH):
        ts = (T0 + timedelta(seconds=second)).isoformat()
        for gpu in range(8):
            samples.append({"run": run_external_id, "gpu": gpu, "ts": ts, "utilization_gpu": 90.0 + gpu,
                            "utilization_memory": 40.0, "power_watts": 650.0, "temperature_c": 70.0})  # fmt: skip
    return {"source": "nvml", "samples": samples}


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_redis_killed_mid_ingest_then_restarted_stores_every_sample_once(
    world: World, tmp_path: Path, private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API routes batches to the "ingest" queue; send them to the test's private queue instead.
    enqueue = ingest.enqueue_batch
    monkeypatch.setattr(ingest, "enqueue_batch", lambda batch, queue=None: enqueue(batch, queue=QUEUE))
    make_run(world.vision, "long-run", ended_at=T0 + timedelta(hours=3))
    api: Client = serverless_api(world)
    worker = start_worker(
        tmp_path / "worker",
        queues=QUEUE,
        extra_env={"REDIS_URL": private_redis.url, "AIRBOARD_BROKER_VISIBILITY_TIMEOUT": "5",
                   "AIRBOARD_BROKER_RESTORE_INTERVAL": "2"},
    )  # fmt: skip
    total = BATCHES_BEFORE + BATCHES_DURING + BATCHES_AFTER
    posted = 0

    def post(n: int) -> None:
        nonlocal posted
        for _ in range(n):
            response = api.post(
                "/api/v1/gpu-samples", _batch("long-run", posted * SECONDS_PER_BATCH), content_type="application/json"
            )
            assert response.status_code == 202, response.content
            posted += 1

    try:
        post(BATCHES_BEFORE)
        # The worker drains what reached the broker while it was up.
        assert wait_for(
            lambda: IngestBatch.objects.filter(status=BatchStatus.DONE).count() == BATCHES_BEFORE, timeout=60
        ), worker.log()

        private_redis.stop()
        post(BATCHES_DURING)  # still 202: recorded before queued; the failed send is swallowed and logged
        assert IngestBatch.objects.filter(status=BatchStatus.PENDING).count() == BATCHES_DURING

        private_redis.start()  # same port, empty: anything queued before the crash is gone
        # No reset of this process's broker pool: a web process must recover by itself.
        post(BATCHES_AFTER)

        # The beat sweeper: everything still pending is queued again (some may be queued twice; harmless).
        swept = ingest_process.requeue_pending(timezone.now() + timedelta(seconds=1), queue=QUEUE)
        assert swept >= BATCHES_DURING
        done = wait_for(lambda: not IngestBatch.objects.filter(status=BatchStatus.PENDING).exists(), timeout=120)
        assert done, worker.log()
    finally:
        stop_worker(worker)

    assert IngestBatch.objects.count() == total
    assert GpuSample.objects.count() == total * SECONDS_PER_BATCH * 8
    assert GpuSample.objects.filter(gpu_index=3).values("ts").distinct().count() == total * SECONDS_PER_BATCH
    assert sum(IngestBatch.objects.values_list("inserted", flat=True)) == total * SECONDS_PER_BATCH * 8
