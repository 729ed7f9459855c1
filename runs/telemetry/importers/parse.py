"""The importers' entry point: `detect_format` and `parse_telemetry`, which never raises on bad content."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo

from runs.telemetry.importers.checks import suspect_values
from runs.telemetry.importers.common import FatalFileError, LineProblem, ParseResult, TelemetryFormat, read_lines
from runs.telemetry.importers.dcgm_exporter import parse_dcgm
from runs.telemetry.importers.dcgmi_dmon import dcgmi_header, parse_dcgmi_dmon
from runs.telemetry.importers.dmon import parse_dmon
from runs.telemetry.importers.nvidia_smi_csv import parse_nvidia_smi_csv, smi_header

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
    head = [line.strip() for _number, line in itertools.islice(read_lines(text), 200)]
    if any(line.startswith(("# HELP ", "# TYPE ", "DCGM_FI_")) for line in head):
        return TelemetryFormat.DCGM
    # The first header decides, over the lines above it: the command that produced the file
    # (`dcgmi dmon -e 1001,1004`, `nvidia-smi dmon -i 0,1`) has commas but is no CSV, and a
    # `# ...` comment below a CSV header does not make the file dmon.
    for stripped in head:
        if dcgmi_header(stripped) is not None:
            return TelemetryFormat.DCGMI_DMON
        if _dmon_header(stripped):
            return TelemetryFormat.DMON
        if not stripped.startswith("#") and smi_header(stripped.split(",")) is not None:
            return TelemetryFormat.NVIDIA_SMI_CSV
    for stripped in head:
        if stripped.startswith("#"):
            continue
        if "," in stripped:  # a one-column query's header was found above, by smi_header
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
    except FatalFileError as exc:
        return ParseResult(format=fmt, problems=[LineProblem(0, str(exc))])
    result.suspect = suspect_values(result.samples)
    return result
