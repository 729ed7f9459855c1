"""Parsers for GPU telemetry a team already has: nvidia-smi CSV, `nvidia-smi dmon`, DCGM exporter text.

Pure functions, no database: `parse_telemetry(text)` returns the samples it could read and, for
every line it could not use, a `LineProblem` naming the line and why. It never raises on bad input.
Line 0 in a problem means the file as a whole.

Units stored are the GpuSample ones: percent, bytes, watts, Celsius, MHz. A value the tool did not
report (`[N/A]`, `[Not Supported]`, `-`, a DCGM blank sentinel) stays None, never zero.

Timestamps: nvidia-smi and dmon print local time without a zone; they are read in `tz` (UTC when
not given). Files without timestamps get one sample per second per GPU from `start`.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from enum import StrEnum


class TelemetryFormat(StrEnum):
    AUTO = "auto"
    NVIDIA_SMI_CSV = "nvidia-smi-csv"
    DMON = "dmon"
    DCGM = "dcgm"


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
)
BYTE_FIELDS = {"memory_used_bytes", "memory_total_bytes"}
PERCENT_FIELDS = {"utilization_gpu", "utilization_memory"}
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
        self.result.problems.append(LineProblem(line, message))

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


def _typed(values: dict[str, float | None]) -> dict[str, float | int | None]:
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


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if line.strip():
            yield number, line


# --- nvidia-smi --query-gpu CSV -------------------------------------------------------------

# `--query-gpu` names (and the spellings nvidia-smi prints in the header) to GpuSample fields.
SMI_FIELDS = {
    "utilization.gpu": "utilization_gpu",
    "utilization.memory": "utilization_memory",
    "memory.used": "memory_used_bytes",
    "memory.total": "memory_total_bytes",
    "power.draw": "power_watts",
    "power.draw.average": "power_watts",
    "power.draw.instant": "power_watts",
    "power.limit": "power_limit_watts",
    "enforced.power.limit": "power_limit_watts",
    "temperature.gpu": "temperature_c",
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
}
SMI_IDS = {"index", "timestamp", "uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id", "name", "gpu_name"}
_HEADER_CELL = re.compile(r"^([a-z][a-z0-9_.]*)\s*(?:\[([^\]]*)\])?$")
_SMI_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def _smi_header(cells: list[str]) -> list[tuple[str, str]] | None:
    """[(field, unit)] when every cell reads like `memory.used [MiB]` and one is a field we know."""
    parsed = []
    for cell in cells:
        match = _HEADER_CELL.match(cell.strip())
        if not match:
            return None
        parsed.append((match.group(1), match.group(2) or ""))
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


def parse_nvidia_smi_csv(
    text: str, start: datetime | None = None, fields: list[str] | None = None, tz: tzinfo | None = None
) -> ParseResult:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`, looped (`-l`) or not.

    1. A header line (any line of known field names, e.g. repeated by concatenated loops) sets the
       columns; `fields` (the `--query-gpu` list) stands in for it with `noheader`.
    2. Each data line is one GPU: memory MiB -> bytes; `[N/A]`-style cells stay None.
    3. The GPU is `index`; else the uuid / bus id in order of first appearance; else the position
       among consecutive lines with the same timestamp.
    """
    out = _Collector(TelemetryFormat.NVIDIA_SMI_CSV)
    columns = [(f.strip().lower(), "") for f in fields] if fields else None
    ids: dict[str, int] = {}
    ticker: _Ticker | None = None
    last_stamp, position = None, -1
    for number, line in _lines(text):
        cells = next(csv.reader([line], skipinitialspace=True), [])
        header = _smi_header(cells)
        if header is not None:
            columns = header
            continue
        if columns is None:
            raise _Fatal("no CSV header line: pass the --query-gpu field list with --fields (noheader format)")
        if len(cells) != len(columns):
            out.problem(number, f"expected {len(columns)} fields, got {len(cells)}")
            continue
        try:
            row = dict(zip((name for name, _ in columns), cells, strict=True))
            values: dict[str, float | None] = dict.fromkeys(VALUE_FIELDS)
            for (name, unit), cell in zip(columns, cells, strict=True):
                target = SMI_FIELDS.get(name)
                if target is None or values[target] is not None:
                    continue  # first of power.draw / power.draw.instant etc. wins
                value, value_unit = parse_value(cell)
                values[target] = _scale(target, value, value_unit or unit)
            stamp = row.get("timestamp")
            device = next((row[k] for k in ("uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id") if row.get(k)), "")
            if "index" in row:
                gpu = _gpu_index(row["index"])
            elif device:
                gpu = ids.setdefault(device, len(ids))
            elif stamp is not None:
                position = position + 1 if stamp == last_stamp else 0
                gpu = position
            else:
                gpu = 0  # no GPU and no time column: nothing tells lines apart, so one GPU
            last_stamp = stamp
            if stamp is not None:
                ts = _smi_time(stamp, tz)
            else:
                ticker = ticker or _Ticker(start, "this CSV (no timestamp column)")
                ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    return out.result


# --- nvidia-smi dmon ------------------------------------------------------------------------

# dmon column -> (GpuSample field, default unit). dmon's `pclk` is the processor (graphics) clock,
# not the SM clock; on current GPUs the two are driven together, so it stands in for sm_clock_mhz.
DMON_FIELDS = {
    "pwr": "power_watts",
    "gtemp": "temperature_c",
    "sm": "utilization_gpu",
    "mem": "utilization_memory",
    "pclk": "sm_clock_mhz",
    "fb": "memory_used_bytes",  # `-s m`: framebuffer used, "MB" meaning MiB
}


def parse_dmon(text: str, start: datetime | None = None, tz: tzinfo | None = None) -> ParseResult:
    """`nvidia-smi dmon` (any `-s` selection), with or without `-o T` or `-o DT`, or `--format csv`.

    1. `# gpu pwr ...` lines name the columns (dmon repeats them); `# Idx W ...` unit lines are skipped.
    2. With Date and Time columns the sample time is read from them (local time, in `tz`). With
       Time only, the date comes from `start` and rolls over at midnight. Without either, one
       sample per second per GPU from `start`, the next second when a GPU index comes round again.
    """
    out = _Collector(TelemetryFormat.DMON)
    columns: list[str] | None = None
    ticker: _Ticker | None = None
    day: date | None = None
    last_time: datetime | None = None
    for number, line in _lines(text):
        if line.lstrip().startswith("#"):
            tokens = line.strip().lstrip("#").replace(",", " ").lower().split()
            if "gpu" in tokens:
                columns = tokens  # a header (dmon repeats it); unit rows and other comments are skipped
            continue
        if columns is None:
            raise _Fatal("no dmon header line (`# gpu pwr gtemp ...`) before the data")
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
                    values[target] = _scale(target, value, unit)
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
    return out.result


# --- DCGM exporter (Prometheus text) --------------------------------------------------------

DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization_gpu",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "utilization_memory",
    "DCGM_FI_DEV_FB_USED": "memory_used_bytes",  # MiB
    "DCGM_FI_DEV_FB_TOTAL": "memory_total_bytes",  # MiB
    "DCGM_FI_DEV_FB_FREE": "fb_free",  # MiB; used + free stands in for a missing FB_TOTAL
    "DCGM_FI_DEV_POWER_USAGE": "power_watts",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_watts",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "power_limit_watts",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
}
# DCGM's "blank" values (dcgm_structs.h): a field with no data reads as these, and the
# NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED codes sit just above each. None of our fields
# can really reach 2**31 (that would be 2 PiB of framebuffer), so at/above the smallest = missing.
DCGM_INT32_BLANK = 2147483632
DCGM_INT64_BLANK = 9223372036854775792
DCGM_FP64_BLANK = 140737488355328.0
DCGM_BLANK_FLOOR = min(DCGM_INT32_BLANK, DCGM_INT64_BLANK, DCGM_FP64_BLANK)

_PROM_LINE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>\S+))?\s*$"
)
_PROM_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _labels(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _PROM_LABEL.finditer(text or "")}


def parse_dcgm(text: str, start: datetime | None = None) -> ParseResult:
    """dcgm-exporter's `/metrics` text, one scrape or several concatenated.

    1. Each line is one field of one GPU (`gpu` label); lines are grouped by (gpu, timestamp),
       the timestamp being Prometheus' optional trailing milliseconds, else `start`.
    2. MIG-instance lines (a non-empty `GPU_I_ID` label) are skipped with a reason: their values
       (framebuffer, activity) belong to a slice, and mixing them into the whole-GPU series of the
       parent index would be wrong; whole-GPU lines of the same GPU are kept.
    3. Lines from a second `Hostname` are skipped: one import is one node.
    4. Blank sentinels and NaN are missing; FB MiB -> bytes; total = FB_TOTAL, else used + free.
    """
    out = _Collector(TelemetryFormat.DCGM)
    groups: dict[tuple[int, datetime], dict[str, float | None]] = {}
    first_line: dict[tuple[int, datetime], int] = {}
    host: str | None = None
    untimed_reported = False
    for number, line in _lines(text):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        match = _PROM_LINE.match(stripped)
        if not match:
            out.problem(number, "not a Prometheus sample line")
            continue
        target = DCGM_FIELDS.get(match.group("name"))
        if target is None:
            continue  # another DCGM field (XID, ECC, profiling...) or another exporter's metric
        labels = _labels(match.group("labels"))
        if labels.get("GPU_I_ID"):
            profile = labels.get("GPU_I_PROFILE", "?")
            out.problem(
                number, f"MIG instance {labels['GPU_I_ID']} ({profile}) of GPU {labels.get('gpu', '?')}: not imported"
            )
            continue
        hostname = labels.get("Hostname")
        if hostname:
            host = host or hostname
            if hostname != host:
                out.problem(number, f"Hostname {hostname!r} is not {host!r}: import each host as its own --node")
                continue
        try:
            if "gpu" not in labels:
                raise ValueError("no gpu label")
            gpu = _gpu_index(labels["gpu"])
            try:
                value: float | None = float(match.group("value"))
            except ValueError:
                raise ValueError(f"bad value {match.group('value')[:40]!r}") from None
            if not math.isfinite(value) or value >= DCGM_BLANK_FLOOR:
                value = None
            stamp = match.group("ts")
            if stamp is not None:
                ts = datetime.fromtimestamp(float(stamp) / 1000, tz=UTC)
            elif start is not None:
                ts = start
            else:
                if not untimed_reported:
                    out.problem(0, "DCGM lines without a timestamp: pass --start for the scrape time")
                    untimed_reported = True
                continue
            scaled = value * MIB if value is not None and target in ({"fb_free"} | BYTE_FIELDS) else value
            if target != "fb_free" and (bad := out_of_range({target: scaled})):
                raise ValueError(bad)
        except (ValueError, OverflowError, OSError) as exc:
            out.problem(number, str(exc))
            continue
        key = (gpu, ts)
        group = groups.setdefault(key, {})
        first_line.setdefault(key, number)
        if group.get(target) is not None:
            if group[target] != scaled:
                out.problem(number, f"{match.group('name')} of GPU {gpu} at {ts.isoformat()} already read")
            continue
        group[target] = scaled
    for (gpu, ts), group in sorted(groups.items()):
        free = group.pop("fb_free", None)
        used = group.get("memory_used_bytes")
        if group.get("memory_total_bytes") is None and used is not None and free is not None:
            group["memory_total_bytes"] = used + free
        out.add(first_line[(gpu, ts)], gpu, ts, {name: group.get(name) for name in VALUE_FIELDS})
    return out.result


# --- Entry point ----------------------------------------------------------------------------

_DMON_COLUMNS = {"pwr", "gtemp", "sm", "mem", "pclk", "mclk", "fb", "enc", "dec"}


def detect_format(text: str) -> str | None:
    """The format of a telemetry file from its first lines, or None when it is none we read."""
    for count, (_number, line) in enumerate(_lines(text)):
        if count >= 200:
            break
        stripped = line.strip()
        if stripped.startswith(("# HELP ", "# TYPE ", "DCGM_FI_")):
            return TelemetryFormat.DCGM
        if stripped.startswith("#"):
            tokens = set(stripped.lstrip("#").replace(",", " ").lower().split())
            if "gpu" in tokens and tokens & _DMON_COLUMNS:
                return TelemetryFormat.DMON
            continue
        if "," in stripped:
            return TelemetryFormat.NVIDIA_SMI_CSV
        if re.fullmatch(r"[\d\s.:-]+", stripped):
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
                message = "empty file" if not text.strip() else "not nvidia-smi CSV, dmon or DCGM exporter text"
                return ParseResult(format=fmt, problems=[LineProblem(0, f"cannot tell the format: {message}")])
        fmt = detected
    parsers: dict[str, Callable[[], ParseResult]] = {
        TelemetryFormat.NVIDIA_SMI_CSV: lambda: parse_nvidia_smi_csv(text, start, fields, tz),
        TelemetryFormat.DMON: lambda: parse_dmon(text, start, tz),
        TelemetryFormat.DCGM: lambda: parse_dcgm(text, start),
    }
    if fmt not in parsers:
        return ParseResult(format=fmt, problems=[LineProblem(0, f"unknown format {fmt!r}")])
    try:
        return parsers[fmt]()
    except _Fatal as exc:
        return ParseResult(format=fmt, problems=[LineProblem(0, str(exc))])
