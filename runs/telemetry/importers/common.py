"""The shared pieces of the telemetry importers: the formats, the result types (`ParsedSample`,
`LineProblem`, `ParseResult`), the collector that range-checks samples, and the value readers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Any


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


class FatalFileError(Exception):
    """The file cannot be read at all (reported as a line-0 problem)."""


class Collector:
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
        self.result.samples.append(ParsedSample(gpu_index=gpu, ts=ts, line=line, **typed_values(values)))


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


def typed_values(values: dict[str, float | None]) -> dict[str, Any]:  # an int for a byte count, else as read
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


def scale_value(name: str, number: float | None, unit: str, default_unit: str = "MiB") -> float | None:
    """Convert memory to bytes (nvidia-smi's default unit is MiB); other fields keep their unit."""
    if number is None or name not in BYTE_FIELDS:
        return number
    factor = UNIT_BYTES.get((unit or default_unit).lower())
    if factor is None:
        raise ValueError(f"unknown memory unit {unit!r}")
    return number * factor


def local_to_utc(naive: datetime, tz: tzinfo | None) -> datetime:
    """A tool's local wall-clock time as aware UTC (read in `tz`, UTC when not given)."""
    if naive.tzinfo is None:
        naive = naive.replace(tzinfo=tz or UTC)
    return naive.astimezone(UTC)


class Ticker:
    """Synthesized timestamps: one sample per second per GPU from `start`; a GPU seen again is the next second."""

    def __init__(self, start: datetime | None, what: str) -> None:
        if start is None:
            raise FatalFileError(f"{what} has no timestamps: pass --start (ISO time of the first sample)")
        self.start = start
        self.tick = 0
        self.seen: set[int] = set()

    def next(self, gpu: int) -> datetime:
        if gpu in self.seen:
            self.tick += 1
            self.seen = set()
        self.seen.add(gpu)
        return self.start + timedelta(seconds=self.tick)


def read_gpu_index(cell: str) -> int:
    try:
        return int(cell.strip())
    except ValueError:
        raise ValueError(f"bad GPU index {cell.strip()[:40]!r}") from None


def read_lines(text: str, out: Collector | None = None) -> Iterator[tuple[int, str]]:
    """(number, line) of the non-blank lines; a line over MAX_LINE_CHARS is named to `out` and skipped."""
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if len(line) > MAX_LINE_CHARS:
            if out is not None:
                out.problem(number, f"line is {len(line):,} characters long (at most {MAX_LINE_CHARS:,} are read)")
            continue
        if line.strip():
            yield number, line
