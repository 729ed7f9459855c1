"""nvidia-smi `--query-gpu` CSV (with or without its header), read into samples."""

from __future__ import annotations

import csv
import re
from datetime import datetime, timedelta, tzinfo

from runs.telemetry.importers.common import (
    MAX_GPUS_PER_SNAPSHOT,
    SNAPSHOT_GAP,
    VALUE_FIELDS,
    Collector,
    FatalFileError,
    ParseResult,
    TelemetryFormat,
    Ticker,
    local_to_utc,
    parse_value,
    read_gpu_index,
    read_lines,
    scale_value,
)

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


def smi_header(cells: list[str]) -> list[tuple[str, str]] | None:
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
            return local_to_utc(datetime.strptime(cell, pattern), tz)
        except ValueError:
            continue
    try:
        return local_to_utc(datetime.fromisoformat(cell), tz)
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
        values[target] = scale_value(target, value, value_unit or unit)
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
    out = Collector(TelemetryFormat.NVIDIA_SMI_CSV)
    columns = [(f.strip().lower(), "") for f in fields] if fields else None
    before_header: list[int] = []
    ids: dict[str, int] = {}
    ticker: Ticker | None = None
    last_ts: datetime | None = None
    position = -1
    for number, line in read_lines(text, out):
        cells = next(csv.reader([line], skipinitialspace=True), [])
        header = smi_header(cells)
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
                gpu = read_gpu_index(row["index"])
            elif device:
                gpu = ids.setdefault(device, len(ids))
            else:
                same_snapshot = ts is None or (last_ts is not None and timedelta(0) <= ts - last_ts < SNAPSHOT_GAP)
                position = position + 1 if same_snapshot else 0
                if position >= MAX_GPUS_PER_SNAPSHOT:
                    raise FatalFileError(
                        f"line {number}: more than {MAX_GPUS_PER_SNAPSHOT} GPUs in one snapshot: without an index, "
                        "uuid, pci.bus_id or timestamp column the GPUs of a looped file cannot be told apart "
                        "(add index to --query-gpu)"
                    )
                gpu = position
            last_ts = ts
            if ts is None:
                ticker = ticker or Ticker(start, "this CSV (no timestamp column)")
                ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    if columns is None and before_header:
        raise FatalFileError("no CSV header line: pass the --query-gpu field list with --fields (noheader format)")
    return out.result
