"""`nvidia-smi pmon` is refused with why, and DCGM pages without a used-memory field are read right.

`pmon_um.txt`: `nvidia-smi pmon -s um` as datarhei/core quotes it; `dcgm_fb_free_only.prom`:
dcgm-exporter lines of MIG instances reporting only `DCGM_FI_DEV_FB_FREE` (NVIDIA/dcgm-exporter
issue #317). See tests/data/telemetry/SOURCES.md.
"""

from __future__ import annotations

from datetime import UTC, datetime

from runs.telemetry.importers.common import MIB, TelemetryFormat
from runs.telemetry.importers.dmon import PMON_REFUSED
from runs.telemetry.importers.parse import parse_telemetry
from runs.telemetry.labels import mig_gpu_index
from tests.conftest import TESTS

DATA = TESTS / "data" / "telemetry"
START = datetime(2026, 11, 2, 9, tzinfo=UTC)


def test_pmon_output_is_refused_with_the_reason_not_read_as_dmon() -> None:
    text = (DATA / "pmon_um.txt").read_text()

    for fmt in ("auto", TelemetryFormat.DMON):
        result = parse_telemetry(text, fmt=fmt, start=START)
        # Five process rows of one GPU would have been five GPU samples, each process's fb as GPU memory.
        assert result.samples == []
        assert [(p.line, p.message) for p in result.problems] == [(0, PMON_REFUSED)]
    assert "`nvidia-smi pmon` output (a row per process" in PMON_REFUSED and "nvidia-smi dmon -o DT" in PMON_REFUSED


def test_a_page_with_free_memory_alone_imports_nothing_and_says_why() -> None:
    result = parse_telemetry((DATA / "dcgm_fb_free_only.prom").read_text(), start=START)

    assert result.samples == []
    assert len(result.problems) == 4
    first = result.problems[0]
    assert first.line == 2 and first.message.startswith("GPU 0 MIG 3 at 2026-11-02T09:00:00+00:00: ")
    assert "DCGM_FI_DEV_FB_FREE without DCGM_FI_DEV_FB_USED or DCGM_FI_DEV_FB_TOTAL" in first.message
    assert first.message.endswith("; not imported")


def test_used_memory_is_total_less_free_when_the_page_has_no_used_field() -> None:
    # The same instances with their total (MIG 1g.6gb: 5,952 MiB... as the exporter would print it).
    lines = (DATA / "dcgm_fb_free_only.prom").read_text().splitlines()
    total = [
        line.replace("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL").replace("} 6012", "} 6016") for line in lines[1:]
    ]
    util = [
        line.replace("DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE").replace("} 6012", "} 0.5")
        for line in lines[1:]
    ]

    result = parse_telemetry("\n".join([*lines, *total]), start=START)
    assert result.problems == []
    assert {(s.gpu_index, s.memory_used_bytes, s.memory_total_bytes) for s in result.samples} == {
        (mig_gpu_index(0, instance), 4 * MIB, 6016 * MIB) for instance in (3, 4, 5, 6)
    }

    # Free memory beside other readings: those are kept, memory used stays unknown, and the file says so once.
    kept = parse_telemetry("\n".join([*lines, *util]), start=START)
    assert len(kept.samples) == 4 and all(s.memory_used_bytes is None for s in kept.samples)
    assert all(s.utilization_gpu == 50 for s in kept.samples)
    assert [p.line for p in kept.problems] == [0]
    assert kept.problems[0].message.startswith("memory used is not known: DCGM_FI_DEV_FB_FREE without")
