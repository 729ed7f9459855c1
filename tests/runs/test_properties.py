"""Property tests for the downsampler (the workload parser, the log classifier and the cost
engine have theirs in test_workload.py, test_classify.py and test_costs.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runs.telemetry.downsample import minmax_buckets

values = st.one_of(st.none(), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))


@st.composite
def series(draw: st.DrawFn) -> tuple[list[float], list[float | None], int]:
    steps = draw(st.lists(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), min_size=1, max_size=400))
    ts, t = [], 0.0
    for step in steps:
        t += step
        ts.append(t)
    vals = draw(st.lists(values, min_size=len(ts), max_size=len(ts)))
    return ts, vals, draw(st.integers(min_value=2, max_value=120))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(series())
def test_minmax_buckets_keeps_extremes_order_and_bound(data: tuple[list[float], list[float | None], int]) -> None:
    ts, vals, max_points = data
    out = minmax_buckets(ts, vals, max_points)
    assert len(out) <= max_points
    times = [t for t, _ in out]
    assert times == sorted(times)
    # Every point drawn is a real sample: nothing is interpolated.
    pairs = set(zip(ts, vals, strict=True))
    assert all(point in pairs for point in out)
    # The spike an engineer looks for survives: the global max and min are kept.
    present = [v for v in vals if v is not None]
    kept = [v for _, v in out if v is not None]
    if present:
        assert max(present) in kept and min(present) in kept
