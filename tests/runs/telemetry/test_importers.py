"""Telemetry importers: the pure parsers (no database) and `manage.py import_telemetry`."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.choices import RunSource, TelemetrySource
from runs.models import GpuMinute, GpuSample
from runs.telemetry import charts
from runs.telemetry.importers.checks import WINDOW_SLACK
from runs.telemetry.importers.common import MIB, ParsedSample
from runs.telemetry.importers.dcgm_exporter import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    parse_prometheus_line,
)
from runs.telemetry.importers.parse import detect_format, parse_telemetry
from runs.telemetry.labels import gpu_label, mig_gpu_index
from tests.conftest import TESTS, World, make_run

DATA = TESTS / "data" / "telemetry"
START = datetime(2024, 1, 15, 10, 0, tzinfo=UTC)
# A run whose window holds the fixtures' January 2024 times.
JANUARY_RUN = {
    "submitted_at": START,
    "started_at": START,
    "ended_at": datetime(2024, 1, 16, 0, 0, tzinfo=UTC),
}
NOHEADER_FIELDS = ["index", "utilization.gpu", "memory.used", "power.draw", "temperature.gpu"]


def read(name: str) -> str:
    return (DATA / name).read_text()


def at(samples: list[ParsedSample], gpu: int, ts: datetime) -> ParsedSample:
    return next(s for s in samples if s.gpu_index == gpu and s.ts == ts)


def problem_lines(result) -> list[int]:
    return [p.line for p in result.problems]


# --- Detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("smi_units.csv", "nvidia-smi-csv"),
        ("smi_nounits.csv", "nvidia-smi-csv"),
        ("smi_noheader.csv", "nvidia-smi-csv"),
        ("smi_looped.csv", "nvidia-smi-csv"),
        ("dmon_plain.txt", "dmon"),
        ("dmon_dt.txt", "dmon"),
        ("dmon_t.txt", "dmon"),
        ("dcgm_scrapes.prom", "dcgm"),
        ("dcgm_untimed.prom", "dcgm"),
    ],
)
def test_detects_each_format(name: str, fmt: str) -> None:
    assert detect_format(read(name)) == fmt


def test_unrecognised_or_empty_text_is_one_file_problem() -> None:
    for text in ("", "hello\nthis is not telemetry\n"):
        result = parse_telemetry(text)
        assert result.samples == []
        assert problem_lines(result) == [0]
        assert "cannot tell the format" in result.problems[0].message


# --- nvidia-smi CSV -------------------------------------------------------------------------


def test_csv_with_units_converts_exactly_and_keeps_missing_as_none() -> None:
    result = parse_telemetry(read("smi_units.csv"))
    assert result.format == "nvidia-smi-csv"
    first = at(result.samples, 0, datetime(2024, 1, 15, 10, 23, 45, 123000, tzinfo=UTC))
    assert first.utilization_gpu == 36.0
    assert first.utilization_memory == 12.0
    assert first.memory_used_bytes == 4567 * 1048576
    assert first.memory_total_bytes == 81559 * 1048576
    assert first.power_watts == 106.56
    assert first.power_limit_watts == 700.0
    assert first.temperature_c == 45.0
    assert first.sm_clock_mhz == 1980.0  # header spells it clocks.current.sm
    no_power = at(result.samples, 1, datetime(2024, 1, 15, 10, 23, 45, 125000, tzinfo=UTC))
    assert no_power.power_watts is None  # [N/A]
    assert no_power.utilization_gpu == 0.0  # a real zero stays zero
    unsupported = at(result.samples, 1, datetime(2024, 1, 15, 10, 23, 46, 132000, tzinfo=UTC))
    assert unsupported.utilization_gpu is None  # [Not Supported]
    assert unsupported.utilization_memory is None  # N/A
    assert unsupported.power_limit_watts is None


def test_csv_bad_lines_are_reported_with_numbers() -> None:
    result = parse_telemetry(read("smi_units.csv"))
    assert len(result.samples) == 5
    assert problem_lines(result) == [6, 7]
    assert "above 100%" in result.problems[0].message
    assert "expected 11 fields, got 6" in result.problems[1].message


def test_csv_nounits_uses_header_units_and_bus_id_order() -> None:
    result = parse_telemetry(read("smi_nounits.csv"))
    assert result.gpu_indexes == [0, 1]  # 00000000:18:00.0 first seen -> 0, :3B -> 1
    second = at(result.samples, 1, datetime(2024, 1, 15, 10, 23, 45, 2000, tzinfo=UTC))
    assert second.memory_used_bytes == 20480 * MIB
    assert second.power_watts == 140.0  # power.draw.instant
    assert second.power_limit_watts == 150.0  # enforced.power.limit
    assert at(result.samples, 0, datetime(2024, 1, 15, 10, 23, 46, 1000, tzinfo=UTC)).power_watts is None
    assert problem_lines(result) == [5]
    assert "temperature_c is negative" in result.problems[0].message


def test_csv_noheader_needs_fields_and_start() -> None:
    without_fields = parse_telemetry(read("smi_noheader.csv"), fmt="nvidia-smi-csv", start=START)
    assert without_fields.samples == []
    assert "--fields" in without_fields.problems[0].message
    without_start = parse_telemetry(read("smi_noheader.csv"), fields=NOHEADER_FIELDS)
    assert without_start.samples == []
    assert "--start" in without_start.problems[0].message


def test_csv_noheader_with_fields_synthesizes_one_second_per_round() -> None:
    result = parse_telemetry(read("smi_noheader.csv"), fields=NOHEADER_FIELDS, start=START)
    assert [(s.gpu_index, s.ts.second) for s in result.samples] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    assert result.samples[1].memory_used_bytes == 65000 * MIB
    assert result.samples[3].temperature_c is None
    assert problem_lines(result) == [6]


def test_csv_loop_with_repeated_headers_and_a_repeated_line() -> None:
    result = parse_telemetry(read("smi_looped.csv"))
    assert len(result.samples) == 8
    assert result.first_ts == datetime(2024, 1, 15, 23, 59, 58, 500000, tzinfo=UTC)
    assert result.last_ts == datetime(2024, 1, 16, 0, 0, 1, 505000, tzinfo=UTC)
    assert problem_lines(result) == [9]
    assert "already read on line 7" in result.problems[0].message


def test_csv_local_timestamps_are_read_in_the_given_zone() -> None:
    result = parse_telemetry(read("smi_units.csv"), tz=ZoneInfo("Europe/Paris"))
    assert result.first_ts == datetime(2024, 1, 15, 9, 23, 45, 123000, tzinfo=UTC)


# --- dmon -----------------------------------------------------------------------------------


def test_dmon_without_time_columns_needs_start() -> None:
    result = parse_telemetry(read("dmon_plain.txt"))
    assert result.format == "dmon"
    assert result.samples == []
    assert "--start" in result.problems[0].message


def test_dmon_plain_maps_columns_and_advances_when_the_index_wraps() -> None:
    result = parse_telemetry(read("dmon_plain.txt"), start=START)
    assert [(s.gpu_index, s.ts.second) for s in result.samples] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (0, 3)]
    busy = result.samples[2]
    assert (busy.power_watts, busy.temperature_c, busy.utilization_gpu, busy.utilization_memory) == (412, 55, 97, 45)
    assert busy.sm_clock_mhz == 1980  # pclk
    assert busy.memory_used_bytes is None  # no `-s m` columns
    assert problem_lines(result) == [8, 12]  # short line; sm 101%


def test_dmon_with_date_time_and_framebuffer() -> None:
    result = parse_telemetry(read("dmon_dt.txt"))
    assert len(result.samples) == 4
    big = at(result.samples, 1, datetime(2024, 1, 15, 10, 23, 45, tzinfo=UTC))
    assert big.memory_used_bytes == 70001 * MIB
    assert big.power_watts == 412.0
    gap = at(result.samples, 0, datetime(2024, 1, 15, 10, 23, 46, tzinfo=UTC))
    assert gap.power_watts is None  # "-"
    assert at(result.samples, 1, datetime(2024, 1, 15, 10, 23, 46, tzinfo=UTC)).sm_clock_mhz is None
    assert problem_lines(result) == [7]


def test_dmon_time_only_takes_the_date_from_start_and_rolls_over_midnight() -> None:
    assert "--start" in parse_telemetry(read("dmon_t.txt")).problems[0].message
    result = parse_telemetry(read("dmon_t.txt"), start=START)
    assert [s.ts for s in result.samples] == [
        datetime(2024, 1, 15, 23, 59, 59, tzinfo=UTC),
        datetime(2024, 1, 16, 0, 0, 0, tzinfo=UTC),
    ]


def test_dmon_csv_format() -> None:
    result = parse_telemetry(read("dmon_csv.txt"))
    assert result.format == "dmon"
    assert result.problems == []
    busy = at(result.samples, 1, datetime(2024, 1, 15, 10, 23, 45, tzinfo=UTC))
    assert (busy.power_watts, busy.utilization_gpu, busy.sm_clock_mhz) == (412.0, 97.0, 1980.0)


# --- DCGM -----------------------------------------------------------------------------------


def test_dcgm_groups_scrapes_by_gpu_and_timestamp() -> None:
    result = parse_telemetry(read("dcgm_scrapes.prom"))
    assert result.format == "dcgm"
    first_scrape = datetime.fromtimestamp(1705314225, tz=UTC)
    second_scrape = datetime.fromtimestamp(1705314240, tz=UTC)
    assert sorted((s.gpu_index, s.ts) for s in result.samples) == [
        (0, first_scrape),
        (0, second_scrape),
        (1, first_scrape),
        (mig_gpu_index(0, 13), first_scrape),  # the MIG slice is a GPU of its own
    ]
    gpu0 = at(result.samples, 0, first_scrape)
    assert gpu0.utilization_gpu == 87.0
    assert gpu0.utilization_memory == 12.0
    assert gpu0.memory_used_bytes == 4567 * MIB  # the MIG slice's 1024 MiB is not mixed in
    assert at(result.samples, mig_gpu_index(0, 13), first_scrape).memory_used_bytes == 1024 * MIB
    assert gpu0.memory_total_bytes == (4567 + 76992) * MIB  # used + free
    assert gpu0.power_watts == 106.56
    assert gpu0.temperature_c == 45.0
    assert gpu0.sm_clock_mhz == 1980.0
    later = at(result.samples, 0, second_scrape)
    assert later.memory_total_bytes == 81559 * MIB  # FB_TOTAL when present
    assert later.power_watts is None  # its line was garbage


def test_dcgm_blank_sentinels_are_missing_not_values() -> None:
    gpu1 = at(parse_telemetry(read("dcgm_scrapes.prom")).samples, 1, datetime.fromtimestamp(1705314225, tz=UTC))
    assert gpu1.temperature_c is None  # DCGM_INT32_BLANK
    assert gpu1.power_watts is None  # DCGM_FP64_BLANK
    assert gpu1.utilization_gpu is None  # 250% was reported and dropped
    assert gpu1.sm_clock_mhz == 1755.0
    line = 'DCGM_FI_DEV_SM_CLOCK{gpu="0"} %s 1705314225000\n'
    for blank in (DCGM_INT32_BLANK, DCGM_INT32_BLANK + 2, DCGM_INT64_BLANK, DCGM_FP64_BLANK):
        (sample,) = parse_telemetry(line % blank).samples
        assert sample.sm_clock_mhz is None


def test_dcgm_problems_name_garbage_and_out_of_range_lines() -> None:
    result = parse_telemetry(read("dcgm_scrapes.prom"))
    messages = {p.line: p.message for p in result.problems}
    assert sorted(messages) == [16, 37, 38]
    assert "above 100%" in messages[16]
    assert "bad value" in messages[37]
    assert "not a Prometheus sample line" in messages[38]


def test_dcgm_mig_instances_are_gpus_of_their_own() -> None:
    result = parse_telemetry(read("dcgm_mig_only.prom"))
    assert result.problems == []
    assert result.gpu_indexes == [mig_gpu_index(0, 2), mig_gpu_index(0, 7)]
    assert [gpu_label(i) for i in result.gpu_indexes] == ["GPU 0 MIG 2", "GPU 0 MIG 7"]


def test_dcgm_untimed_uses_start_and_without_it_says_so() -> None:
    timed = parse_telemetry(read("dcgm_untimed.prom"), start=START)
    assert [(s.gpu_index, s.ts, s.utilization_gpu, s.temperature_c) for s in timed.samples] == [
        (0, START, 55.0, 50.0),
        (1, START, 60.0, 52.0),
    ]
    untimed = parse_telemetry(read("dcgm_untimed.prom"))
    assert untimed.samples == []
    assert "--start" in untimed.problems[0].message


def test_dcgm_second_hostname_is_skipped() -> None:
    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="node-1"} 10 1705314225000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="node-2"} 20 1705314225000\n'
    )
    result = parse_telemetry(text)
    assert [s.utilization_gpu for s in result.samples] == [10.0]
    assert problem_lines(result) == [2]


# --- Robustness -----------------------------------------------------------------------------

ALPHABET = st.sampled_from(list('0123456789 ,.-:#[]{}="%/\nabcdeDGFIMNW_gpuxsm\t')) | st.characters()


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=ALPHABET, max_size=400),
    fmt=st.sampled_from(["auto", "nvidia-smi-csv", "dmon", "dcgmi-dmon", "dcgm", "bogus"]),
    with_start=st.booleans(),
)
def test_parse_telemetry_never_raises(text: str, fmt: str, with_start: bool) -> None:
    result = parse_telemetry(text, fmt=fmt, start=START if with_start else None, fields=None)
    for sample in result.samples:
        assert sample.ts.tzinfo is not None
    for problem in result.problems:
        assert problem.line >= 0


@settings(max_examples=200, deadline=None)
@given(
    header=st.sampled_from([read("smi_units.csv").splitlines()[0], read("dmon_dt.txt"), "# gpu pwr sm\n"]),
    body=st.text(alphabet=ALPHABET, max_size=300),
)
def test_parse_telemetry_never_raises_after_a_real_header(header: str, body: str) -> None:
    parse_telemetry(header + "\n" + body, start=START, fields=NOHEADER_FIELDS)


# --- The command ----------------------------------------------------------------------------


def run_import(*args: str) -> str:
    out = StringIO()
    call_command("import_telemetry", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_import_csv_stores_samples_and_rollups(world: World) -> None:
    run = make_run(world.vision, "r1", **JANUARY_RUN)
    output = run_import(str(DATA / "smi_units.csv"), "--run", "r1")
    assert output.startswith(
        "imported 5 samples for GPUs [0, 1] from 2024-01-15T10:23:45.123000+00:00 "
        "to 2024-01-15T10:23:47.150000+00:00; skipped 2 lines:\n"
    )
    assert "  line 6: utilization_gpu above 100% (140)" in output
    assert "5 new, 0 already stored" in output
    samples = GpuSample.objects.filter(run=run)
    assert samples.count() == 5
    assert set(samples.values_list("source", flat=True)) == {TelemetrySource.NVIDIA_SMI}
    assert set(samples.values_list("node__index", "node__attempt__number")) == {(0, 1)}
    stored = samples.get(gpu_index=1, ts=datetime(2024, 1, 15, 10, 23, 45, 125000, tzinfo=UTC))
    assert stored.power_watts is None
    assert stored.memory_total_bytes == 81559 * MIB
    minutes = GpuMinute.objects.filter(run=run)
    assert minutes.count() == 2  # two GPUs, one minute
    assert minutes.get(gpu_index=0).samples == 3


@pytest.mark.django_db
def test_reimport_is_idempotent(world: World) -> None:
    run = make_run(world.vision, "r1", **JANUARY_RUN)
    run_import(str(DATA / "dcgm_scrapes.prom"), "--run", "r1")
    again = run_import(str(DATA / "dcgm_scrapes.prom"), "--run", "r1")
    assert "0 new, 4 already stored" in again
    assert GpuSample.objects.filter(run=run, source=TelemetrySource.DCGM).count() == 4
    # (gpu0, 2 minutes), (gpu1, 1 minute), (gpu0's MIG instance 13, 1 minute)
    assert GpuMinute.objects.filter(run=run).count() == 4


@pytest.mark.django_db
def test_import_to_another_node_attempt_and_source(world: World) -> None:
    run = make_run(world.vision, "c-1", source=RunSource.CLASSIC, **JANUARY_RUN)
    output = run_import(
        str(DATA / "dmon_plain.txt"),
        "--run",
        "c-1",
        "--source-run-type",
        "classic",
        "--node",
        "2",
        "--attempt",
        "2",
        "--start",
        "2024-01-15T11:00:00+01:00",
    )
    assert "imported 6 samples for GPUs [0, 1] from 2024-01-15T10:00:00+00:00" in output
    assert set(GpuSample.objects.filter(run=run).values_list("node__index", "node__attempt__number")) == {(2, 2)}


@pytest.mark.django_db
def test_noheader_csv_through_the_command(world: World) -> None:
    make_run(world.vision, "r1", **JANUARY_RUN)
    output = run_import(
        str(DATA / "smi_noheader.csv"),
        "--run",
        "r1",
        "--fields",
        ",".join(NOHEADER_FIELDS),
        "--start",
        "2024-01-15T10:00",
    )
    assert "imported 5 samples" in output


@pytest.mark.django_db
def test_untimed_dcgm_is_never_stamped_with_the_file_time(world: World, tmp_path: Path) -> None:
    run = make_run(world.vision, "r1", **JANUARY_RUN)
    path = tmp_path / "scrape.prom"
    path.write_text(read("dcgm_untimed.prom"))
    os.utime(path, (1705314225, 1705314225))  # 2024-01-15T10:23:45Z, inside the run
    with pytest.raises(CommandError, match="pass --start for the scrape time"):
        run_import(str(path), "--run", "r1")
    assert not GpuSample.objects.filter(run=run).exists()
    output = run_import(str(path), "--run", "r1", "--start", "2024-01-15T10:30:00Z")
    assert "imported 2 samples for GPUs [0, 1] from 2024-01-15T10:30:00+00:00" in output


@pytest.mark.django_db
def test_unknown_run_exits_1(world: World) -> None:
    make_run(world.vision, "r1")  # serverless: the classic one does not exist
    with pytest.raises(CommandError, match="no classic run with external id 'r1'") as excinfo:
        run_import(str(DATA / "smi_units.csv"), "--run", "r1", "--source-run-type", "classic")
    assert excinfo.value.returncode == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "reason"),
    [("garbage.txt", "cannot tell the format"), ("dcgm_untimed.prom", "--start"), ("dmon_plain.txt", "--start")],
)
def test_nothing_usable_exits_1_with_the_reason(world: World, name: str, reason: str) -> None:
    run = make_run(world.vision, "r1", **JANUARY_RUN)
    with pytest.raises(CommandError, match="nothing to import") as excinfo:
        run_import(str(DATA / name), "--run", "r1")
    assert reason in str(excinfo.value)
    assert excinfo.value.returncode == 1
    assert not GpuSample.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_bad_options_are_clear_errors(world: World) -> None:
    make_run(world.vision, "r1")
    with pytest.raises(CommandError, match="not an ISO time"):
        run_import(str(DATA / "dmon_plain.txt"), "--run", "r1", "--start", "yesterday")
    with pytest.raises(CommandError, match="unknown time zone"):
        run_import(str(DATA / "smi_units.csv"), "--run", "r1", "--tz", "Mars/Olympus")
    with pytest.raises(CommandError, match="--node counts from 0"):
        run_import(str(DATA / "smi_units.csv"), "--run", "r1", "--node", "-1")
    with pytest.raises(CommandError, match="cannot read"):
        run_import(str(DATA / "missing.csv"), "--run", "r1")


# --- Real outputs (tests/data/telemetry/SOURCES.md) ----------------------------------------


def test_csv_without_index_reads_six_gpus_of_one_snapshot_in_order() -> None:
    """Six GTX 1080 Ti of one `--query-gpu` pass (no index, uuid or bus id column; nounits rows)."""
    result = parse_telemetry(read("smi_noindex_six_gpus.csv"), start=START)
    assert result.problems == []
    assert [(s.gpu_index, s.ts) for s in result.samples] == [(gpu, START) for gpu in range(6)]
    assert [s.power_watts for s in result.samples] == [211.44, 212.56, 214.62, 213.88, 218.09, 208.80]
    assert [s.sm_clock_mhz for s in result.samples] == [1771.0, 1784.0, 1771.0, 1746.0, 1771.0, 1733.0]
    assert {(s.utilization_gpu, s.mem_clock_mhz, s.temperature_c) for s in result.samples[:2]} == {(98.0, 5005.0, 50.0)}


def test_csv_without_index_keeps_the_gpus_of_one_snapshot_apart() -> None:
    result = parse_telemetry(read("smi_noindex_two_gpus.csv"), start=START)
    assert result.problems == []
    assert [(s.gpu_index, s.ts) for s in result.samples] == [(0, START), (1, START)]
    gtx650, gtx1060 = result.samples
    assert (gtx650.utilization_gpu, gtx650.memory_used_bytes) == (None, 926 * MIB)  # [N/A]
    assert (gtx1060.utilization_gpu, gtx1060.memory_used_bytes, gtx1060.memory_total_bytes) == (0.0, MIB, 6072 * MIB)


def test_csv_without_index_but_with_times_splits_snapshots_by_their_gap() -> None:
    lines = read("smi_noindex_two_gpus.csv").splitlines()
    text = "timestamp, " + lines[0] + "\n"
    for second in (1, 2):  # two loops of `-l 1`; a pass queries its GPUs a few ms apart
        text += f"2024/01/15 10:00:0{second}.001, {lines[1]}\n2024/01/15 10:00:0{second}.004, {lines[2]}\n"
    result = parse_telemetry(text)
    assert sorted((s.gpu_index, s.ts.second) for s in result.samples) == [(0, 1), (0, 2), (1, 1), (1, 2)]


def test_csv_clock_columns_fill_sm_and_memory_clocks() -> None:
    looped = parse_telemetry(read("smi_clocks_index.csv"), start=START)
    assert [(s.sm_clock_mhz, s.mem_clock_mhz, s.temperature_c) for s in looped.samples] == [
        (1320.0, 5001.0, 56.0),
        (1470.0, 5001.0, 55.0),
        (1470.0, 5001.0, 56.0),
    ]
    (graphics_only,) = parse_telemetry(read("smi_graphics_clock.csv"), start=START).samples
    assert graphics_only.sm_clock_mhz == 300.0  # clocks.current.graphics; clocks.max.* are not readings
    assert graphics_only.memory_total_bytes == 5934 * MIB


def test_old_dmon_temp_and_mclk_columns_are_read() -> None:
    result = parse_telemetry(read("dmon_old_temp.txt"), start=START)
    assert result.problems == []
    assert [(s.gpu_index, s.temperature_c, s.mem_clock_mhz, s.sm_clock_mhz) for s in result.samples] == [
        (0, 43.0, 324.0, 135.0),
        (1, 32.0, 324.0, 324.0),
    ]


def test_dmon_pcie_columns_become_kilobytes_per_second() -> None:
    """`nvidia-smi dmon -s pcut` on an 8-GPU node, as published: rxpci/txpci in MB/s, `-` for mtemp."""
    result = parse_telemetry(read("dmon_pcie_rx_tx.txt"), start=START)
    assert result.problems == []
    assert result.gpu_indexes == list(range(8)) and len(result.samples) == 25
    first = result.samples[0]
    assert (first.gpu_index, first.ts) == (0, START)
    assert (first.pcie_rx_kbps, first.pcie_tx_kbps) == (21846 * 1024.0, 6849 * 1024.0)
    assert (first.sm_clock_mhz, first.mem_clock_mhz, first.temperature_c, first.power_watts) == (
        2415.0,
        12481.0,
        55.0,
        365.0,
    )
    assert first.utilization_gpu == 99.0


def test_dcgm_mem_clock_and_dcp_fields() -> None:
    result = parse_telemetry(read("dcgm_v100_clocks.prom"), start=START)
    assert result.problems == []
    gpu0, gpu1 = result.samples
    assert (gpu1.sm_clock_mhz, gpu1.mem_clock_mhz, gpu1.temperature_c, gpu1.power_watts) == (
        1380.0,
        877.0,
        56.0,
        167.362,
    )
    assert (gpu0.utilization_memory, gpu0.pcie_tx_kbps) == (0.0, 0.0)  # DRAM_ACTIVE stands in for MEM_COPY_UTIL


def test_dcgm_nvlink_bytes_are_read_as_reported_zero_not_missing() -> None:
    # NVIDIA/DCGM#149: a DGX-A100 whose exporter reports 0 B/s NVLink TX on every GPU.
    result = parse_telemetry(read("dcgm_a100_nvlink.prom"), start=START)
    assert result.format == "dcgm" and result.problems == []
    assert [s.gpu_index for s in result.samples] == [0, 1, 2, 3]
    # 0 B/s is a reading (an idle or misconfigured link), kept as 0.0 KB/s; RX was not in the scrape.
    assert {(s.nvlink_tx_kbps, s.nvlink_rx_kbps) for s in result.samples} == {(0.0, None)}
    assert {s.pcie_tx_kbps for s in result.samples} == {None}


def test_dcgm_h100_mig_with_only_prof_fields_imports_each_instance() -> None:
    result = parse_telemetry(read("dcgm_h100_mig_prof.prom"), start=START)
    assert result.problems == []
    assert [gpu_label(s.gpu_index) for s in result.samples] == ["GPU 0 MIG 7", "GPU 0 MIG 8", "GPU 0 MIG 9"]
    assert {s.utilization_gpu for s in result.samples} == {0.0}  # GR_ENGINE_ACTIVE 0.000000 -> 0%
    assert result.suspect == ""  # idle MIG slices: no temperature or power in the file to doubt


def test_dcgm_broken_exporter_is_suspect_and_names_the_mangled_metric() -> None:
    result = parse_telemetry(read("dcgm_all_zero.prom"), start=START)
    assert result.format == "dcgm"
    assert [(p.line, p.message) for p in result.problems] == [(1, "'CGM_FI_DEV_SM_CLOCK' is not a DCGM field")]
    assert "every reading is 0" in result.suspect


def test_dcgmi_dmon_with_the_shell_prompt_above_its_header() -> None:
    result = parse_telemetry(read("dcgmi_dmon_prompt.txt"), start=START)
    assert result.format == "dcgmi-dmon"
    assert [p.line for p in result.problems] == [1]
    assert "before the `#Entity` header" in result.problems[0].message
    assert result.gpu_indexes == list(range(8))
    assert {s.ts for s in result.samples} == {START, START + timedelta(seconds=1)}
    assert {s.sm_active for s in result.samples} == {None}  # N/A
    assert "--start" in parse_telemetry(read("dcgmi_dmon_prompt.txt")).problems[0].message


def test_nvidia_smi_dmon_after_a_prompt_names_the_prompt_line() -> None:
    result = parse_telemetry("$ nvidia-smi dmon -c 1\n" + read("dmon_old_temp.txt"), fmt="dmon", start=START)
    assert [p.line for p in result.problems] == [1]
    assert len(result.samples) == 2


# --- Hostile text -----------------------------------------------------------------------------

HUGE_LABEL = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="' + "x" * 100_000 + "} 5 1705314225000\n"


def test_a_100_kb_label_is_named_and_costs_no_time() -> None:
    began = time.monotonic()
    result = parse_telemetry("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + HUGE_LABEL * 80)
    elapsed = time.monotonic() - began
    assert result.samples == []
    assert problem_lines(result) == list(range(2, 82))
    assert "100,056 characters long" in result.problems[0].message
    # The old parser took ~0.4 s for one 8 KB label and grew with its square (~65 s at 100 KB).
    assert elapsed < 1.0


def test_unterminated_labels_under_the_cap_parse_in_linear_time() -> None:
    line = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="' + "x" * 4000 + "} 5 1705314225000"
    began = time.monotonic()
    result = parse_telemetry("# TYPE x gauge\n" + (line + "\n") * 2000)
    assert time.monotonic() - began < 2.0  # 8 MB of the worst shape; the old pattern: ~0.1 s per line
    assert result.problem_count == 2000
    assert "closing quote" in result.problems[0].message


def test_problems_past_the_cap_are_counted_not_kept() -> None:
    result = parse_telemetry("# TYPE x gauge\n" + "garbage line\n" * 5000)
    assert len(result.problems) == 1000
    assert result.problem_count == 5000


# --- The command: refusals ----------------------------------------------------------------------


@pytest.mark.django_db
def test_samples_outside_the_run_are_refused_with_the_numbers(world: World) -> None:
    run = make_run(world.vision, "r1")  # 2026-11-02 09:00 to 10:00; the file is from January 2024
    with pytest.raises(CommandError, match="5 of 5 samples") as excinfo:
        run_import(str(DATA / "smi_units.csv"), "--run", "r1")
    message = str(excinfo.value)
    assert "2024-01-15T10:23:45.123000+00:00 to 2024-01-15T10:23:47.150000+00:00" in message
    assert "2026-11-02T09:00:00+00:00 to 2026-11-02T10:00:00+00:00" in message
    assert "--tz" in message
    assert not GpuSample.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_tz_places_local_times_inside_the_run(world: World) -> None:
    run = make_run(world.vision, "r1", started_at=datetime(2024, 1, 15, 18, 20, tzinfo=UTC))
    with pytest.raises(CommandError, match="fall outside run r1's window"):
        run_import(str(DATA / "smi_units.csv"), "--run", "r1")
    output = run_import(str(DATA / "smi_units.csv"), "--run", "r1", "--tz", "America/Los_Angeles")
    assert "from 2024-01-15T18:23:45.123000+00:00" in output
    assert GpuSample.objects.filter(run=run).count() == 5


@pytest.mark.django_db
def test_part_outside_the_window_is_counted_and_the_rest_stored(world: World) -> None:
    run = make_run(
        world.vision, "r1", started_at=START, ended_at=datetime(2024, 1, 15, 10, 23, 46, tzinfo=UTC) - WINDOW_SLACK
    )
    output = run_import(str(DATA / "smi_units.csv"), "--run", "r1")
    assert "  3 of 5 samples (2024-01-15T10:23:46.130000+00:00 to" in output
    assert GpuSample.objects.filter(run=run).count() == 2


@pytest.mark.django_db
def test_an_all_zero_exporter_file_is_refused(world: World) -> None:
    run = make_run(world.vision, "r1", **JANUARY_RUN)
    with pytest.raises(CommandError, match="every reading is 0") as excinfo:
        run_import(str(DATA / "dcgm_all_zero.prom"), "--run", "r1", "--start", "2024-01-15T10:00Z")
    assert excinfo.value.returncode == 1
    assert not GpuSample.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_mig_instances_are_stored_as_their_own_gpus(world: World) -> None:
    run = make_run(world.vision, "r1", **JANUARY_RUN)
    run_import(str(DATA / "dcgm_h100_mig_prof.prom"), "--run", "r1", "--start", "2024-01-15T10:00Z")
    assert sorted(GpuSample.objects.filter(run=run).values_list("gpu_index", flat=True)) == [1007, 1008, 1009]
    names = [s.name for s in charts.gpu_series(run, "utilization_gpu")]
    assert names == ["node 0 · GPU 0 MIG 7", "node 0 · GPU 0 MIG 8", "node 0 · GPU 0 MIG 9"]


def test_a_prompt_above_a_csv_header_is_named() -> None:
    text = "$ nvidia-smi --query-gpu=name,utilization.gpu,memory.used,memory.total --format=csv\n"
    result = parse_telemetry(text + read("smi_noindex_two_gpus.csv"), start=START)
    assert [(p.line, p.message) for p in result.problems] == [
        (1, "not a CSV line of nvidia-smi (before the header line)")
    ]
    assert result.gpu_indexes == [0, 1]


def test_label_escapes_are_read_and_stay_linear() -> None:
    sample = parse_prometheus_line('DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="a\\"b\\\\c\\nd"} 5 1705314225000')
    assert sample.labels == {"gpu": "0", "pod": 'a"b\\c\nd'}
    assert (sample.value, sample.timestamp) == ("5", "1705314225000")
    tabbed = parse_prometheus_line("DCGM_FI_DEV_GPU_UTIL\t5\t1705314225000")  # the format allows tabs
    assert (tabbed.name, tabbed.labels, tabbed.value) == ("DCGM_FI_DEV_GPU_UTIL", {}, "5")
    escapes = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="' + "\\a" * 2000 + '"} 5'
    began = time.monotonic()
    for _ in range(500):
        assert parse_prometheus_line(escapes).labels["pod"] == "a" * 2000
    assert time.monotonic() - began < 2.0


def test_dcgmi_dmon_values_become_percent_and_bytes() -> None:
    # The layout of dcgmi dmon (header, `ID` unit line, `GPU n` rows) with values of our own.
    text = (
        "#Entity   GRACT        SMACT        TENSO        DRAMA        FBUSD        FBFRE        POWER\n"
        "ID                                                                         W\n"
        "GPU 0     0.984        0.930        0.000        0.252        18342        63217        241.3\n"
        "GPU-I 3   0.500        0.400        0.000        0.100        100          200          N/A\n"
    )
    result = parse_telemetry(text, start=START)
    (gpu0,) = result.samples
    assert (gpu0.utilization_gpu, gpu0.sm_active, gpu0.utilization_memory) == (98.4, 93.0, 25.2)
    assert (gpu0.memory_used_bytes, gpu0.memory_total_bytes) == (18342 * MIB, (18342 + 63217) * MIB)
    assert gpu0.power_watts == 241.3
    assert [(p.line, p.message) for p in result.problems] == [(4, "entity 'GPU-I 3' is not a GPU: not imported")]
