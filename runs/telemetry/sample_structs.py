"""The GPU-sample push's fast path: msgspec reads a body GpuSampleBatchIn would accept, value for value.

`decode_batch` parses and checks a `POST /api/v1/gpu-samples` body in one pass of msgspec's C
decoder into `SampleBatch` structs: ~4 ms for 10,000 NVML samples, against ~30 ms for
pydantic-core building the same rows as dicts (bench/accept.py). It accepts a strict subset of
what `runs.schemas.GpuSampleBatchIn` accepts and gives the same values: whatever it is not
sure of, it hands back None and the caller validates with GpuSampleBatchIn, whose errors (and
only those) the API answers with. So it refuses rather than coerces:

- numbers as JSON spells them: an integer field takes a JSON integer only (pydantic's lax
  mode also takes 3.0 or "3"), a float field an integer or a float;
- times as RFC 3339 text with at most microseconds (pydantic also reads Unix seconds and other
  spellings, and truncates nanoseconds where msgspec's own datetime would round them), read
  by `datetime.fromisoformat` then Timestamp's `aware`, once per distinct text; one either
  refuses sends the whole body to GpuSampleBatchIn, which names it;
- run ids of printable ASCII without `/` (ExternalId also takes other non-space characters),
  checked once per distinct id;
- a body holding a NUL (JSON can only spell it \\u0000): the model's NUL message names the field.

tests/runs/telemetry/test_sample_structs.py holds the two to the same bounds and, by property test, to
the same values for every body the structs accept.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from dashboard.kit.schemas import aware
from runs.choices import RunSource, TelemetrySource

_Percent = Annotated[float, Meta(ge=0, le=100)]
_Watts = Annotated[float, Meta(ge=0, le=10_000)]
_Mhz = Annotated[float, Meta(ge=0, le=100_000)]
_Bytes = Annotated[int, Meta(ge=0, le=2**50)]
_Counter = Annotated[int, Meta(ge=0, le=2**63 - 1)]
# ExternalId's subset: printable ASCII but `/` (space excluded), 1 to 200 characters.
_PLAIN_RUN_ID = re.compile(r"[!-.0-~]{1,200}")
# RFC 3339 with a `T`, at most microseconds, `Z` or a +-HH:MM offset or none (read as UTC).
_PLAIN_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)


class ProcessRow(Struct):
    """GpuProcessIn's fields and bounds."""

    pid: Annotated[int, Meta(ge=0, le=2**31)]
    used_memory_bytes: _Bytes | None = None
    run: Annotated[str, Meta(max_length=200)] = ""


class SampleRow(Struct, kw_only=True):
    """GpuSampleIn's fields in its order, defaults and bounds (`run`'s pattern checked by `decode_batch`)."""

    run: str
    run_source: RunSource | None = None
    attempt: Annotated[int, Meta(ge=1, le=1000)] | None = None
    node: Annotated[int, Meta(ge=0, le=4096)] = 0
    host: Annotated[str, Meta(max_length=255)] = ""
    gpu: Annotated[int, Meta(ge=0, le=255)]
    # The text as sent until `decode_batch` puts its instant (an aware UTC datetime) in its place.
    ts: str
    utilization_gpu: _Percent | None = None
    utilization_memory: _Percent | None = None
    memory_used_bytes: _Bytes | None = None
    memory_total_bytes: _Bytes | None = None
    power_watts: _Watts | None = None
    power_limit_watts: _Watts | None = None
    temperature_c: Annotated[float, Meta(ge=-50, le=200)] | None = None
    sm_clock_mhz: _Mhz | None = None
    mem_clock_mhz: _Mhz | None = None
    sm_active: _Percent | None = None
    tensor_active: _Percent | None = None
    throttle_reasons: _Counter | None = None
    ecc_corrected: _Counter | None = None
    ecc_uncorrected: _Counter | None = None
    pcie_tx_kbps: Annotated[float, Meta(ge=0, le=1e9)] | None = None
    pcie_rx_kbps: Annotated[float, Meta(ge=0, le=1e9)] | None = None
    processes: Annotated[list[ProcessRow], Meta(max_length=1000)] | None = None
    nvlink_tx_kbps: Annotated[float, Meta(ge=0, le=1e10)] | None = None
    nvlink_rx_kbps: Annotated[float, Meta(ge=0, le=1e10)] | None = None


class SampleBatch(Struct):
    """GpuSampleBatchIn's fields."""

    samples: Annotated[list[SampleRow], Meta(min_length=1)]
    source: TelemetrySource = TelemetrySource.API


_DECODER = msgspec.json.Decoder(SampleBatch)


def decode_batch(body: bytes) -> SampleBatch | None:
    """The batch, its times in UTC, when the fast path can vouch for it; None: let GpuSampleBatchIn decide."""
    if b"\\u0000" in body:
        return None
    try:
        batch = _DECODER.decode(body)
    except msgspec.DecodeError:  # ValidationError included
        return None
    samples = batch.samples
    if not all(_PLAIN_RUN_ID.fullmatch(run) for run in {s.run for s in samples}):
        return None
    utc: dict[str, datetime] = {}
    try:
        for sample in samples:
            text = sample.ts
            at = utc.get(text)
            if at is None:  # the GPUs of a node share their instants: each text is read once
                if not _PLAIN_TIME.fullmatch(text):
                    return None
                at = utc[text] = aware(datetime.fromisoformat(text))
            sample.ts = at  # type: ignore[assignment]  # the instant in place of its text
    except ValueError:
        return None
    return batch


def from_model(model: Any) -> SampleBatch:
    """A batch GpuSampleBatchIn validated, as the same structs (nothing checked again)."""
    samples = []
    for sample in model.samples:
        values = dict(sample)
        if values["processes"] is not None:
            values["processes"] = [ProcessRow(**dict(p)) for p in values["processes"]]
        samples.append(SampleRow(**values))
    return SampleBatch(samples=samples, source=model.source)


def process_dicts(processes: list[ProcessRow]) -> list[dict[str, Any]]:
    """A sample's processes as the dicts a recorded row holds (GpuProcessIn's model_dump)."""
    return [msgspec.structs.asdict(p) for p in processes]
