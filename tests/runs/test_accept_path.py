"""The fast accept path of POST /api/v1/gpu-samples checks exactly what GpuSampleBatchIn checks
(tests/runs/telemetry/test_sample_structs.py holds the two to the same values by property test)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from django.db import connection
from pydantic import ValidationError

from runs import ingest, ingest_process
from runs.choices import BatchKind
from runs.models import IngestBatch
from runs.schemas import GpuSampleBatchIn
from runs.telemetry.sample_structs import decode_batch, from_model
from tests.conftest import T0, World, make_run, serverless_api

GOOD = {
    "run": "r1", "gpu": 3, "ts": T0.isoformat(), "utilization_gpu": 97, "power_watts": 650.125,
    "processes": [{"pid": 7, "used_memory_bytes": 1024, "run": "r1"}, {"pid": 8}],
}  # fmt: skip


BAD_SAMPLES = [
    {"gpu": 0, "ts": T0.isoformat()},  # no run
    {**GOOD, "gpu": 256},
    {**GOOD, "gpu": -1},
    {**GOOD, "ts": "yesterday"},
    {**GOOD, "ts": "1969-12-31T23:59:59+00:00"},
    {**GOOD, "ts": "2026-11-02T09:00:00-23:00"},
    {**GOOD, "utilization_gpu": 100.5},
    {**GOOD, "utilization_gpu": "NaN"},
    {**GOOD, "power_watts": 1e400},
    {**GOOD, "memory_used_bytes": 2**50 + 1},
    {**GOOD, "memory_used_bytes": 1.5},
    {**GOOD, "run": "has space"},
    {**GOOD, "run": ""},
    {**GOOD, "node": 4097},
    {**GOOD, "attempt": 0},
    {**GOOD, "run_source": "nope"},
    {**GOOD, "processes": [{"pid": -1}]},
    {**GOOD, "processes": [{"run": "x"}]},
    {**GOOD, "processes": [{"pid": 1}] * 1001},
    {**GOOD, "host": "h" * 256},
]


@pytest.mark.parametrize("sample", [GOOD, {"run": "r", "gpu": 0, "ts": "2026-11-02T09:00:00"}, *BAD_SAMPLES])
def test_the_fast_path_and_the_model_agree_on_every_verdict(sample: dict) -> None:
    body = json.dumps({"source": "nvml", "samples": [sample]})
    try:
        expected = from_model(GpuSampleBatchIn.model_validate_json(body))
    except ValidationError:
        expected = None
    fast = decode_batch(body.encode())
    assert (fast is None) == (expected is None)
    if expected is not None:
        assert fast == expected  # the same values, defaults filled in, times in UTC


def _post(world: World, body: str):
    return serverless_api(world).post("/api/v1/gpu-samples", body, content_type="application/json")


@pytest.mark.django_db
def test_a_nul_is_refused_with_the_models_message_and_the_field_named(world: World) -> None:
    make_run(world.vision, "r1")
    response = _post(world, json.dumps({"samples": [{**GOOD, "host": "a\x00b"}, {**GOOD, "gpu": 999}]}))
    assert response.status_code == 422
    errors = {e["field"]: e["message"] for e in response.json()["errors"]}
    assert "NUL" in errors["samples[0].host"] and "samples[1].gpu" in errors
    assert not IngestBatch.objects.exists()


@pytest.mark.django_db
def test_an_accepted_batch_is_stored_as_the_model_would_store_it(world: World) -> None:
    run = make_run(world.vision, "r1")
    response = _post(world, json.dumps({"source": "nvml", "samples": [GOOD]}))
    assert response.status_code == 202, response.content
    batch = IngestBatch.objects.get()
    node_id = run.attempts.get().nodes.get(index=0).pk
    values = [None] * 16
    values[0], values[4] = 97.0, 650.125
    processes = [{"pid": 7, "used_memory_bytes": 1024, "run": "r1"}, {"pid": 8, "used_memory_bytes": None, "run": ""}]
    assert batch.rows == {"source": "nvml", "rows": [[run.pk, node_id, 3, T0.isoformat(), *values, processes]]}
    # The hash is json.dumps's, whichever serializer wrote the text.
    text = json.dumps(batch.rows["rows"], separators=(",", ":"), sort_keys=True, default=str) + "nvml"
    assert batch.content_hash == hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.django_db
def test_an_accepted_batch_is_kept_as_the_text_that_was_hashed(world: World) -> None:
    make_run(world.vision, "r1")
    response = _post(world, json.dumps({"source": "nvml", "samples": [GOOD, {**GOOD, "gpu": 4}]}))
    assert response.status_code == 202, response.content
    batch = IngestBatch.objects.get()
    # The column as the database holds it: the text written, not a re-serialized JSON value
    # (PostgreSQL's jsonb would reorder the keys and space it out).
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT rows FROM {IngestBatch._meta.db_table} WHERE id = %s", [batch.pk])  # noqa: S608
        (stored,) = cursor.fetchone()
    head = '{"source":"nvml","rows":'
    assert isinstance(stored, str) and stored.startswith(head) and stored.endswith("]]}")
    assert hashlib.sha256((stored[len(head) : -1] + "nvml").encode()).hexdigest() == batch.content_hash
    assert len(json.loads(stored)["rows"]) == 2


@pytest.mark.parametrize(
    "value", [0.1, 100.0, 1e-05, 0.0001, 1e16, 123456789.125, -0.0, 2**63 - 1, 2**70, "é", "\x7f", "a\nb", None]
)
def test_rows_json_is_json_dumps_byte_for_byte(value: object) -> None:
    rows = [[1, 2, value, {"z": value, "a": [value]}]]
    assert ingest.rows_json(rows) == json.dumps(rows, separators=(",", ":"), sort_keys=True, default=str)


@pytest.mark.django_db
def test_a_resent_batch_is_a_duplicate(world: World) -> None:
    make_run(world.vision, "r1")
    body = json.dumps({"samples": [GOOD]})
    assert _post(world, body).status_code == 202
    again = _post(world, body)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert IngestBatch.objects.filter(kind=BatchKind.GPU_SAMPLES).count() == 1


@pytest.mark.django_db
def test_nvlink_is_recorded_after_processes_and_stored(world: World) -> None:
    run = make_run(world.vision, "r1")
    # What the agent sends from an SXM H100: GPM's MiB/s x 1024, in KB/s.
    sample = {**GOOD, "nvlink_tx_kbps": 184_320.0 * 1024, "nvlink_rx_kbps": 179_200.0 * 1024}
    assert _post(world, json.dumps({"source": "nvml", "samples": [sample]})).status_code == 202
    batch = IngestBatch.objects.get()
    (row,) = batch.rows["rows"]
    assert row[ingest.SAMPLE_V1_WIDTH - 1] == [
        {"pid": 7, "used_memory_bytes": 1024, "run": "r1"}, {"pid": 8, "used_memory_bytes": None, "run": ""},
    ]  # fmt: skip
    assert row[ingest.SAMPLE_V1_WIDTH :] == [184_320.0 * 1024, 179_200.0 * 1024]
    ingest_process.process_batch(batch.pk)
    stored = run.gpu_samples.get()
    assert (stored.nvlink_tx_kbps, stored.nvlink_rx_kbps) == (184_320.0 * 1024, 179_200.0 * 1024)
    # A value past any NVLink generation (10 PB/s) is refused with the field named.
    response = _post(world, json.dumps({"samples": [{**GOOD, "nvlink_rx_kbps": 1e13}]}))
    assert response.status_code == 422 and "nvlink_rx_kbps" in response.content.decode()


@pytest.mark.django_db
def test_an_accepted_batch_is_compressed_with_lz4_where_the_server_has_it(world: World) -> None:
    make_run(world.vision, "r1")
    samples = [
        {**GOOD, "gpu": gpu, "ts": (T0 + timedelta(seconds=s)).isoformat()} for s in range(40) for gpu in range(8)
    ]
    assert _post(world, json.dumps({"source": "nvml", "samples": samples})).status_code == 202
    table = IngestBatch._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute(f"SELECT typeof(rows) FROM {table}")  # noqa: S608
            assert cursor.fetchone() == ("text",)  # SQLite: text as JSONField keeps it, nothing to choose
            return
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        (lz4,) = cursor.fetchone() or (False,)
        cursor.execute(f"SELECT pg_column_compression(rows) FROM {table}")  # noqa: S608
        assert cursor.fetchone() == ("lz4" if lz4 else "pglz",)
