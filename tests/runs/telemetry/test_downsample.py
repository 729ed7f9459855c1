"""runs/telemetry/downsample.py and the zoom endpoint: min/max buckets, tier by range, telemetry.json."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runs.models import GpuHour, GpuMinute, GpuSample, Node
from runs.telemetry import charts
from runs.telemetry.downsample import MAX_POINTS, choose_tier, minmax_buckets
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run


def test_few_points_pass_through_unchanged() -> None:
    assert minmax_buckets([0.0, 1.0, 2.0], [1.0, None, 3.0], max_points=10) == [(0.0, 1.0), (1.0, None), (2.0, 3.0)]


@pytest.mark.parametrize("n", [2_001, 10_000, 108_000])
def test_a_one_sample_spike_and_dip_survive_and_the_bound_holds(n: int) -> None:
    ts = [float(i) for i in range(n)]
    values: list[float | None] = [50.0] * n
    values[n // 3] = 100.0  # a one-second spike
    values[2 * n // 3] = 0.0  # a one-second dip
    out = minmax_buckets(ts, values, MAX_POINTS)
    assert len(out) <= MAX_POINTS
    assert (float(n // 3), 100.0) in out
    assert (float(2 * n // 3), 0.0) in out
    times = [t for t, _ in out]
    assert times == sorted(times)


def test_rollup_lows_are_kept_beside_the_highs() -> None:
    n = 100
    ts = [float(i) for i in range(n)]
    highs = [10.0] * n
    lows = [5.0] * n
    lows[42] = 0.0
    out = minmax_buckets(ts, highs, 10, lows=lows)
    assert len(out) <= 10
    assert (42.0, 0.0) in out
    assert max(v for _, v in out if v is not None) == 10.0


def test_a_bucket_of_only_missing_values_stays_a_gap() -> None:
    ts = [float(i) for i in range(40)]
    values = [1.0] * 20 + [None] * 20
    out = minmax_buckets(ts, values, 4)
    assert out[-1][1] is None
    assert len(out) <= 4


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        minmax_buckets([0.0], [1.0, 2.0], 10)
    with pytest.raises(ValueError):
        minmax_buckets([0.0], [1.0], 1)


def test_tier_by_range() -> None:
    assert choose_tier(T0, T0 + timedelta(minutes=20)) == "raw"
    assert choose_tier(T0, T0 + timedelta(hours=1)) == "minute"
    assert choose_tier(T0, T0 + timedelta(hours=30)) == "minute"
    assert choose_tier(T0, T0 + timedelta(days=14)) == "hour"


def _long_run(world: World, minutes: int = 90, gpus: int = 2):
    """A run with `minutes` of 1 Hz samples on `gpus` GPUs through the real store path, and one spike."""
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    samples = [
        GpuSample(run=run, node=node, gpu_index=g, ts=T0 + timedelta(seconds=s), utilization_gpu=40.0,
                  memory_used_bytes=10**9)
        for g in range(gpus) for s in range(minutes * 60)
    ]  # fmt: skip
    samples[1234 % len(samples)].utilization_gpu = 100.0  # GPU 0, one second at T0 + 1234 s (long runs)
    store_gpu_samples(samples)
    return run


@pytest.mark.django_db
def test_whole_run_reads_minutes_and_keeps_the_spike(world: World) -> None:
    run = _long_run(world)
    series = charts.gpu_series(run, "utilization_gpu")
    assert {s.tier for s in series} == {"minute"}
    assert max(series[0].y) == 100.0
    assert GpuHour.objects.filter(run=run).count() == 2 * 2  # 90 minutes over 2 hours, 2 GPUs


@pytest.mark.django_db
class TestTelemetryJson:
    def url(self, run, **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"/runs/{run.pk}/telemetry.json?{query}"

    def test_zoom_re_queries_raw_samples_for_a_short_range(self, world: World) -> None:
        run = _long_run(world)
        client = world.client_for(world.alice)
        whole = client.get(self.url(run, field="utilization_gpu")).json()
        assert whole["tier"] == "minute"
        zoom = client.get(
            self.url(run, field="utilization_gpu", **{"from": "2026-11-02 09:20:00", "to": "2026-11-02 09:21:00"})
        ).json()
        assert zoom["tier"] == "raw"
        trace = zoom["figure"]["data"][0]
        assert len(trace["x"]) == 61  # one per second, both ends included
        assert 100 in trace["y"]  # the spike at 09:20:34
        assert zoom["figure"]["layout"]["meta"]["telemetry_field"] == "utilization_gpu"
        assert GpuMinute.objects.filter(run=run).count() == 90 * 2

    def test_memory_is_scaled_like_the_page(self, world: World) -> None:
        run = _long_run(world, minutes=2, gpus=1)
        body = world.client_for(world.alice).get(self.url(run, field="memory_used_bytes")).json()
        assert body["figure"]["data"][0]["y"][0] == 1.0

    def test_other_teams_get_404_and_bad_input_400(self, world: World) -> None:
        run = _long_run(world, minutes=2, gpus=1)
        assert world.client_for(world.charlie).get(self.url(run, field="utilization_gpu")).status_code == 404
        assert world.client_for(world.sam).get(self.url(run, field="utilization_gpu")).status_code == 200
        alice = world.client_for(world.alice)
        assert alice.get(self.url(run, field="id")).status_code == 400
        assert alice.get(self.url(run, field="power_watts", **{"from": "yesterday"})).status_code == 400
        assert alice.get(self.url(run, field="power_watts")).json()["figure"] is None


@pytest.mark.django_db
def test_a_run_past_the_point_cap_keeps_its_one_second_spike_through_the_store_path(world: World) -> None:
    run = _long_run(world)  # 90 minutes at 1 Hz: 90 minute rows a GPU, one 1-second spike on GPU 0
    series = charts.gpu_series(run, "utilization_gpu", max_points=30)
    assert {s.tier for s in series} == {"minute"}
    assert all(len(s.x) == len(s.y) <= 30 for s in series)
    gpu0, gpu1 = series
    # The spike at 09:20:34 lives on as its minute's max, labelled with that minute.
    assert gpu0.y.count(100.0) == 1
    assert gpu0.x[gpu0.y.index(100.0)] == "2026-11-02 09:20:00"
    assert 100.0 not in gpu1.y
    assert gpu0.x == sorted(gpu0.x)


@pytest.mark.django_db
def test_a_35_hour_run_is_capped_at_max_points_a_series_with_its_spike_and_dip(world: World) -> None:
    """The bench's 1,000,000-sample shape (8 GPUs x 35 hours = 2,100 minute rows each), in rollups."""
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    minutes = 2_100
    spike, dip = 1_400, 700  # GPU 3 spiked to 100 % for a second; GPU 5 dropped to 0 for one
    GpuMinute.objects.bulk_create(
        GpuMinute(run=run, node=node, gpu_index=g, minute=T0 + timedelta(minutes=m), samples=60,
                  utilization_gpu_min=0.0 if (g, m) == (5, dip) else 40.0, utilization_gpu_avg=50.0,
                  utilization_gpu_max=100.0 if (g, m) == (3, spike) else 60.0)
        for g in range(8) for m in range(minutes)
    )  # fmt: skip
    figure = charts.utilization_figure(charts.gpu_series(run, "utilization_gpu"))
    assert figure is not None
    assert figure["layout"]["meta"]["tier"] == "minute"
    traces = figure["data"]
    assert len(traces) == 8
    assert all(len(t["x"]) == len(t["y"]) <= MAX_POINTS for t in traces)
    assert max(len(t["x"]) for t in traces) > MAX_POINTS // 2  # reduced, not thinned to nothing
    at = (T0 + timedelta(minutes=spike)).strftime("%Y-%m-%d %H:%M:%S")
    assert traces[3]["x"][traces[3]["y"].index(100)] == at
    assert all(100 not in t["y"] for i, t in enumerate(traces) if i != 3)
    assert 0 in traces[5]["y"]
    assert all(min(t["y"]) == 40 for i, t in enumerate(traces) if i != 5)
