"""runs/telemetry/charts.py: figure shapes, the raw vs rollup tier, and empty data."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runs import compare
from runs.choices import RunStatus
from runs.models import Attempt, GpuMinute, GpuSample, MetricPoint, Node, Run
from runs.telemetry import charts
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


GB = 10**9


def add_samples(run: Run, node: Node, gpus: int, seconds: int, **values: float) -> None:
    """One sample per GPU per second, each field set to `values` (utilization = gpu index by default)."""
    GpuSample.objects.bulk_create(
        GpuSample(
            run=run,
            node=node,
            gpu_index=gpu,
            ts=T0 + timedelta(seconds=s),
            utilization_gpu=values.get("utilization_gpu", float(gpu)),
            memory_used_bytes=values.get("memory_used_bytes", 40 * GB),
        )
        for gpu in range(gpus)
        for s in range(seconds)
    )


def first_node(run: Run) -> Node:
    return Node.objects.get(attempt__run=run, attempt__number=1, index=0)


def test_raw_tier_one_trace_per_node_and_gpu(world: World) -> None:
    run = make_run(world.vision)
    node0 = first_node(run)
    node1 = Node.objects.create(attempt=node0.attempt, index=1, host="10.0.0.2")
    add_samples(run, node0, gpus=8, seconds=5)
    add_samples(run, node1, gpus=8, seconds=5)

    series = charts.gpu_series(run, "utilization_gpu")
    figure = charts.utilization_figure(series)

    assert figure is not None
    assert len(figure["data"]) == 16
    assert {s.tier for s in series} == {"raw"}
    names = [trace["name"] for trace in figure["data"]]
    assert names[:3] == ["node 0 · GPU 0", "node 0 · GPU 1", "node 0 · GPU 2"]
    assert names[8] == "node 1 · GPU 0"
    trace = figure["data"][3]
    assert trace["y"] == [3.0] * 5
    assert trace["x"][0] == "2026-11-02 09:00:00"
    # The figure crosses to the browser through json_script: plain JSON only.
    json.dumps(figure)


def test_rollup_tier_keeps_spikes_and_offers_the_average(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charts, "RAW_POINTS_PER_SERIES", 10)
    run = make_run(world.vision)
    node = first_node(run)
    add_samples(run, node, gpus=2, seconds=11)
    for gpu in range(2):
        for minute in range(3):
            # Minute 1 had a one-second spike to 100 % in an otherwise idle minute.
            spike = minute == 1
            GpuMinute.objects.create(
                run=run,
                node=node,
                gpu_index=gpu,
                minute=T0 + timedelta(minutes=minute),
                samples=60,
                utilization_gpu_min=0.0,
                utilization_gpu_avg=2.0 if spike else 0.0,
                utilization_gpu_max=100.0 if spike else 0.0,
            )

    series = charts.gpu_series(run, "utilization_gpu")
    figure = charts.utilization_figure(series)

    assert {s.tier for s in series} == {"minute"}
    assert figure is not None
    assert len(figure["data"]) == 2
    trace = figure["data"][0]
    assert trace["y"] == [0.0, 100.0, 0.0]
    assert trace["customdata"] == [0.0, 2.0, 0.0]
    assert "avg" in trace["hovertemplate"]
    assert "per-minute max" in figure["layout"]["title"]["text"]


def test_long_run_without_rollup_rows_falls_back_to_raw(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charts, "RAW_POINTS_PER_SERIES", 3)
    run = make_run(world.vision)
    add_samples(run, first_node(run), gpus=1, seconds=5)
    series = charts.gpu_series(run, "utilization_gpu")
    assert [s.tier for s in series] == ["raw"]
    assert len(series[0].y) == 5


def test_memory_figure_is_in_gigabytes(world: World) -> None:
    run = make_run(world.vision)
    add_samples(run, first_node(run), gpus=1, seconds=2, memory_used_bytes=79.5 * GB)
    figure = charts.memory_figure(charts.gpu_series(run, "memory_used_bytes"))
    assert figure is not None
    assert figure["data"][0]["y"] == [79.5, 79.5]
    assert "GB" in figure["layout"]["yaxis"]["title"]["text"]


def test_retried_runs_name_the_attempt(world: World) -> None:
    run = make_run(world.vision)
    second = Attempt.objects.create(run=run, number=2, status=RunStatus.SUCCEEDED, started_at=T0)
    node = Node.objects.create(attempt=second, index=0)
    add_samples(run, first_node(run), gpus=1, seconds=2)
    add_samples(run, node, gpus=1, seconds=2)
    names = [s.name for s in charts.gpu_series(run, "utilization_gpu")]
    assert names == ["attempt 1 · node 0 · GPU 0", "attempt 2 · node 0 · GPU 0"]


def test_no_samples_or_only_missing_values_give_no_figure(world: World) -> None:
    run = make_run(world.vision)
    assert charts.gpu_series(run, "utilization_gpu") == []
    assert charts.utilization_figure([]) is None
    GpuSample.objects.create(run=run, node=first_node(run), gpu_index=0, ts=T0)  # the GPU reported nothing
    assert charts.memory_figure(charts.gpu_series(run, "memory_used_bytes")) is None


def test_unknown_field_is_refused(world: World) -> None:
    run = make_run(world.vision)
    with pytest.raises(ValueError, match="not a telemetry field"):
        charts.gpu_series(run, "id")


def test_metrics_figure_one_trace_per_key_without_system_metrics(world: World) -> None:
    run = make_run(world.vision)
    for step in range(3):
        MetricPoint.objects.create(run=run, key="loss", step=step, ts=T0, value=1.0 / (step + 1))
        MetricPoint.objects.create(run=run, key="lr", step=step, ts=T0, value=0.001)
        MetricPoint.objects.create(run=run, key="system/gpu_0_utilization_percentage", step=step, ts=T0, value=90)
    MetricPoint.objects.create(run=run, key="loss", step=3, ts=T0, value=None)  # NaN in MLflow

    figure = compare.metrics_overlay([run])

    assert figure is not None
    assert [trace["name"] for trace in figure["data"]] == ["loss", "lr"]
    assert figure["data"][0]["x"] == [0, 1, 2, 3]
    assert figure["data"][0]["y"][-1] is None
    # Each metric on its own axis: a learning rate of 1e-3 is not flattened by the loss.
    assert [trace["yaxis"] for trace in figure["data"]] == ["y", "y2"]
    assert figure["layout"]["yaxis2"]["title"]["text"] == "lr"
    assert figure["layout"]["grid"]["rows"] == 2
    assert figure["data"][0]["mode"] == "lines+markers"  # four points: each one visible
    assert not any(trace["showlegend"] for trace in figure["data"])  # one run: the axes name the metrics
    only_system = make_run(world.vision, "system-only")
    MetricPoint.objects.create(run=only_system, key="system/cpu", step=0, ts=T0, value=1.0)
    assert compare.metrics_overlay([only_system]) is None
    assert compare.metrics_overlay([make_run(world.vision, "nothing")]) is None


def test_timeline_has_a_bar_per_attempt_and_node_coloured_by_status(world: World) -> None:
    run = make_run(world.vision, status=RunStatus.SUCCEEDED)
    first = run.attempts.get()
    first.status, first.exit_code = RunStatus.FAILED, 137
    first.save()
    second = Attempt.objects.create(run=run, number=2, status=RunStatus.RUNNING, started_at=T0 + timedelta(hours=2))
    Node.objects.create(attempt=second, index=0, status=RunStatus.RUNNING)
    attempts = list(run.attempts.prefetch_related("nodes").order_by("number"))

    figure = charts.timeline_figure(attempts, now=T0 + timedelta(hours=3))

    assert figure is not None
    by_status = {trace["name"]: trace for trace in figure["data"]}
    assert set(by_status) == {"Failed", "Succeeded", "Running"}
    assert by_status["Failed"]["y"] == ["attempt 1"]
    assert "exit 137" in by_status["Failed"]["customdata"][0][1]
    assert by_status["Running"]["y"] == ["attempt 2", "attempt 2 · node 0"]
    # A running attempt runs to `now`: one hour, in milliseconds.
    assert by_status["Running"]["x"][0] == 3_600_000
    assert figure["layout"]["yaxis"]["categoryarray"][0] == "attempt 1"
    json.dumps(figure)


def test_timeline_is_empty_until_an_attempt_starts(world: World) -> None:
    run = make_run(world.vision, status=RunStatus.QUEUED, started_at=None, ended_at=None)
    assert charts.timeline_figure(list(run.attempts.prefetch_related("nodes"))) is None


def test_times_are_exact_to_the_millisecond(world: World) -> None:
    # The database turns times into epoch numbers (EpochSeconds); none may drift by rounding.
    run = make_run(world.vision)
    node = first_node(run)
    offsets = [0.0, 0.5, 1.25, 59.999, 3600.0]
    GpuSample.objects.bulk_create(
        GpuSample(run=run, node=node, gpu_index=0, ts=T0 + timedelta(seconds=s), utilization_gpu=1.0) for s in offsets
    )
    series = charts.gpu_series(run, "utilization_gpu", T0, T0 + timedelta(minutes=20))
    # The samples' own times (a silence of a minute or more would add a None point: a gap).
    assert [x for x, y in zip(series[0].x, series[0].y, strict=True) if y is not None] == [
        "2026-11-02 09:00:00",
        "2026-11-02 09:00:00.500000",
        "2026-11-02 09:00:01.250000",
        "2026-11-02 09:00:59.999000",
    ]
