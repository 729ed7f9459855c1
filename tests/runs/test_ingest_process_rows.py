"""A recorded batch's rows of both layouts (with and without the columns added since) are stored whole."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runs import ingest, ingest_process
from runs.models import IngestBatch
from tests.conftest import T0, World, make_run, serverless_api


@pytest.mark.django_db
def test_short_and_long_rows_of_one_batch_are_stored_with_the_batch_source(world: World) -> None:
    run = make_run(world.vision, "r1")
    samples = [
        {"run": "r1", "gpu": 0, "ts": T0.isoformat(), "utilization_gpu": 50, "nvlink_tx_kbps": 1024.0},
        {"run": "r1", "gpu": 1, "ts": T0.isoformat(), "utilization_gpu": 60, "processes": [{"pid": 3}]},
        {"run": "r1", "gpu": 0, "ts": (T0 + timedelta(seconds=1)).isoformat(), "power_watts": 7.5},
    ]
    body = json.dumps({"source": "nvml", "samples": samples})
    response = serverless_api(world).post("/api/v1/gpu-samples", body, content_type="application/json")
    assert response.status_code == 202, response.content
    batch = IngestBatch.objects.get()
    widths = sorted(len(row) for row in batch.rows["rows"])
    assert widths == [ingest.SAMPLE_V1_WIDTH, ingest.SAMPLE_V1_WIDTH, len(ingest.SAMPLE_COLUMNS) - 1]
    assert ingest_process.process_batch(batch.pk).inserted == 3
    stored = {(s.gpu_index, s.ts): s for s in run.gpu_samples.all()}
    first, second, third = stored[(0, T0)], stored[(1, T0)], stored[(0, T0 + timedelta(seconds=1))]
    assert (first.utilization_gpu, first.nvlink_tx_kbps, first.nvlink_rx_kbps) == (50.0, 1024.0, None)
    assert (second.utilization_gpu, second.nvlink_tx_kbps, second.processes) == (60.0, None, [
        {"pid": 3, "used_memory_bytes": None, "run": ""}
    ])  # fmt: skip
    assert (third.power_watts, third.utilization_gpu, third.nvlink_rx_kbps) == (7.5, None, None)
    assert {s.source for s in stored.values()} == {"nvml"}
