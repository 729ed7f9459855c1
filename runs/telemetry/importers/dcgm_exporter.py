"""dcgm-exporter's Prometheus text, read into samples (MIG instances as GPUs of their own)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from runs.telemetry.importers.common import (
    MIB,
    VALUE_FIELDS,
    Collector,
    ParseResult,
    TelemetryFormat,
    out_of_range,
    read_gpu_index,
    read_lines,
    typed_values,
)
from runs.telemetry.labels import gpu_label, mig_gpu_index

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
    out = Collector(TelemetryFormat.DCGM)
    groups: dict[tuple[int, datetime], dict[str, float | None]] = {}
    first_line: dict[tuple[int, datetime], int] = {}
    host: str | None = None
    untimed_reported = False
    for number, line in read_lines(text, out):
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
    gpu = read_gpu_index(labels["gpu"])
    if labels.get("GPU_I_ID"):
        gpu = mig_gpu_index(gpu, read_gpu_index(labels["GPU_I_ID"]))
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
    out: Collector,
    groups: dict[tuple[int, datetime], dict[str, float | None]],
    first_line: dict[tuple[int, datetime], int],
) -> None:
    """Each (GPU, time)'s fields, folded, as one sample, in order; a group with only FB_FREE is refused."""
    free_only_noted = False
    for (gpu, ts), group in sorted(groups.items()):
        values = fold_dcgm(group)
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
    return typed_values(fold_dcgm(read))


# Why a page with DCGM_FI_DEV_FB_FREE but neither FB_USED nor FB_TOTAL says nothing of memory used.
FB_FREE_ONLY = (
    "DCGM_FI_DEV_FB_FREE without DCGM_FI_DEV_FB_USED or DCGM_FI_DEV_FB_TOTAL gives neither the memory used nor"
    " the GPU's total; add DCGM_FI_DEV_FB_USED (in dcgm-exporter's default counters) to the exporter's counters file"
)


def fold_dcgm(read: dict[str, float | None]) -> dict[str, float | None]:
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
