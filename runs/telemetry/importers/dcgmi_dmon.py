"""DCGM's `dcgmi dmon -e <field ids>` output, read into samples."""

from __future__ import annotations

from datetime import datetime

from runs.telemetry.importers.common import (
    MIB,
    Collector,
    FatalFileError,
    ParseResult,
    TelemetryFormat,
    Ticker,
    parse_value,
    read_gpu_index,
    read_lines,
)
from runs.telemetry.importers.dcgm_exporter import fold_dcgm

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


def dcgmi_header(line: str) -> list[str] | None:
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
    out = Collector(TelemetryFormat.DCGMI_DMON)
    columns: list[str] | None = None
    before_header: list[int] = []
    ticker: Ticker | None = None
    for number, line in read_lines(text, out):
        stripped = line.strip()
        if (header := dcgmi_header(stripped)) is not None:
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
            gpu = read_gpu_index(tokens[1])
            values: dict[str, float | None] = {}
            for name, cell in zip(columns, tokens[2:], strict=True):
                target, factor = DCGMI_FIELDS.get(name.upper(), ("", 1.0))
                if target:
                    value, _unit = parse_value(cell)
                    values[target] = value * factor if value is not None else None
            values = fold_dcgm(values)
            ticker = ticker or Ticker(start, "dcgmi dmon output")
            ts = ticker.next(gpu)
        except (ValueError, OverflowError) as exc:
            out.problem(number, str(exc))
            continue
        out.add(number, gpu, ts, values)
    if columns is None:
        raise FatalFileError("no dcgmi dmon header line (`#Entity ...`) before the data")
    return out.result
