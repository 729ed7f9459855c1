"""The msgspec fast path of the GPU-sample push accepts only what GpuSampleBatchIn accepts, with its values."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from runs.schemas import GpuSampleBatchIn
from runs.telemetry.sample_structs import SampleBatch, decode_batch, from_model, process_dicts
from tests.conftest import T0


def _bounds(node: Any) -> Any:
    """A JSON schema's checks only: no titles, descriptions, formats or reference names."""
    if isinstance(node, dict):
        skipped = ("title", "description", "format", "$ref", "enum")
        return {k: _bounds(v) for k, v in sorted(node.items()) if k not in skipped}
    if isinstance(node, list):
        return [_bounds(v) for v in node]
    return node


def test_the_structs_have_the_models_fields_defaults_and_bounds() -> None:
    (_,), defs = msgspec.json.schema_components(
        [SampleBatch], schema_hook=lambda kind: {"enum": [m.value for m in kind]}
    )
    model = GpuSampleBatchIn.model_json_schema()
    ours, theirs = defs["SampleRow"]["properties"], model["$defs"]["GpuSampleIn"]["properties"]
    assert list(ours) == list(theirs)
    # `run`: its pattern and length are checked in decode_batch (a stricter subset).
    theirs["run"] = {"type": "string"}
    for name in ours:
        assert _bounds(ours[name]) == _bounds(theirs[name]), name
    assert _bounds(defs["ProcessRow"]) == _bounds(model["$defs"]["GpuProcessIn"])
    assert sorted(defs["SampleBatch"]["properties"]) == sorted(model["properties"])


def _shape(batch: SampleBatch) -> list[Any]:
    """Every value with its type spelt out: 97 and 97.0, or two offsets of one instant, differ here."""
    out: list[Any] = [repr(batch.source)]
    for sample in batch.samples:
        values = msgspec.structs.asdict(sample)
        if sample.processes is not None:
            values["processes"] = process_dicts(sample.processes)
        out.append({k: (type(v).__name__, repr(v)) for k, v in values.items()})
    return out


ODD_STAMP_TEXTS = [
    "2026-11-02T09:00:00Z", "2026-11-02t09:00:00z", "2026-11-02 09:00:00+00:00", "2026-11-02T09:00:00.123456789Z",
    "2026-11-02T09:00:00.1Z", "2026-11-02T09:00Z", "2026-11-02", "2026-11-02T24:00:00Z", "2026-11-02T09:00:60Z",
    "2026-11-02T09:00:00+01", "2026-11-02T09:00:00+0100", "20261102T090000Z", "yesterday", "",
    "2026-11-02T09:00:00.0000005+00:00", "2026-11-02T09:00:00,5Z", "2199-12-31T23:59:59.999999Z",
    "2200-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00+00:01", "2026-02-30T09:00:00Z",
    "2026-11-02T09:00:00+24:00", "2026-11-02T09:00:00-23:59", "0000-01-01T00:00:00Z",
]  # fmt: skip
ODD_STAMPS = st.one_of(
    st.datetimes(
        min_value=datetime(1960, 1, 1),
        max_value=datetime(2300, 1, 1),
        timezones=st.sampled_from(
            [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=23))]
        ),
    ).map(lambda d: d.isoformat()),
    st.sampled_from(ODD_STAMP_TEXTS),
    st.integers(min_value=-10, max_value=2**34),
    st.floats(min_value=0, max_value=2e9),
)
ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=-100, max_value=300),
    st.integers(min_value=0, max_value=300).map(float), st.sampled_from(["3", "3.5", "", "nan", "1e3"]),
)  # fmt: skip
ODD_RUN_IDS = st.one_of(
    st.sampled_from(["a/b", "has space", "", "x" * 200, "x" * 201, "é", "a\x1cb", "a\u3000b"]),
    st.text(min_size=0, max_size=8),
)


def _fitting(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values inside a number field's bounds, the bounds themselves included, as JSON may spell them."""
    kind = next(s for s in schema.get("anyOf", [schema]) if s.get("type") in ("integer", "number"))
    low, high = kind.get("minimum"), kind.get("maximum")
    if kind["type"] == "integer":
        return st.integers(min_value=low, max_value=high)
    return st.one_of(
        st.floats(min_value=low, max_value=high), st.sampled_from([low, high, float(low), float(high)]),
        st.integers(min_value=int(low), max_value=int(min(high, 2**60))), st.none(),
    )  # fmt: skip


_PROPERTIES = GpuSampleBatchIn.model_json_schema()["$defs"]["GpuSampleIn"]["properties"]
_NUMBER_FIELDS = [name for name in _PROPERTIES if name not in ("run", "run_source", "host", "ts", "processes")]


@st.composite
def _value(draw: st.DrawFn, fitting: st.SearchStrategy[Any], odd: st.SearchStrategy[Any] = ANYTHING) -> Any:
    """Mostly a value the model takes, now and then anything at all."""
    return draw(odd) if draw(st.integers(0, 19)) == 0 else draw(fitting)


STAMPS = _value(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2199, 12, 30), timezones=st.sampled_from(
        [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=9))]
    )).map(lambda d: d.isoformat()),
    ODD_STAMPS,
)  # fmt: skip
RUN_IDS = _value(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12), ODD_RUN_IDS)


PROCESSES = st.one_of(
    st.none(),
    st.lists(
        st.fixed_dictionaries(
            {"pid": _value(st.integers(0, 2**31))},
            optional={"used_memory_bytes": _value(st.integers(0, 2**50)), "run": _value(RUN_IDS, st.just("x" * 201))},
        ),
        max_size=3,
    ),
)
SAMPLES = st.fixed_dictionaries(
    {"run": RUN_IDS, "gpu": _value(st.integers(0, 255)), "ts": STAMPS},
    optional={
        **{name: _value(_fitting(_PROPERTIES[name])) for name in _NUMBER_FIELDS if name != "gpu"},
        "run_source": _value(st.sampled_from(["local", "classic", "serverless", None]), st.sampled_from(["nope", 3])),
        "host": _value(st.one_of(st.text(max_size=4), st.just("h" * 255)), st.sampled_from(["h" * 256, None, 1])),
        "processes": PROCESSES,
        "unknown": ANYTHING,
    },
)
BODIES = st.fixed_dictionaries(
    {"samples": st.lists(SAMPLES, min_size=0, max_size=4)},
    optional={"source": _value(st.sampled_from(["nvml", "api", "nvidia-smi"]), st.sampled_from(["nope", None]))},
)


@settings(max_examples=2000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES, st.booleans())
def test_what_the_fast_path_accepts_the_model_accepts_with_the_same_values(body: dict, compact: bool) -> None:
    text = json.dumps(body, separators=(",", ":") if compact else None, ensure_ascii=compact)
    fast = decode_batch(text.encode())
    try:
        model = GpuSampleBatchIn.model_validate_json(text)
    except ValidationError:
        assert fast is None, text
        return
    if fast is not None:
        assert _shape(fast) == _shape(from_model(model)), text


def _body(**fields: Any) -> bytes:
    sample = {"run": "r1", "gpu": 3, "ts": T0.isoformat(), "utilization_gpu": 97, **fields}
    return json.dumps({"source": "nvml", "samples": [sample]}).encode()


def test_an_nvml_batch_takes_the_fast_path_with_the_models_values() -> None:
    processes = [{"pid": 7, "used_memory_bytes": 1024, "run": "r1"}, {"pid": 8}]
    body = _body(power_watts=650.125, memory_used_bytes=2**40, processes=processes, ts="2026-11-02T10:00:00+01:00")
    fast = decode_batch(body)
    assert fast is not None
    assert _shape(fast) == _shape(from_model(GpuSampleBatchIn.model_validate_json(body)))
    (sample,) = fast.samples
    assert sample.ts == T0 and sample.ts.tzinfo is UTC and sample.utilization_gpu == 97.0
    assert process_dicts(sample.processes or []) == [
        {"pid": 7, "used_memory_bytes": 1024, "run": "r1"}, {"pid": 8, "used_memory_bytes": None, "run": ""},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "fields",
    [
        {"gpu": 3.0},  # the model's lax mode reads 3.0 as 3
        {"utilization_gpu": "97"},
        {"ts": 1_793_610_000},  # Unix seconds
        {"run": "résumé"},  # a run id the model accepts outside the plain subset
        {"ts": "1969-12-31T23:59:59+00:00"},  # `aware` refuses it: the model names it
    ],
)
def test_what_the_fast_path_cannot_vouch_for_is_left_to_the_model(fields: dict) -> None:
    assert decode_batch(_body(**fields)) is None


def test_a_repeated_key_reads_as_the_model_reads_it() -> None:
    body = b'{"samples":[{"run":"r1","gpu":1,"gpu":2,"ts":"2026-11-02T09:00:00Z"}],"source":"api","source":"nvml"}'
    fast = decode_batch(body)
    model = from_model(GpuSampleBatchIn.model_validate_json(body))
    assert fast is None or _shape(fast) == _shape(model)


@pytest.mark.parametrize("ts", ODD_STAMP_TEXTS)
def test_every_odd_time_reads_as_the_model_reads_it_or_is_left_to_it(ts: str) -> None:
    body = _body(ts=ts)
    fast = decode_batch(body)
    try:
        model = from_model(GpuSampleBatchIn.model_validate_json(body))
    except ValidationError:
        assert fast is None
        return
    assert fast is None or _shape(fast) == _shape(model)
