"""Parsers for GPU telemetry a team already has: nvidia-smi CSV, `nvidia-smi dmon`, `dcgmi dmon`, DCGM exporter text.

Pure functions, no database: `parse_telemetry(text)` returns the samples it could read and, for
every line it could not use, a `LineProblem` naming the line and why. It never raises on bad input.
Line 0 in a problem means the file as a whole.

Units stored are the GpuSample ones: percent, bytes, watts, Celsius, MHz. A value the tool did not
report (`[N/A]`, `[Not Supported]`, `-`, a DCGM blank sentinel) stays None, never zero.

Timestamps: nvidia-smi and dmon print local time without a zone; they are read in `tz` (UTC when
not given). Files without timestamps get one sample per second per GPU from `start`.

Hostile text: a line longer than MAX_LINE_CHARS is named and skipped before any parsing, the
Prometheus text is read by a single left-to-right scan (no regular expression over labels), and
at most MAX_PROBLEMS problems are kept (the rest are counted), so the work per file is linear in
its size.

MIG: a MIG instance (dcgm-exporter's `GPU_I_ID`) is a GPU of its own, stored under
`mig_gpu_index(gpu, instance)`; `gpu_label` names any stored index for charts.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Any, Protocol

from runs.telemetry.labels import gpu_label, mig_gpu_index


class TelemetryFormat(StrEnum):
    AUTO = "auto"
    NVIDIA_SMI_CSV = "nvidia-smi-csv"
    DMON = "dmon"
    DCGM = "dcgm"
    DCGMI_DMON = "dcgmi-dmon"


# Formats written by DCGM (stored with telemetry source "dcgm"; the others are nvidia-smi's).
DCGM_FORMATS = frozenset({TelemetryFormat.DCGM, TelemetryFormat.DCGMI_DMON})
# The longest line read. Real lines are far shorter (a dcgm-exporter line with Kubernetes pod
# labels is ~600 characters); anything longer is named as a problem and never parsed.
MAX_LINE_CHARS = 4096
# Problems kept per file; past this they are only counted (a file of garbage stays cheap).
MAX_PROBLEMS = 1000
# Without an index, uuid or bus id column, GPUs are told apart by their order in a snapshot; a
# node has at most this many (8 GPUs x 7 MIG instances), so a longer "snapshot" is a loop.
MAX_GPUS_PER_SNAPSHOT = 64
# nvidia-smi queries the GPUs of one snapshot within milliseconds of each other; the next loop
# (`-l`, at least 1 s; `-lms`, typically >= 100 ms) starts later than this.
SNAPSHOT_GAP = timedelta(milliseconds=50)


MIB = 1024 * 1024
# nvidia-smi and dmon write "MiB" / "MB" but both mean 2**20 bytes; DCGM's FB fields are MiB too.
UNIT_BYTES = {"b": 1, "kib": 1024, "kb": 1024, "mib": MIB, "mb": MIB, "gib": 1024 * MIB, "gb": 1024 * MIB}

VALUE_FIELDS = (
    "utilization_gpu",
    "utilization_memory",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "power_limit_watts",
    "temperature_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "sm_active",
    "tensor_active",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "nvlink_tx_kbps",
    "nvlink_rx_kbps",
)
BYTE_FIELDS = {"memory_used_bytes", "memory_total_bytes"}
PERCENT_FIELDS = {"utilization_gpu", "utilization_memory", "sm_active", "tensor_active"}
MAX_GPU_INDEX = 32767  # GpuSample.gpu_index is a PositiveSmallIntegerField


@dataclass
class ParsedSample:
    """One GPU at one instant, in GpuSample's units; None = not reported."""

    gpu_index: int
    ts: datetime
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    sm_active: float | None = None
    tensor_active: float | None = None
    pcie_tx_kbps: float | None = None
    pcie_rx_kbps: float | None = None
    nvlink_tx_kbps: float | None = None
    nvlink_rx_kbps: float | None = None
    line: int = field(default=0, compare=False)

    def values(self) -> dict[str, float | int | None]:
        """The value fields, as keyword arguments for GpuSample."""
        return {name: getattr(self, name) for name in VALUE_FIELDS}


@dataclass(frozen=True)
class LineProblem:
    """A line that could not be used (line 0: the whole file) and why."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


@dataclass
class ParseResult:
    """What a file held: its format, the samples read, and the lines skipped."""

    format: str
    samples: list[ParsedSample] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)
    # Problems past MAX_PROBLEMS: counted, not kept.
    unlisted_problems: int = 0
    # Why the file's values cannot be believed ('' when they can): see `suspect_values`.
    suspect: str = ""

    @property
    def problem_count(self) -> int:
        return len(self.problems) + self.unlisted_problems

    @property
    def gpu_indexes(self) -> list[int]:
        return sorted({s.gpu_index for s in self.samples})

    @property
    def first_ts(self) -> datetime | None:
        return min((s.ts for s in self.samples), default=None)

    @property
    def last_ts(self) -> datetime | None:
        return max((s.ts for s in self.samples), default=None)


class _Fatal(Exception):
    """The file cannot be read at all (reported as a line-0 problem)."""


class _Collector:
    """Accumulates samples: range checks, one sample per (gpu, ts), problems with line numbers."""

    def __init__(self, fmt: str) -> None:
        self.result = ParseResult(format=fmt)
        self._seen: dict[tuple[int, datetime], int] = {}

    def problem(self, line: int, message: str) -> None:
        if len(self.result.problems) < MAX_PROBLEMS:
            self.result.problems.append(LineProblem(line, message))
        else:
            self.result.unlisted_problems += 1

    def add(self, line: int, gpu: int, ts: datetime, values: dict[str, float | None]) -> None:
        if not 0 <= gpu <= MAX_GPU_INDEX:
            self.problem(line, f"GPU index {gpu} out of range")
            return
        bad = out_of_range(values)
        if bad:
            self.problem(line, bad)
            return
        key = (gpu, ts)
        if key in self._seen:
            self.problem(line, f"GPU {gpu} at {ts.isoformat()} already read on line {self._seen[key]}")
            return
        self._seen[key] = line
        self.result.samples.append(ParsedSample(gpu_index=gpu, ts=ts, line=line, **_typed(values)))


def out_of_range(values: dict[str, float | None]) -> str:
    """Why these values cannot be real ('' when they can): percentages in 0..100, nothing negative."""
    for name, value in values.items():
        if value is None:
            continue
        if value < 0:
            return f"{name} is negative ({value:g})"
        if name in PERCENT_FIELDS and value > 100:
            return f"{name} above 100% ({value:g})"
    return ""


def _typed(values: dict[str, float | None]) -> dict[str, Any]:  # an int for a byte count, else as read
    return {k: (round(v) if k in BYTE_FIELDS and v is not None else v) for k, v in values.items()}


# --- Values ---------------------------------------------------------------------------------

_MISSING = {"", "-", "n/a", "na", "none", "unknown", "nan", "not supported"}
_NUMBER = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)$")


def parse_value(text: str) -> tuple[float | None, str]:
    """A tool's value cell as (number, unit); (None, '') for the tools' 'not reported' spellings.

    `[N/A]`, `[Not Supported]`, `[Unknown Error]`, `N/A`, `-`: nvidia-smi and dmon put every
    'no value' in brackets or as a dash. Raises ValueError for anything else that is not a number.
    """
    cell = text.strip()
    if cell.lower() in _MISSING or (cell.startswith("[") and cell.endswith("]")):
        return None, ""
    match = _NUMBER.match(cell)
    if not match:
        raise ValueError(f"not a number: {cell[:40]!r}")
    number = float(match.group(1))
    if not math.isfinite(number):
        return None, ""
    return number, match.group(2)


def _scale(name: str, number: float | None, unit: str, default_unit: str = "MiB") -> float | None:
    """Convert memory to bytes (nvidia-smi's default unit is MiB); other fields keep their unit."""
    if number is None or name not in BYTE_FIELDS:
        return number
    factor = UNIT_BYTES.get((unit or default_unit).lower())
    if factor is None:
        raise ValueError(f"unknown memory unit {unit!r}")
    return number * factor


def _local(naive: datetime, tz: tzinfo | None) -> datetime:
    """A tool's local wall-clock time as aware UTC (read in `tz`, UTC when not given)."""
    if naive.tzinfo is None:
        naive = naive.replace(tzinfo=tz or UTC)
    return naive.astimezone(UTC)


class _Ticker:
    """Synthesized timestamps: one sample per second per GPU from `start`; a GPU seen again is the next second."""

    def __init__(self, start: datetime | None, what: str) -> None:
        if start is None:
            raise _Fatal(f"{what} has no timestamps: pass --start (ISO time of the first sample)")
        self.start = start
        self.tick = 0
        self.seen: set[int] = set()

    def next(self, gpu: int) -> datetime:
        if gpu in self.seen:
            self.tick += 1
            self.seen = set()
        self.seen.add(gpu)
        return self.start + timedelta(seconds=self.tick)


def _gpu_index(cell: str) -> int:
    try:
        return int(cell.strip())
    except ValueError:
        raise ValueError(f"bad GPU index {cell.strip()[:40]!r}") from None


def _lines(text: str, out: _Collector | None = None) -> Iterator[tuple[int, str]]:
    """(number, line) of the non-blank lines; a line over MAX_LINE_CHARS is named to `out` and skipped."""
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if len(line) > MAX_LINE_CHARS:
            if out is not None:
                out.problem(number, f"line is {len(line):,} characters long (at most {MAX_LINE_CHARS:,} are read)")
            continue
        if line.strip():
            yield number, line


# --- nvidia-smi --query-gpu CSV -------------------------------------------------------------

# `--query-gpu` names (and the spellings nvidia-smi prints in the header) to (GpuSample field,
# rank): when a file carries several columns for one field, the lowest rank wins.
SMI_FIELDS: dict[str, tuple[str, int]] = {
    "utilization.gpu": ("utilization_gpu", 0),
    "utilization.memory": ("utilization_memory", 0),
    "memory.used": ("memory_used_bytes", 0),
    "memory.total": ("memory_total_bytes", 0),
    "power.draw": ("power_watts", 0),
    "power.draw.average": ("power_watts", 1),
    "power.draw.instant": ("power_watts", 2),
    "enforced.power.limit": ("power_limit_watts", 0),
    "power.limit": ("power_limit_watts", 1),
    "temperature.gpu": ("temperature_c", 0),
    "clocks.sm": ("sm_clock_mhz", 0),
    "clocks.current.sm": ("sm_clock_mhz", 0),
    # The graphics clock stands in for the SM clock when that is not queried: the two are
    # driven together (as dmon's `pclk` below).
    "clocks.gr": ("sm_clock_mhz", 1),
    "clocks.current.graphics": ("sm_clock_mhz", 1),
    "clocks.mem": ("mem_clock_mhz", 0),
    "clocks.current.memory": ("mem_clock_mhz", 0),
}
SMI_DEVICE_IDS = ("uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id")
SMI_IDS = {"index", "timestamp", "name", "gpu_name", *SMI_DEVICE_IDS}
# Field names as `--help-query-gpu` lists them, camelCase included (encoder.stats.sessionCount).
_HEADER_CELL = re.compile(r"([A-Za-z][A-Za-z0-9_.]*)\s*(?:\[([^\]]*)\])?")
_SMI_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def _smi_header(cells: list[str]) -> list[tuple[str, str]] | None:
    """[(field, unit)] when every cell reads like `memory.used [MiB]` and one is a field we know."""
    parsed = []
    for cell in cells:
        match = _HEADER_CELL.fullmatch(cell.strip())
        if not match:
            return None
        parsed.append((match.group(1).lower(), match.group(2) or ""))
    if not any(name in SMI_FIELDS or name in SMI_IDS for name, _ in parsed):
        return None
    return parsed


def _smi_time(cell: str, tz: tzinfo | None) -> datetime:
    cell = cell.strip()
    for pattern in _SMI_TIME_FORMATS:
        try:
            return _local(datetime.strptime(cell, pattern), tz)
        except ValueError:
            continue
    try:
        return _local(datetime.fromisoformat(cell), tz)
    except ValueError:
        raise ValueError(f"bad timestamp {cell[:40]!r}") from None


def _smi_values(columns: list[tuple[str, str]], cells: list[str]) -> dict[str, float | None]:
    values: dict[str, float | None] = dict.fromkeys(VALUE_FIELDS)
    ranks: dict[str, int] = {}
    for (name, unit), cell in zip(columns, cells, strict=True):
        target, rank = SMI_FIELDS.get(name, ("", 0))
        if not target:
            continue
        value, value_unit = parse_value(cell)
        if value is None or ranks.get(target, rank + 1) <= rank:
            continue
        values[target] = _scale(target, value, value_unit or unit)
        ranks[target] = rank
    return values


def parse_nvidia_smi_csv(
    text: str, start: datetime | None = None, fields: list[str] | None = None, tz: tzinfo | None = None
) -> ParseResult:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`, looped (`-l`) or not.

    1. A header line (any line of known field names, e.g. repeated by concatenated loops) sets the
       columns; `fields` (the `--query-gpu` list) stands in for it with `noheader`. Lines before
       the first header (a shell prompt, a banner) are named as problems.
    2. Each data line is one GPU: memory MiB -> bytes; `[N/A]`-style cells stay None.
    3. The GPU is `index`; else the uuid / bus id in order of first appearance; else its position
       in its snapshot. A snapshot is the lines nvidia-smi wrote in one pass: with a timestamp
       column, lines less than SNAPSHOT_GAP after the previous one; without, the lines after
       one header (one run of nvidia-smi without `-l`).
    """
    out = _Collector(TelemetryFormat.NVIDIA_SMI_CSV)
    columns = [(f.strip().lower(), "") for f in fields] if fields else None
    before_header: list[int] = []
    ids: dict[str, int] = {}
    ticker: _Ticker | None = None
    last_ts: datetime | None = None
    position = -1
    for number, line in _lines(text, out):
        cells = next(csv.reader([line], skipinitialspace=True), [])
        header = _smi_header(cells)
        if header is not None:
            columns, position, last_ts = header, -1, None
            for skipped in before_header:
                out.problem(skipped, "not a CSV line of nvidia-smi (before the header line)")
            before_header = []
            continue
        if columns is None:
            before_header.append(number)
            continue
        if len(cells) != len(columns):
            out.problem(number, f"expected {len(columns)} fields, got {len(cells)}")
            continue
        try:
            row = dict(zip((name for name, _ in columns), cells, strict=True))
            values = _smi_values(columns, cells)
            stamp = row.get("timestamp")
            ts = _smi_time(stamp, tz) if stamp is not None else None
            device = next((row[k] for k in SMI_DEVICE_IDS if row.get(k)), "")
            if "index" in row:
                gpu = _gpu_index(row["index"])
            elif device:
                gpu = ids.setdefault(device, len(ids))
            else:
                same_snapshot = ts is None or (last_ts is not None and timedelta(0) <= ts - last_ts < SNAPSHOT_GAP)
                position = position + 1 if same_snapshot else 0
                if position >= MAX_GPUS_PER_SNAPSHOT:
                    raise _Fatal(
                        f"line {number}: more than {MAX_GPUS_PER_SNAPSHOT} GPUs in one snapshot: without an index, "
                        "uuid, pci.bus_id or timestamp column the GPUs of a looped file cannot be told apart "
                        "(add index to --query-gpu)"
                    )
                gpu = position
            last_ts = ts
            if ts is None:
                ticker = ticker or _Ticker(start, "this CSV (no timestamp column)")
                ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    if columns is None and before_header:
        raise _Fatal("no CSV header line: pass the --query-gpu field list with --fields (noheader format)")
    return out.result


# --- nvidia-smi dmon ------------------------------------------------------------------------

# dmon column -> GpuSample field. dmon's `pclk` is the processor (graphics) clock, not the SM
# clock; on current GPUs the two are driven together, so it stands in for sm_clock_mhz. Older
# drivers name the GPU temperature `temp`, newer ones `gtemp` (and `mtemp` for the memory).
DMON_FIELDS = {
    "pwr": "power_watts",
    "gtemp": "temperature_c",
    "temp": "temperature_c",
    "sm": "utilization_gpu",
    "mem": "utilization_memory",
    "pclk": "sm_clock_mhz",
    "mclk": "mem_clock_mhz",
    "fb": "memory_used_bytes",  # `-s m`: framebuffer used, "MB" meaning MiB
    "rxpci": "pcie_rx_kbps",  # `-s t`: MB/s
    "txpci": "pcie_tx_kbps",
}
# dmon's PCIe columns are MB/s; GpuSample keeps NVML's KB/s (both in the tool's binary sense).
# dmon has no NVLink column (`-s t` is rxpci/txpci only): NVLink comes from the agent or DCGM.
DMON_SCALE = {"rxpci": 1024.0, "txpci": 1024.0}


# `nvidia-smi pmon` (`# gpu pid type sm mem enc dec [fb] command`) looks like dmon but is not GPU telemetry.
PMON_REFUSED = (
    "this is `nvidia-smi pmon` output (a row per process: `# gpu pid type ... command`), not dmon: its sm, mem and"
    " fb are one process's share of a GPU, and a GPU shows once per process, so its rows are no GPU readings; not"
    " imported. Record `nvidia-smi dmon -o DT` or `nvidia-smi --query-gpu=... --format=csv -l 1` instead"
)


def parse_dmon(text: str, start: datetime | None = None, tz: tzinfo | None = None) -> ParseResult:
    """`nvidia-smi dmon` (any `-s` selection), with or without `-o T` or `-o DT`, or `--format csv`.

    1. `# gpu pwr ...` lines name the columns (dmon repeats them); `# Idx W ...` unit lines are
       skipped. Lines before the first header (the shell prompt that ran dmon) are named.
    2. With Date and Time columns the sample time is read from them (local time, in `tz`). With
       Time only, the date comes from `start` and rolls over at midnight. Without either, one
       sample per second per GPU from `start`, the next second when a GPU index comes round again.
    """
    out = _Collector(TelemetryFormat.DMON)
    columns: list[str] | None = None
    before_header: list[int] = []
    ticker: _Ticker | None = None
    day: date | None = None
    last_time: datetime | None = None
    for number, line in _lines(text, out):
        if line.lstrip().startswith("#"):
            tokens = line.strip().lstrip("#").replace(",", " ").lower().split()
            if "gpu" in tokens and "pid" in tokens:
                raise _Fatal(PMON_REFUSED)
            if "gpu" in tokens:
                columns = tokens  # a header (dmon repeats it); unit rows and other comments are skipped
                for skipped in before_header:
                    out.problem(skipped, "not nvidia-smi dmon output (before the `# gpu ...` header)")
                before_header = []
            continue
        if columns is None:
            before_header.append(number)
            continue
        tokens = line.replace(",", " ").split()  # `dmon --format csv` separates with ", "
        if len(tokens) != len(columns):
            out.problem(number, f"expected {len(columns)} columns, got {len(tokens)}")
            continue
        row = dict(zip(columns, tokens, strict=True))
        try:
            gpu = _gpu_index(row["gpu"])
            values: dict[str, float | None] = dict.fromkeys(VALUE_FIELDS)
            for name, target in DMON_FIELDS.items():
                if name in row:
                    value, unit = parse_value(row[name])
                    value = _scale(target, value, unit)
                    values[target] = value * DMON_SCALE[name] if value is not None and name in DMON_SCALE else value
            if "date" in row and "time" in row:
                ts = _local(datetime.strptime(f"{row['date']} {row['time']}", "%Y%m%d %H:%M:%S"), tz)
            elif "time" in row:
                if start is None:
                    raise _Fatal("dmon `-o T` gives only the time of day: pass --start for the date")
                clock = datetime.strptime(row["time"], "%H:%M:%S").time()
                day = day or start.astimezone(tz or UTC).date()
                naive = datetime.combine(day, clock)
                if last_time is not None and naive < last_time - timedelta(hours=12):
                    day += timedelta(days=1)  # the clock passed midnight
                    naive = datetime.combine(day, clock)
                last_time = naive
                ts = _local(naive, tz)
            else:
                ticker = ticker or _Ticker(start, "dmon output without `-o DT`")
                ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    if columns is None:
        raise _Fatal("no dmon header line (`# gpu pwr gtemp ...`) before the data")
    return out.result


# --- DCGM `dcgmi dmon` ----------------------------------------------------------------------

# `dcgmi dmon -e <field ids>` column short names (`dcgmi dmon -l`) -> (GpuSample field, factor).
# The names are DCGM's own tags, set beside each field id in DCGM's dcgm_fields.cpp
# (DcgmFieldsPopulateOneFieldWithFormatting: SMCLK, MMCLK, TMPTR, POWER, GPUTL, MCUTL, FBTTL, ...).
# The DCGM_FI_PROF_* activities are ratios 0..1, stored as percent.
DCGMI_FIELDS: dict[str, tuple[str, float]] = {
    "POWER": ("power_watts", 1.0),
    "TMPTR": ("temperature_c", 1.0),
    "SMCLK": ("sm_clock_mhz", 1.0),
    "MMCLK": ("mem_clock_mhz", 1.0),
    "GPUTL": ("utilization_gpu", 1.0),
    "MCUTL": ("utilization_memory", 1.0),
    "FBUSD": ("memory_used_bytes", float(MIB)),
    "FBTTL": ("memory_total_bytes", float(MIB)),
    "FBFRE": ("_fb_free", float(MIB)),
    "SMACT": ("sm_active", 100.0),
    "TENSO": ("tensor_active", 100.0),
    "GRACT": ("_gr_engine_active", 100.0),
    "DRAMA": ("_dram_active", 100.0),
    "PCITX": ("pcie_tx_kbps", 1 / 1024),  # bytes/s -> KB/s
    "PCIRX": ("pcie_rx_kbps", 1 / 1024),
    "NVLTX": ("nvlink_tx_kbps", 1 / 1024),  # DCGM_FI_PROF_NVLINK_TX_BYTES (1011), bytes/s -> KB/s
    "NVLRX": ("nvlink_rx_kbps", 1 / 1024),  # DCGM_FI_PROF_NVLINK_RX_BYTES (1012)
}


def _dcgmi_header(line: str) -> list[str] | None:
    """The column names of a `dcgmi dmon` header line, or None when `line` is not one.

    Current dcgmi writes `#Entity   SMACT ...`; the DCGM user guide's examples show `# Entity  GRACT ...`.
    """
    if not line.startswith("#"):
        return None
    words = line[1:].split()
    if not words or words[0].lower() != "entity":
        return None
    return words[1:]


# What dcgmi prints when dmon is stopped by Ctrl-C (dcgmi/DeviceMonitor.cpp, its spelling).
DCGMI_STOPPED = "dmon was stopped do to receiving a signal"


def parse_dcgmi_dmon(text: str, start: datetime | None = None) -> ParseResult:
    """`dcgmi dmon -e ...`: a `#Entity SMACT ...` header, an `ID` unit line, then `GPU 0  0.5 ...`.

    1. Lines before the header (the shell prompt and command that produced it) are named.
    2. Only `GPU n` rows are GPUs; `GPU-I` / `GPU-CI` rows carry DCGM entity ids that do not name
       their parent GPU, so they are named and skipped (dcgm-exporter text keeps that link).
    3. dcgmi prints no time: one sample per GPU per second from `start`, the next second when a
       GPU comes round again (its default `-d 1000` ms).
    """
    out = _Collector(TelemetryFormat.DCGMI_DMON)
    columns: list[str] | None = None
    before_header: list[int] = []
    ticker: _Ticker | None = None
    for number, line in _lines(text, out):
        stripped = line.strip()
        if (header := _dcgmi_header(stripped)) is not None:
            columns = header
            for skipped in before_header:
                out.problem(skipped, "not dcgmi dmon output (before the `#Entity` header)")
            before_header = []
            continue
        if columns is None:
            before_header.append(number)
            continue
        tokens = stripped.split()
        if tokens[0].upper() == "ID" or stripped.startswith("#") or stripped.startswith(DCGMI_STOPPED):
            continue  # the unit line under the header (`ID`, or `Id` in older output); Ctrl-C's last words
        if tokens[0] != "GPU":
            out.problem(number, f"entity {' '.join(tokens[:2])[:40]!r} is not a GPU: not imported")
            continue
        if len(tokens) != len(columns) + 2:
            out.problem(number, f"expected GPU, its id and {len(columns)} values, got {len(tokens)} fields")
            continue
        try:
            gpu = _gpu_index(tokens[1])
            values: dict[str, float | None] = {}
            for name, cell in zip(columns, tokens[2:], strict=True):
                target, factor = DCGMI_FIELDS.get(name.upper(), ("", 1.0))
                if target:
                    value, _unit = parse_value(cell)
                    values[target] = value * factor if value is not None else None
            values = _fold_dcgm(values)
            ticker = ticker or _Ticker(start, "dcgmi dmon output")
            ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    if columns is None:
        raise _Fatal("no dcgmi dmon header line (`#Entity ...`) before the data")
    return out.result


# --- DCGM exporter (Prometheus text) --------------------------------------------------------

# dcgm-exporter metric -> (field, factor to GpuSample units). Names prefixed `_` are read but
# folded at the end: `_fb_free` (MiB) stands in for a missing FB_TOTAL as used + free, and the
# profiling (DCP) activities stand in for the DEV utilisations they approximate when those are
# absent, as on MIG instances, which report only DCGM_FI_PROF_* fields.
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization_memory", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", float(MIB)),
    "DCGM_FI_DEV_FB_TOTAL": ("memory_total_bytes", float(MIB)),
    "DCGM_FI_DEV_FB_FREE": ("_fb_free", float(MIB)),
    # In dcgm-exporter's default counters (no FB_TOTAL): used + free leaves it out (dcgm-exporter #271).
    "DCGM_FI_DEV_FB_RESERVED": ("_fb_reserved", float(MIB)),
    "DCGM_FI_DEV_POWER_USAGE": ("power_watts", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_watts", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_watts", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 100.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("_gr_engine_active", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("_dram_active", 100.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_kbps", 1 / 1024),  # bytes/s -> KB/s
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_kbps", 1 / 1024),
    # All links together, bytes/s, Volta+ profiling fields 1011 / 1012 (etc/dcp-metrics-included.csv).
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_kbps", 1 / 1024),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_kbps", 1 / 1024),
}
# Not supported on MIG instances: dcgm-exporter writes them as 0 there (NVIDIA/dcgm-exporter #216,
# #50: "use DCGM_FI_PROF_GR_ENGINE_ACTIVE"), so on a GPU_I_ID line they are no reading at all.
DCGM_NOT_ON_MIG = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"})
# Folded fields: (stand-in, the field it fills when that is missing).
DCGM_STAND_INS = (("_gr_engine_active", "utilization_gpu"), ("_dram_active", "utilization_memory"))
# DCGM's "blank" values (dcgm_structs.h): a field with no data reads as these, and the
# NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED codes sit just above each. None of our fields
# can really reach 2**31 (that would be 2 PiB of framebuffer), so at/above the smallest = missing.
DCGM_INT32_BLANK = 2147483632
DCGM_INT64_BLANK = 9223372036854775792
DCGM_FP64_BLANK = 140737488355328.0
DCGM_BLANK_FLOOR = min(DCGM_INT32_BLANK, DCGM_INT64_BLANK, DCGM_FP64_BLANK)

# Both patterns are matched whole against one token (fullmatch) and cannot backtrack badly.
_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


@dataclass(frozen=True)
class PromSample:
    """One line of Prometheus text: metric name, labels, value and optional timestamp (ms), as text."""

    name: str
    labels: dict[str, str]
    value: str
    timestamp: str | None


def parse_prometheus_line(line: str) -> PromSample:
    """One sample line of the Prometheus text format, read in one left-to-right pass.

    Linear in the line's length whatever it holds (an unterminated quote, a 100 KB label): the
    label block is scanned character by character instead of matched by a backtracking pattern.
    Raises ValueError naming what is wrong.
    """
    brace = line.find("{")
    if brace == -1:
        name, _, rest = line.strip().replace("\t", " ").partition(" ")
        labels: dict[str, str] = {}
    else:
        name = line[:brace].strip()
        labels, end = _prometheus_labels(line, brace + 1)
        rest = line[end:]
    if not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"not a metric name: {name[:40]!r}")
    fields = rest.split()
    if len(fields) not in (1, 2):
        raise ValueError(f"expected a value and an optional timestamp after {name}, got {len(fields)} fields")
    return PromSample(name, labels, fields[0], fields[1] if len(fields) == 2 else None)


def _prometheus_labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """The `name="value",...}` block starting at `i`: (labels, index after the closing brace)."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while i < n and line[i] in " \t,":
            i += 1
        if i >= n:
            raise ValueError("label block without a closing '}'")
        if line[i] == "}":
            return labels, i + 1
        eq = line.find("=", i)
        if eq == -1:
            raise ValueError("label without '='")
        key = line[i:eq].strip()
        if not _LABEL_NAME.fullmatch(key):
            raise ValueError(f"not a label name: {key[:40]!r}")
        i = eq + 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise ValueError(f"label {key} has no quoted value")
        i += 1
        chars: list[str] = []
        quote = line.find('"', i)
        while True:  # each pass consumes plain text up to the next backslash or the closing quote
            if quote == -1:
                raise ValueError(f"label {key}: value without a closing quote")
            backslash = line.find("\\", i, quote)
            if backslash == -1:
                chars.append(line[i:quote])
                i = quote + 1
                break
            chars.append(line[i:backslash])
            escaped = line[backslash + 1 : backslash + 2]
            chars.append(_LABEL_ESCAPES.get(escaped, escaped))
            i = backslash + 2
            if i > quote:  # the escape was `\"`: look for the next quote, once per escaped quote
                quote = line.find('"', i)
        labels[key] = "".join(chars)


def parse_dcgm(text: str, start: datetime | None = None) -> ParseResult:
    """dcgm-exporter's `/metrics` text, one scrape or several concatenated.

    1. Each line is one field of one GPU (`gpu` label); lines are grouped by (GPU, timestamp),
       the timestamp being Prometheus' optional trailing milliseconds, else `start`. Untimed
       lines without `start` are refused: a scrape time is never guessed.
    2. A MIG instance (a `GPU_I_ID` label) is a GPU of its own: `mig_gpu_index(gpu, GPU_I_ID)`.
    3. Lines from a second `Hostname` are skipped: one import is one node.
    4. A metric name that is not a DCGM field (`CGM_FI_DEV_SM_CLOCK`, a truncated line) is
       named; DCGM fields the model has no column for (XID, ECC, NVLink...) pass silently.
    5. Blank sentinels and NaN are missing; FB MiB -> bytes; total = FB_TOTAL, else used + free;
       DCP ratios -> percent.
    """
    out = _Collector(TelemetryFormat.DCGM)
    groups: dict[tuple[int, datetime], dict[str, float | None]] = {}
    first_line: dict[tuple[int, datetime], int] = {}
    host: str | None = None
    untimed_reported = False
    for number, line in _lines(text, out):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        try:
            sample = parse_prometheus_line(stripped)
        except ValueError as exc:
            out.problem(number, f"not a Prometheus sample line: {exc}")
            continue
        target, factor = DCGM_FIELDS.get(sample.name, ("", 1.0))
        if not target:
            if not sample.name.startswith("DCGM_"):
                out.problem(number, f"{sample.name[:60]!r} is not a DCGM field")
            continue  # another DCGM field (XID, ECC, NVLink...): no column for it
        labels = sample.labels
        hostname = labels.get("Hostname") or labels.get("hostname")  # lower case since dcgm-exporter #655
        if hostname:
            host = host or hostname
            if hostname != host:
                out.problem(number, f"Hostname {hostname[:60]!r} is not {host!r}: import each host as its own --node")
                continue
        try:
            reading = _dcgm_reading(sample)
            if reading is None:
                continue  # a field that is no reading on a MIG instance
            gpu, value = reading
            ts = _dcgm_time(sample, start)
            if ts is None:
                if not untimed_reported:
                    out.problem(0, "DCGM lines without a timestamp: pass --start for the scrape time")
                    untimed_reported = True
                continue
            scaled = value * factor if value is not None else None
            if not target.startswith("_") and (bad := out_of_range({target: scaled})):
                raise ValueError(bad)
        except (ValueError, OverflowError, OSError) as exc:
            out.problem(number, str(exc))
            continue
        key = (gpu, ts)
        group = groups.setdefault(key, {})
        first_line.setdefault(key, number)
        if group.get(target) is not None:
            if group[target] != scaled:
                out.problem(number, f"{sample.name} of {gpu_label(gpu)} at {ts.isoformat()} already read")
            continue
        group[target] = scaled
    _add_dcgm_groups(out, groups, first_line)
    return out.result


def _dcgm_reading(sample: PromSample) -> tuple[int, float | None] | None:
    """The GPU (a MIG instance is a GPU of its own) and value of one DCGM line, the value None when
    blank or not finite; None for a field that is no reading on a MIG instance. Raises ValueError."""
    labels = sample.labels
    if "gpu" not in labels:
        raise ValueError("no gpu label")
    gpu = _gpu_index(labels["gpu"])
    if labels.get("GPU_I_ID"):
        gpu = mig_gpu_index(gpu, _gpu_index(labels["GPU_I_ID"]))
        if sample.name in DCGM_NOT_ON_MIG:
            return None
    try:
        value: float | None = float(sample.value)
    except ValueError:
        raise ValueError(f"bad value {sample.value[:40]!r}") from None
    if value is not None and (not math.isfinite(value) or value >= DCGM_BLANK_FLOOR):
        value = None
    return gpu, value


def _dcgm_time(sample: PromSample, start: datetime | None) -> datetime | None:
    """A line's time: its trailing milliseconds, else `start`, else None (never guessed).
    Raises OverflowError or OSError for a timestamp out of range."""
    if sample.timestamp is not None:
        return datetime.fromtimestamp(float(sample.timestamp) / 1000, tz=UTC)
    return start


def _add_dcgm_groups(
    out: _Collector,
    groups: dict[tuple[int, datetime], dict[str, float | None]],
    first_line: dict[tuple[int, datetime], int],
) -> None:
    """Each (GPU, time)'s fields, folded, as one sample, in order; a group with only FB_FREE is refused."""
    free_only_noted = False
    for (gpu, ts), group in sorted(groups.items()):
        values = _fold_dcgm(group)
        free_only = group.get("_fb_free") is not None and values["memory_used_bytes"] is None
        if free_only and all(value is None for value in values.values()):
            out.problem(first_line[(gpu, ts)], f"{gpu_label(gpu)} at {ts.isoformat()}: {FB_FREE_ONLY}; not imported")
            continue
        if free_only and not free_only_noted:
            out.problem(0, f"memory used is not known: {FB_FREE_ONLY}")
            free_only_noted = True
        out.add(first_line[(gpu, ts)], gpu, ts, values)


def dcgm_sample_values(read: dict[str, float | None]) -> dict[str, float | int | None]:
    """DCGM fields read under their DCGM_FIELDS targets as GpuSample values: folded, then typed.

    What the exporter-page importer does per (GPU, time), for the Prometheus source's series.
    """
    return _typed(_fold_dcgm(read))


# Why a page with DCGM_FI_DEV_FB_FREE but neither FB_USED nor FB_TOTAL says nothing of memory used.
FB_FREE_ONLY = (
    "DCGM_FI_DEV_FB_FREE without DCGM_FI_DEV_FB_USED or DCGM_FI_DEV_FB_TOTAL gives neither the memory used nor"
    " the GPU's total; add DCGM_FI_DEV_FB_USED (in dcgm-exporter's default counters) to the exporter's counters file"
)


def _fold_dcgm(read: dict[str, float | None]) -> dict[str, float | None]:
    """DCGM fields as VALUE_FIELDS: total = FB_TOTAL, else used + free (+ reserved); used = FB_USED, else
    total - free (- reserved); DCP activities stand in."""
    values = {name: read.get(name) for name in VALUE_FIELDS}
    free, used = read.get("_fb_free"), values["memory_used_bytes"]
    reserved = max(read.get("_fb_reserved") or 0.0, 0.0)
    if values["memory_total_bytes"] is None and used is not None and free is not None:
        values["memory_total_bytes"] = used + free + reserved
    total = values["memory_total_bytes"]
    if used is None and total is not None and free is not None:
        # A counters file with FB_FREE and FB_TOTAL but no FB_USED: total = used + free + reserved.
        values["memory_used_bytes"] = max(total - free - reserved, 0.0)
    for stand_in, target in DCGM_STAND_INS:
        if values[target] is None:
            values[target] = read.get(stand_in)
    return values


# --- Checks on what was read ----------------------------------------------------------------

# Fields a powered GPU never reports as 0: a file where all of them read 0 comes from a broken
# tool or exporter (every DCGM value 0 is the classic dcgm-exporter failure), not an idle GPU.
NEVER_ZERO_FIELDS = (
    "temperature_c",
    "power_watts",
    "power_limit_watts",
    "memory_total_bytes",
    "sm_clock_mhz",
    "mem_clock_mhz",
)
# How far outside a run's window samples may fall: a node's telemetry loop starts a little
# before the training process and stops a little after.
WINDOW_SLACK = timedelta(minutes=10)


def suspect_values(samples: list[ParsedSample]) -> str:
    """Why these samples cannot be real readings ('' when they can): every never-zero field is 0."""
    seen = [getattr(s, name) for s in samples for name in NEVER_ZERO_FIELDS if getattr(s, name) is not None]
    if not seen or any(seen):
        return ""
    return (
        f"every reading is 0, including temperature, power, clocks and memory size ({len(samples)} samples): "
        "a GPU that is on never reads 0 there, so the tool or exporter that wrote this file is broken"
    )


class HasRunTimes(Protocol):
    # Read-only members: a model's DateTimeField reads as `datetime | None` but accepts more.
    @property
    def submitted_at(self) -> datetime | None: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def ended_at(self) -> datetime | None: ...


def run_window(run: HasRunTimes, now: datetime | None = None) -> tuple[datetime | None, datetime | None]:
    """The span a run's telemetry can come from: started (else submitted) to ended (else now)."""
    first = run.started_at or run.submitted_at
    return first, (run.ended_at or now or datetime.now(UTC)) if first is not None else None


def keep_window(result: ParseResult, first: datetime | None, last: datetime | None, what: str) -> None:
    """Drop the samples outside [first - slack, last + slack] and name how many, with the window.

    A file's clock read in the wrong zone, or a file of another run, lands hours or years away
    from the run; those samples are never stored into it. `--start` / `--tz` place them.
    """
    if first is None or not result.samples:
        return
    low, high = first - WINDOW_SLACK, (last or first) + WINDOW_SLACK
    inside = [s for s in result.samples if low <= s.ts <= high]
    outside = len(result.samples) - len(inside)
    if not outside:
        return
    times = [s.ts for s in result.samples if not low <= s.ts <= high]
    result.problems.insert(
        0,
        LineProblem(
            0,
            f"{outside} of {len(result.samples)} samples ({min(times).isoformat()} to {max(times).isoformat()}) "
            f"fall outside {what} ({first.isoformat()} to {(last.isoformat() if last else 'now')}, "
            f"give or take {int(WINDOW_SLACK.total_seconds() // 60)} minutes): not imported; if the file's clock "
            "is not UTC pass --tz, and for a file without times pass --start",
        ),
    )
    result.samples = inside


# --- Entry point ----------------------------------------------------------------------------

_DMON_COLUMNS = {"pwr", "gtemp", "temp", "sm", "mem", "pclk", "mclk", "fb", "enc", "dec", "rxpci", "txpci"}
_DMON_DATA = re.compile(r"[\d\s.:-]+")


def _dmon_header(line: str) -> bool:
    """`# gpu pwr gtemp ...` (or its CSV form): nvidia-smi dmon's header."""
    if not line.startswith("#"):
        return False
    tokens = set(line.lstrip("#").replace(",", " ").lower().split())
    return "gpu" in tokens and bool(tokens & _DMON_COLUMNS)


def detect_format(text: str) -> str | None:
    """The format of a telemetry file from its first lines, or None when it is none we read.

    DCGM text wins wherever it shows in the first lines: a damaged first line (a metric name
    missing its first letter, with commas between its labels) must not make it "CSV".
    """
    head = [line.strip() for _number, line in itertools.islice(_lines(text), 200)]
    if any(line.startswith(("# HELP ", "# TYPE ", "DCGM_FI_")) for line in head):
        return TelemetryFormat.DCGM
    # The first header decides, over the lines above it: the command that produced the file
    # (`dcgmi dmon -e 1001,1004`, `nvidia-smi dmon -i 0,1`) has commas but is no CSV, and a
    # `# ...` comment below a CSV header does not make the file dmon.
    for stripped in head:
        if _dcgmi_header(stripped) is not None:
            return TelemetryFormat.DCGMI_DMON
        if _dmon_header(stripped):
            return TelemetryFormat.DMON
        if not stripped.startswith("#") and _smi_header(stripped.split(",")) is not None:
            return TelemetryFormat.NVIDIA_SMI_CSV
    for stripped in head:
        if stripped.startswith("#"):
            continue
        if "," in stripped:  # a one-column query's header was found above, by _smi_header
            return TelemetryFormat.NVIDIA_SMI_CSV
        if _DMON_DATA.fullmatch(stripped):
            return TelemetryFormat.DMON
    return None


def parse_telemetry(
    text: str,
    *,
    fmt: str = "auto",
    start: datetime | None = None,
    fields: list[str] | None = None,
    tz: tzinfo | None = None,
) -> ParseResult:
    """Parse a telemetry file of format `fmt` (`auto` detects it); never raises on bad content.

    `start` (aware) times files without timestamps; `fields` is the `--query-gpu` list of a
    noheader CSV; `tz` is the zone nvidia-smi's local timestamps were written in (UTC if None).
    The result's `suspect` says why its values cannot be believed, when they cannot.
    """
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=tz or UTC)
    if start is not None:
        start = start.astimezone(UTC)
    if fmt == TelemetryFormat.AUTO:
        detected = detect_format(text)
        if detected is None:
            if fields and text.strip():
                detected = TelemetryFormat.NVIDIA_SMI_CSV
            else:
                message = "empty file" if not text.strip() else "not nvidia-smi CSV, dmon, dcgmi dmon or DCGM text"
                return ParseResult(format=fmt, problems=[LineProblem(0, f"cannot tell the format: {message}")])
        fmt = detected
    parsers: dict[str, Callable[[], ParseResult]] = {
        TelemetryFormat.NVIDIA_SMI_CSV: lambda: parse_nvidia_smi_csv(text, start, fields, tz),
        TelemetryFormat.DMON: lambda: parse_dmon(text, start, tz),
        TelemetryFormat.DCGMI_DMON: lambda: parse_dcgmi_dmon(text, start),
        TelemetryFormat.DCGM: lambda: parse_dcgm(text, start),
    }
    if fmt not in parsers:
        return ParseResult(format=fmt, problems=[LineProblem(0, f"unknown format {fmt!r}")])
    try:
        result = parsers[fmt]()
    except _Fatal as exc:
        return ParseResult(format=fmt, problems=[LineProblem(0, str(exc))])
    result.suspect = suspect_values(result.samples)
    return result
