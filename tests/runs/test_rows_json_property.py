"""A recorded batch's JSON text is json.dumps's byte for byte, whichever numbers its rows hold (the batch hash)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from runs import ingest

VALUES = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e-3, max_value=1e-3),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=6),
    st.sampled_from(["2026-11-02T09:00:00+00:00", "e+", "E-", "x\x7fy"]),
)


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(st.lists(st.lists(VALUES, max_size=8), max_size=6))
def test_rows_json_is_json_dumps_for_any_rows(rows: list[list[object]]) -> None:
    assert ingest.rows_json(rows) == json.dumps(rows, separators=(",", ":"), sort_keys=True, default=str)
