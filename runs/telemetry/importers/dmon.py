"""`nvidia-smi dmon` output (space- or comma-separated), read into samples."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, tzinfo

from runs.telemetry.importers.common import (
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
    out = Collector(TelemetryFormat.DMON)
    columns: list[str] | None = None
    before_header: list[int] = []
    ticker: Ticker | None = None
    day: date | None = None
    last_time: datetime | None = None
    for number, line in read_lines(text, out):
        if line.lstrip().startswith("#"):
            tokens = line.strip().lstrip("#").replace(",", " ").lower().split()
            if "gpu" in tokens and "pid" in tokens:
                raise FatalFileError(PMON_REFUSED)
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
            gpu = read_gpu_index(row["gpu"])
            values: dict[str, float | None] = dict.fromkeys(VALUE_FIELDS)
            for name, target in DMON_FIELDS.items():
                if name in row:
                    value, unit = parse_value(row[name])
                    value = scale_value(target, value, unit)
                    values[target] = value * DMON_SCALE[name] if value is not None and name in DMON_SCALE else value
            if "date" in row and "time" in row:
                ts = local_to_utc(datetime.strptime(f"{row['date']} {row['time']}", "%Y%m%d %H:%M:%S"), tz)
            elif "time" in row:
                if start is None:
                    raise FatalFileError("dmon `-o T` gives only the time of day: pass --start for the date")
                clock = datetime.strptime(row["time"], "%H:%M:%S").time()
                day = day or start.astimezone(tz or UTC).date()
                naive = datetime.combine(day, clock)
                if last_time is not None and naive < last_time - timedelta(hours=12):
                    day += timedelta(days=1)  # the clock passed midnight
                    naive = datetime.combine(day, clock)
                last_time = naive
                ts = local_to_utc(naive, tz)
            else:
                ticker = ticker or Ticker(start, "dmon output without `-o DT`")
                ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    if columns is None:
        raise FatalFileError("no dmon header line (`# gpu pwr gtemp ...`) before the data")
    return out.result
