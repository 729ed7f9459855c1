"""Layouts of real tool output the importers once refused or misread (tests/data/telemetry/SOURCES.md).

Each case is a published capture, or says how it was put together from published parts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runs.telemetry.importers.common import MIB
from runs.telemetry.importers.parse import detect_format, parse_telemetry
from runs.telemetry.labels import mig_gpu_index
from tests.conftest import TESTS

DATA = TESTS / "data" / "telemetry"
START = datetime(2024, 1, 15, 10, 0, tzinfo=UTC)


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_dcgmi_dmon_as_the_dcgm_user_guide_prints_it() -> None:
    """`# Entity` with a space and an `Id` unit line: the guide's dcgmproftester example."""
    text = read("dcgmi_dmon_user_guide.txt")
    assert detect_format(text) == "dcgmi-dmon"
    result = parse_telemetry(text, start=START)
    assert result.problems == []
    assert [s.ts for s in result.samples] == [START + timedelta(seconds=i) for i in range(6)]
    assert [s.utilization_gpu for s in result.samples][-3:] == pytest.approx([55.2, 96.9, 97.3])  # GRACT
    assert [s.tensor_active for s in result.samples][-1] == pytest.approx(93.1)


def test_the_command_line_above_a_dcgmi_header_does_not_make_it_csv() -> None:
    """`dcgmi dmon  -i 0  -e 1011,1012,1009,1010 -c 5` as pasted above its output: commas, no CSV."""
    text = read("dcgmi_dmon_nvlink_command.txt")
    assert detect_format(text) == "dcgmi-dmon"
    result = parse_telemetry(text, start=START)
    assert [p.line for p in result.problems] == [1]
    assert "before the `#Entity` header" in result.problems[0].message
    assert len(result.samples) == 5
    last = result.samples[-1]
    assert (last.nvlink_tx_kbps, last.pcie_tx_kbps) == (0.0, pytest.approx(548740 / 1024))
    assert result.samples[0].pcie_tx_kbps is None  # N/A


def test_the_guides_command_line_above_its_output() -> None:
    text = "$ dcgmi dmon -e 1001,1004,1005\n" + read("dcgmi_dmon_user_guide.txt")
    assert detect_format(text) == "dcgmi-dmon"
    assert len(parse_telemetry(text, start=START).samples) == 6


def test_an_nvidia_smi_dmon_command_with_commas_above_its_header() -> None:
    text = "$ nvidia-smi dmon -i 0,1 -c 1\n" + read("dmon_old_temp.txt")
    assert detect_format(text) == "dmon"
    result = parse_telemetry(text, start=START)
    assert [p.line for p in result.problems] == [1]
    assert len(result.samples) == 2


def test_dcgmi_stopped_by_ctrl_c_says_nothing_of_its_last_words() -> None:
    """dcgmi's DeviceMonitor.cpp prints this line (its spelling) when dmon gets SIGINT."""
    text = read("dcgmi_dmon_user_guide.txt") + "\n\ndmon was stopped do to receiving a signal\n"
    result = parse_telemetry(text, start=START)
    assert result.problems == []
    assert len(result.samples) == 6


def test_a_one_column_query_is_csv() -> None:
    """`--query-gpu=utilization.gpu --format=csv` on a GPU that does not support it: one column."""
    text = read("smi_one_column.csv")
    assert detect_format(text) == "nvidia-smi-csv"
    result = parse_telemetry(text, start=START)
    assert [s.utilization_gpu for s in result.samples] == [None]
    assert detect_format("utilization.gpu [%]\n45 %\n") == "nvidia-smi-csv"


def test_camel_case_query_fields_are_header_cells() -> None:
    """Constructed: field names as `nvidia-smi --help-query-gpu` lists them (encoder.stats.sessionCount)."""
    text = "timestamp, index, utilization.gpu [%], encoder.stats.sessionCount\n2024/01/16 14:44:16.977, 0, 35 %, 0\n"
    result = parse_telemetry(text)
    assert result.problems == []
    assert [(s.gpu_index, s.utilization_gpu) for s in result.samples] == [(0, 35.0)]


LINE = (
    '{name}{{gpu="1",UUID="GPU-fc60126e-514d-3522-2828-c5daa8e99d85",pci_bus_id="00000000:B1:00.0",'
    'device="nvidia1",modelName="NVIDIA RTX 2000 Ada Generation",{host}="{value_host}"}} {value} 1705314225000\n'
)


def test_a_second_host_under_the_lowercase_hostname_label_is_refused() -> None:
    """Constructed: dcgm-exporter renamed `Hostname` to `hostname` (NVIDIA/dcgm-exporter PR #655)."""
    text = LINE.format(name="DCGM_FI_DEV_GPU_TEMP", host="hostname", value_host="node-a", value=44) + LINE.format(
        name="DCGM_FI_DEV_GPU_TEMP", host="hostname", value_host="node-b", value=44
    )
    result = parse_telemetry(text)
    assert [s.temperature_c for s in result.samples] == [44.0]
    assert [p.line for p in result.problems] == [2]
    assert "import each host as its own --node" in result.problems[0].message


def test_framebuffer_total_counts_the_reserved_memory() -> None:
    """Constructed: an A100 80GB's 81,920 MiB split as `nvidia-smi -q` shows FB memory (total,
    reserved, used, free; influxdata/telegraf #5812 posts one). dcgm-exporter's default counters
    carry FB_FREE, FB_USED and FB_RESERVED, not FB_TOTAL (dcgm-exporter #271)."""
    text = "".join(
        f'DCGM_FI_DEV_FB_{field}{{gpu="0",UUID="GPU-x",Hostname="h"}} {value} 1705314225000\n'
        for field, value in (("FREE", 80999), ("USED", 52), ("RESERVED", 869))
    )
    (sample,) = parse_telemetry(text).samples
    assert sample.memory_total_bytes == 81920 * MIB
    assert sample.memory_used_bytes == 52 * MIB


MIG = (
    '{name}{{gpu="0",UUID="GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77",pci_bus_id="00000000:1A:00.0",'
    'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",'
    'Hostname="gsrh100-074",DCGM_FI_DRIVER_VERSION="535.129.03"}} {value} 1705314225000\n'
)


def test_a_mig_instances_zero_gpu_util_is_no_reading() -> None:
    """Constructed on dcgm-exporter #512's MIG labels: DEV_GPU_UTIL reads 0 on MIG instances, which
    NVIDIA calls normal (dcgm-exporter #216: use DCGM_FI_PROF_GR_ENGINE_ACTIVE)."""
    busy = MIG.format(name="DCGM_FI_DEV_GPU_UTIL", value=0) + MIG.format(
        name="DCGM_FI_PROF_GR_ENGINE_ACTIVE", value="0.750000"
    )
    (sample,) = parse_telemetry(busy).samples
    assert sample.gpu_index == mig_gpu_index(0, 7)
    assert sample.utilization_gpu == pytest.approx(75.0)
    (alone,) = parse_telemetry(
        MIG.format(name="DCGM_FI_DEV_GPU_UTIL", value=0) + MIG.format(name="DCGM_FI_DEV_GPU_TEMP", value=40)
    ).samples
    assert alone.utilization_gpu is None  # unknown, not idle


def test_a_whole_gpus_zero_gpu_util_is_still_a_reading() -> None:
    line = MIG.replace('GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",', "").format(name="DCGM_FI_DEV_GPU_UTIL", value=0)
    (sample,) = parse_telemetry(line).samples
    assert sample.utilization_gpu == 0.0


def test_a_comment_below_a_csv_header_does_not_make_it_dmon() -> None:
    """Constructed: a looped CSV with a note a person added between its rows."""
    header = "timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
    rows = "".join(f"2024/01/15 10:00:0{i}.000, 0, {40 + i} %, 1000 MiB\n" for i in range(4))
    for note in ("# gpu 0 mem clock dropped, sm throttled\n", "# Entity moved to node 2\n"):
        text = header + rows + note + rows.replace(":0", ":1")
        assert detect_format(text) == "nvidia-smi-csv"
        result = parse_telemetry(text)
        assert len(result.samples) == 8
        assert [p.line for p in result.problems] == [6]


def test_a_negative_reserved_size_is_ignored_not_a_negative_total() -> None:
    text = "".join(
        f'DCGM_FI_DEV_{field}{{gpu="0",Hostname="h"}} {value} 1705314225000\n'
        for field, value in (("FB_FREE", 1000), ("FB_USED", 24), ("FB_RESERVED", -5), ("GPU_UTIL", 50))
    )
    (sample,) = parse_telemetry(text).samples
    assert (sample.memory_total_bytes, sample.utilization_gpu) == (1024 * MIB, 50.0)
