"""runs/telemetry/store.py writes what a sample holds exactly, whatever COPY's text format makes of it.

On PostgreSQL the batch's COPY text is built by hand from whole columns (`_copy_cells`): tabs,
newlines, backslashes and `\\N` inside a process list, floats of many digits and magnitudes
(below 1e154: PostgreSQL's AVG squares them and refuses an overflow), integers near 2**63 and a
column mixing ints and floats must come back as they went in. A value of a type the
hand-built text does not write (a Decimal) goes through psycopg's own adaptation.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from runs.models import GpuMinute, GpuSample, Node
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db

AWKWARD_PROCESSES = [
    {"pid": 1, "used_memory_bytes": 2**40, "run": "tab\there", "name": 'line\nbreak\r\\N back\\slash "q" ü €'},
    {"pid": 2, "used_memory_bytes": 0, "run": "\\", "name": ""},
]


def test_awkward_text_and_numbers_come_back_exactly(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    rows = [
        GpuSample(run=run, node=node, gpu_index=0, ts=T0, utilization_gpu=1e-300, memory_used_bytes=2**63 - 1,
                  power_watts=1.2345678901234567e150, temperature_c=0.1 + 0.2, processes=AWKWARD_PROCESSES),
        # An int where the rest of the column holds floats, and an empty process list.
        GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=1), utilization_gpu=7,
                  memory_used_bytes=0, power_watts=-0.0, temperature_c=123456789.12345679, processes=[]),
        GpuSample(run=run, node=node, gpu_index=1, ts=T0 + timedelta(microseconds=1), utilization_gpu=None,
                  memory_used_bytes=None, power_watts=5e-324, temperature_c=None, processes=None),
    ]  # fmt: skip
    assert store_gpu_samples(rows).inserted == 3
    for sent in rows:
        stored = GpuSample.objects.get(run=run, gpu_index=sent.gpu_index, ts=sent.ts)
        for field in ("utilization_gpu", "memory_used_bytes", "power_watts", "temperature_c", "processes"):
            assert getattr(stored, field) == getattr(sent, field), field
        assert stored.source == sent.source
    assert GpuMinute.objects.get(run=run, gpu_index=0).utilization_gpu_max == 7.0


def test_a_value_of_another_type_is_stored_as_psycopg_adapts_it(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    rows = [
        GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=s), utilization_gpu=Decimal("12.5"),
                  processes=[{"pid": s, "used_memory_bytes": 1}])
        for s in range(3)
    ]  # fmt: skip
    assert store_gpu_samples(rows).inserted == 3
    stored = GpuSample.objects.filter(run=run).order_by("ts")
    assert [(s.utilization_gpu, s.processes[0]["pid"]) for s in stored] == [(12.5, 0), (12.5, 1), (12.5, 2)]
    assert store_gpu_samples(rows).inserted == 0


def test_columns_repeating_a_few_values_come_back_exactly(world: World) -> None:
    """Columns of a few repeated values are spelt once a value: -0.0 and 0.0 stay apart, ints stay ints."""
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    signed = [0.0, -0.0]
    rows = [
        GpuSample(run=run, node=node, gpu_index=s % 8, ts=T0 + timedelta(seconds=s), utilization_gpu=signed[s % 2],
                  memory_used_bytes=2**53 + 1 if s % 3 else None, memory_total_bytes=80 * 2**30,
                  power_watts=[650.125, 0.1 + 0.2, None][s % 3], temperature_c=float(s % 2),
                  processes=[{"pid": 1}] if s % 4 else None)
        for s in range(400)
    ]  # fmt: skip
    assert store_gpu_samples(rows).inserted == 400
    stored = {s.ts: s for s in GpuSample.objects.filter(run=run)}
    for sent in rows:
        got = stored[sent.ts]
        assert got.utilization_gpu == sent.utilization_gpu
        if connection.vendor == "postgresql":  # SQLite keeps an integral REAL as an integer: no -0.0
            assert str(got.utilization_gpu) == str(sent.utilization_gpu)  # the sign of a zero kept
        for field in ("memory_used_bytes", "memory_total_bytes", "power_watts", "temperature_c", "processes"):
            assert getattr(got, field) == getattr(sent, field), field
        assert type(got.memory_used_bytes) is type(sent.memory_used_bytes)
