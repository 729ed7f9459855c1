"""Telemetry batches through the API: validation in the request, writes in a real Celery worker."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from runs import ingest
from runs.choices import BatchKind, BatchStatus
from runs.models import GpuMinute, GpuSample, IngestBatch, MetricPoint, Node
from tests.conftest import (
    ROOT,
    T0,
    TESTS,
    World,
    database_url_for_test_db,
    make_run,
    serverless_api,
    wait_for,
)

GIB = 1024**3


def samples(run: str = "r1", n_seconds: int = 90, gpus: int = 8, start=T0) -> list[dict]:
    rows = []
    for second in range(n_seconds):
        for gpu in range(gpus):
            rows.append({
                "run": run, "node": 0, "gpu": gpu, "ts": (start + timedelta(seconds=second)).isoformat(),
                "utilization_gpu": 90 + (second + gpu) % 10, "utilization_memory": 40.0,
                "memory_used_bytes": 60 * GIB, "memory_total_bytes": 80 * GIB, "power_watts": 650.5,
                "power_limit_watts": 700.0, "temperature_c": 71, "sm_clock_mhz": 1980,
            })  # fmt: skip
    return rows


def batch_done(batch_id: int) -> bool:
    return IngestBatch.objects.filter(pk=batch_id, status=BatchStatus.DONE).exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_stores_a_batch_once_and_rolls_it_up(world: World, celery_worker) -> None:
    make_run(world.vision, "r1")
    api = serverless_api(world)
    body = {"source": "nvml", "samples": samples()}
    first = api.post("/api/v1/gpu-samples", body, content_type="application/json")
    assert first.status_code == 202, first.content
    batch_id = first.json()["id"]
    assert wait_for(lambda: batch_done(batch_id), timeout=60), celery_worker.log()
    assert GpuSample.objects.count() == 90 * 8
    assert set(GpuSample.objects.values_list("source", flat=True)) == {"nvml"}
    # Stored, the batch keeps its record (hash, counts) but not a JSON copy of the samples,
    # which would outlive the retention that removes the raw rows.
    assert IngestBatch.objects.get(pk=batch_id).rows == {"source": "nvml", "rows": []}

    again = api.post("/api/v1/gpu-samples", body, content_type="application/json")
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["id"] == batch_id

    # A different batch overlapping the first: only the new seconds are stored.
    overlap = api.post("/api/v1/gpu-samples", {"samples": samples(n_seconds=120)}, content_type="application/json")
    assert overlap.status_code == 202
    assert wait_for(lambda: batch_done(overlap.json()["id"]), timeout=60), celery_worker.log()
    assert GpuSample.objects.count() == 120 * 8
    status = api.get(f"/api/v1/batches/{overlap.json()['id']}").json()
    assert (status["inserted"], status["duplicates"]) == (30 * 8, 90 * 8)

    minute = GpuMinute.objects.get(gpu_index=0, minute=T0)
    assert minute.samples == 60
    assert minute.utilization_gpu_min == 90
    assert minute.utilization_gpu_max == 99
    assert minute.memory_used_bytes_max == 60 * GIB
    assert GpuMinute.objects.filter(gpu_index=0).count() == 2


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_metrics_go_through_the_worker_and_nan_is_stored_as_missing(world: World, celery_worker) -> None:
    make_run(world.vision, "r1")
    points = [
        {"run": "r1", "key": "train/loss", "step": step, "ts": (T0 + timedelta(seconds=step)).isoformat(),
         "value": 2.5 - step * 0.01}
        for step in range(50)
    ]  # fmt: skip
    points.append({"run": "r1", "key": "train/loss", "step": 50, "ts": (T0 + timedelta(seconds=50)).isoformat(),
                   "value": "NaN"})  # fmt: skip
    api = serverless_api(world)
    response = api.post("/api/v1/metrics", {"points": points}, content_type="application/json")
    assert response.status_code == 202, response.content
    assert wait_for(lambda: batch_done(response.json()["id"]), timeout=60), celery_worker.log()
    assert MetricPoint.objects.count() == 51
    assert MetricPoint.objects.get(step=50).value is None
    assert api.post("/api/v1/metrics", {"points": points}, content_type="application/json").json()["duplicate"]
    assert MetricPoint.objects.count() == 51


@pytest.mark.django_db
class TestRefusals:
    def post(self, world: World, body: dict, path: str = "/api/v1/gpu-samples"):
        return serverless_api(world).post(path, body, content_type="application/json")

    def test_each_bad_row_is_named_and_nothing_is_recorded(self, world: World) -> None:
        make_run(world.vision, "r1")
        rows = samples(n_seconds=2, gpus=2)
        rows[1]["utilization_gpu"] = 140
        rows[2]["ts"] = "not a time"
        rows[3]["memory_used_bytes"] = -5
        response = self.post(world, {"samples": rows})
        assert response.status_code == 422
        fields = {e["field"] for e in response.json()["errors"]}
        assert {"samples[1].utilization_gpu", "samples[2].ts", "samples[3].memory_used_bytes"} <= fields
        assert not IngestBatch.objects.exists()

    def test_non_finite_values_are_refused(self, world: World) -> None:
        make_run(world.vision, "r1")
        raw = samples(n_seconds=1, gpus=1)
        body = (
            '{"samples": [{"run": "r1", "gpu": 0, "ts": "%s", "power_watts": Infinity}]}' % raw[0]["ts"]  # noqa: UP031
        )
        response = serverless_api(world).post("/api/v1/gpu-samples", body, content_type="application/json")
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "samples[0].power_watts"

    def test_nul_nan_and_text_in_number_fields_are_each_named(self, world: World) -> None:
        make_run(world.vision, "r1")
        ts = samples(n_seconds=1, gpus=1)[0]["ts"]
        rows = [
            {"run": "r1", "gpu": 0, "ts": ts, "host": "node\u0000a"},
            {"run": "r1", "gpu": 1, "ts": ts, "temperature_c": float("nan")},
            {"run": "r1", "gpu": 2, "ts": ts, "power_watts": float("-inf")},
            {"run": "r1", "gpu": 3, "ts": ts, "utilization_gpu": "\u0000"},
            {"run": "r1", "gpu": 4, "ts": ts, "utilization_gpu": 50},
        ]
        body = json.dumps({"samples": rows})  # NaN and -Infinity as bare JSON literals, as Python's json reads them
        response = serverless_api(world).post("/api/v1/gpu-samples", body, content_type="application/json")
        assert response.status_code == 422
        errors = {e["field"]: e["message"] for e in response.json()["errors"]}
        assert set(errors) == {"samples[0].host", "samples[1].temperature_c", "samples[2].power_watts",
                               "samples[3].utilization_gpu"}  # fmt: skip
        assert "NUL" in errors["samples[0].host"]
        assert "finite" in errors["samples[1].temperature_c"] and "finite" in errors["samples[2].power_watts"]
        assert not IngestBatch.objects.exists()

    def test_unknown_or_foreign_runs_are_named(self, world: World) -> None:
        make_run(world.nlp, "nlp-run")
        rows = samples(run="nlp-run", n_seconds=1, gpus=1) + samples(run="nope", n_seconds=1, gpus=1)
        response = self.post(world, {"samples": rows})
        assert response.status_code == 422
        assert [e["field"] for e in response.json()["errors"]] == ["samples[0].run", "samples[1].run"]

    def test_samples_from_the_future_are_refused(self, world: World) -> None:
        make_run(world.vision, "r1")
        rows = samples(n_seconds=1, gpus=1, start=timezone.now() + timedelta(hours=1))
        response = self.post(world, {"samples": rows})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "samples[0].ts"

    def test_too_many_samples_is_413(self, world: World, settings) -> None:
        settings.AIRBOARD_MAX_SAMPLES_PER_BATCH = 10
        make_run(world.vision, "r1")
        response = self.post(world, {"samples": samples(n_seconds=2, gpus=8)})
        assert response.status_code == 413
        assert "limit is 10" in response.json()["detail"]

    def test_an_empty_batch_is_refused(self, world: World) -> None:
        assert self.post(world, {"samples": []}).status_code == 422

    def test_body_over_the_size_cap_is_413(self, world: World, settings) -> None:
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
        make_run(world.vision, "r1")
        response = self.post(world, {"samples": samples(n_seconds=10, gpus=8)})
        assert response.status_code == 413

    def test_the_default_cap_takes_ten_thousand_samples(self, world: World) -> None:
        make_run(world.vision, "r1")
        response = self.post(world, {"samples": samples(n_seconds=1250, gpus=8)})
        assert response.status_code == 202, response.content[:500]
        assert IngestBatch.objects.get().row_count == 10_000


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_nvidia_smi_file_imports_through_the_api(world: World, celery_worker) -> None:
    make_run(world.vision, "r1")
    text = (
        "timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
        "2026/11/02 09:00:01.000, 0, 36 %, 4567 MiB, 81559 MiB, 106.56 W\n"
        "2026/11/02 09:00:01.000, 1, [N/A], 4000 MiB, 81559 MiB, [Not Supported]\n"
        "this line is noise\n"
        "2026/11/02 09:00:02.000, 0, 38 %, 4600 MiB, 81559 MiB, 110.00 W\n"
    )
    api = serverless_api(world)
    response = api.post("/api/v1/runs/r1/telemetry-file", {"text": text}, content_type="application/json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["format"] == "nvidia-smi-csv"
    assert [p["line"] for p in body["skipped"]] == [4]
    assert wait_for(lambda: batch_done(body["id"]), timeout=60), celery_worker.log()
    first = GpuSample.objects.get(gpu_index=0, ts=T0 + timedelta(seconds=1))
    assert first.memory_used_bytes == 4567 * 1024 * 1024
    assert first.power_watts == pytest.approx(106.56)
    assert first.source == "nvidia-smi"
    missing = GpuSample.objects.get(gpu_index=1)
    assert missing.utilization_gpu is None
    assert missing.power_watts is None
    again = api.post("/api/v1/runs/r1/telemetry-file", {"text": text}, content_type="application/json")
    assert again.json()["duplicate"] is True


@pytest.mark.django_db
def test_a_telemetry_file_with_nothing_usable_is_422(world: World) -> None:
    make_run(world.vision, "r1")
    api = serverless_api(world)
    response = api.post("/api/v1/runs/r1/telemetry-file", {"text": "hello\nworld\n"}, content_type="application/json")
    assert response.status_code == 422
    assert "format" in response.json()["errors"][0]["message"]
    assert not IngestBatch.objects.exists()


@pytest.mark.django_db
def test_a_recorded_batch_reads_back_as_sent_and_keeps_its_content_hash(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    rows = [[run.pk, node.pk, 0, "2026-11-02T09:00:00+00:00", 97.5, *([None] * 15), [{"pid": 7, "run": 'é"x'}]]]
    batch, duplicate = ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, rows, "nvml")
    assert not duplicate
    assert IngestBatch.objects.get(pk=batch.pk).rows == batch.rows == {"source": "nvml", "rows": rows}
    # The hash is the one batches were recorded with before the rows were serialized once:
    # a batch re-sent across the upgrade is still a duplicate.
    text = json.dumps(rows, separators=(",", ":"), sort_keys=True, default=str) + "nvml"
    assert batch.content_hash == hashlib.sha256(text.encode()).hexdigest()
    assert ingest.record_batch(world.vision, BatchKind.GPU_SAMPLES, rows, "nvml") == (batch, True)


# --- Telemetry files: refusals and hostile text ------------------------------------------------

DATA = TESTS / "data" / "telemetry"
# One dcgm-exporter line whose Hostname label runs for 100 KB without its closing quote.
HUGE_LABEL_LINE = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="' + "x" * 100_000 + "} 5 1793610000000\n"


def post_file(world: World, body: dict, team=None) -> object:
    api = serverless_api(world, team)
    return api.post("/api/v1/runs/r1/telemetry-file", body, content_type="application/json")


@pytest.mark.django_db
def test_a_100_kb_label_is_a_quick_422_naming_the_line(world: World) -> None:
    make_run(world.vision, "r1")
    began = time.monotonic()
    response = post_file(world, {"text": "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + HUGE_LABEL_LINE * 20})
    assert time.monotonic() - began < 5
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == [f"text:line {n}" for n in range(2, 22)]
    assert "100,056 characters long" in errors[0]["message"]


@pytest.mark.django_db
def test_an_all_zero_exporter_text_is_refused(world: World) -> None:
    make_run(world.vision, "r1")
    body = {"text": (DATA / "dcgm_all_zero.prom").read_text(), "start": (T0 + timedelta(minutes=5)).isoformat()}
    response = post_file(world, body)
    assert response.status_code == 422
    assert "every reading is 0" in response.json()["errors"][0]["message"]
    assert not IngestBatch.objects.exists()


@pytest.mark.django_db
def test_samples_outside_the_run_are_refused_and_tz_places_them(world: World) -> None:
    make_run(world.vision, "r1")  # 2026-11-02 09:00 to 10:00 UTC
    text = (
        "timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
        "2026/11/02 01:00:01.000, 0, 36 %, 4567 MiB\n"  # 09:00:01 in Los Angeles (PST, UTC-8)
    )
    refused = post_file(world, {"text": text})
    assert refused.status_code == 422
    message = refused.json()["errors"][0]["message"]
    assert "1 of 1 samples (2026-11-02T01:00:01+00:00 to 2026-11-02T01:00:01+00:00) fall outside run r1's window" in (
        message
    )
    placed = post_file(world, {"text": text, "tz": "America/Los_Angeles"})
    assert placed.status_code == 202, placed.content
    assert placed.json()["skipped"] == []
    bad_zone = post_file(world, {"text": text, "tz": "Mars/Olympus"})
    assert bad_zone.status_code == 422
    assert bad_zone.json()["errors"] == [{"field": "tz", "message": "unknown time zone 'Mars/Olympus'"}]


@pytest.mark.django_db
def test_dcgmi_dmon_can_be_named_as_the_format(world: World) -> None:
    make_run(world.vision, "r1")
    text = (DATA / "dcgmi_dmon_prompt.txt").read_text()
    response = post_file(world, {"text": text, "format": "dcgmi-dmon", "start": T0.isoformat()})
    assert response.status_code == 202, response.content
    assert response.json()["format"] == "dcgmi-dmon"
    assert response.json()["skipped"][0]["line"] == 1  # the shell prompt
    assert IngestBatch.objects.get(pk=response.json()["id"]).rows["source"] == "dcgm"


@pytest.mark.django_db(transaction=True)
def test_gunicorn_answers_a_100_kb_label_before_its_worker_timeout(world: World, tmp_path: Path) -> None:
    """The attack as it was: the file POSTed to a real gunicorn. On c0b5b0e the label pattern
    backtracked for about a minute per line and gunicorn killed the worker (no response)."""
    make_run(world.vision, "r1")
    key = world.key(world.vision)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, DATABASE_URL=database_url_for_test_db(), PYTHONUNBUFFERED="1")
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "dashboard.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", "1", "--timeout", str(GUNICORN_TIMEOUT_S), "--graceful-timeout", "1"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        assert wait_for(lambda: "Booting worker" in log_path.read_text() or server.poll() is not None, timeout=60)
        assert server.poll() is None, log_path.read_text()
        url = f"http://127.0.0.1:{port}/api/v1/runs/r1/telemetry-file"
        text = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + HUGE_LABEL_LINE * 3
        began = time.monotonic()
        response = requests.post(
            url, json={"text": text}, headers={"Authorization": f"Bearer {key}"}, timeout=GUNICORN_TIMEOUT_S * 3
        )
        elapsed = time.monotonic() - began
        assert response.status_code == 422, (response.status_code, log_path.read_text()[-2000:])
        assert elapsed < GUNICORN_TIMEOUT_S
        assert "WORKER TIMEOUT" not in log_path.read_text()
    finally:
        server.terminate()
        server.wait(timeout=20)


GUNICORN_TIMEOUT_S = 10
