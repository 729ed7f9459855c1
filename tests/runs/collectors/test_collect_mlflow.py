"""The MLflow collector against a real `mlflow server`: incremental reads, linking, system metrics."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from runs.choices import TelemetrySource
from runs.collectors import mlflow as collector
from runs.collectors.mlflow_client import MlflowSource
from runs.models import Attempt, CollectorState, GpuSample, MetricPoint, MlflowRun, Node, Run
from tests.conftest import T0, World, make_run, start_worker, stop_worker, wait_for
from tests.mlflow_server import MlflowServer, free_port, mlflow_server  # noqa: F401 (fixture)

T0_MS = int(T0.timestamp() * 1000)
# A tag link holds only for an MLflow run logged by a member of the run's team (SECURITY.md);
# MLflow's fluent API sets mlflow.user itself, the bare client here does not.
ALICE = "alice@example.com"
# A queue of its own, so a session-wide worker elsewhere in the suite never takes the task.
QUEUE = "collect-mlflow-test"


def system_metrics(ts_ms: int, step: int, gpu: int, prefix: str = "system/", util: float = 87.5) -> list[Metric]:
    """One publish of MLflow's GPU monitor for one GPU, with the real metric names."""
    values = {
        "utilization_percentage": util,
        "memory_usage_megabytes": 40_000.5,
        "memory_usage_percentage": 50.0,
        "power_usage_watts": 350.0,
        "power_usage_percentage": 50.0,
    }
    return [Metric(f"{prefix}gpu_{gpu}_{name}", value, ts_ms, step) for name, value in values.items()]


def series(key: str, steps: range, start_ms: int = T0_MS) -> list[Metric]:
    return [Metric(key, float(step) / 10, start_ms + step * 1000, step) for step in steps]


def collect() -> str:
    out = StringIO()
    call_command("collect", "mlflow", "--once", stdout=out)
    return out.getvalue()


@pytest.fixture
def experiment(mlflow_server: MlflowServer, settings) -> tuple[MlflowClient, str, str]:  # noqa: F811
    """A fresh experiment per test, and the collector pointed at it (other tests' runs stay out)."""
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    name = f"exp-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name)
    settings.AIRBOARD_MLFLOW_TRACKING_URI = mlflow_server.uri
    settings.AIRBOARD_MLFLOW_EXPERIMENTS = [name]
    return client, experiment_id, name


@pytest.fixture
def history_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """(run id, key, points returned) for every history the adapter is asked for."""
    reads: list[tuple[str, str, int]] = []
    original = MlflowSource.metric_history_since

    def spy(self, run_id, key, cursor, latest=None):  # type: ignore[no-untyped-def]
        points, new_cursor = original(self, run_id, key, cursor, latest)
        reads.append((run_id, key, len(points)))
        return points, new_cursor

    monkeypatch.setattr(MlflowSource, "metric_history_since", spy)
    return reads


def test_not_configured_touches_nothing(db: None, settings) -> None:
    settings.AIRBOARD_MLFLOW_TRACKING_URI = ""
    result = collector.collect_once()
    assert result.lines == [collector.NOT_CONFIGURED]
    assert result.items == 0
    assert not CollectorState.objects.exists()


def test_a_pass_stores_links_and_converts_then_reads_only_new_points(
    world: World, experiment: tuple[MlflowClient, str, str], history_reads: list[tuple[str, str, int]]
) -> None:
    client, experiment_id, name = experiment
    tagged_run = make_run(world.vision, "ext-tagged")
    nvml_run = make_run(world.vision, "ext-nvml")
    nvml_node = nvml_run.attempts.get().nodes.get()
    GpuSample.objects.create(run=nvml_run, node=nvml_node, gpu_index=0, ts=T0, source=TelemetrySource.NVML)

    # Linked by tag; `airboard.attempt` names the try (else the latest attempt is assumed).
    tags = {"airboard.run_id": "ext-tagged", "airboard.attempt": "1", "mlflow.user": ALICE}
    tagged = client.create_run(experiment_id, start_time=T0_MS, tags=tags).info.run_id
    client.log_batch(
        tagged,
        metrics=[
            *series("loss", range(5)),
            Metric("loss_nan", math.nan, T0_MS, 0),
            *system_metrics(T0_MS, 0, gpu=0),
            *system_metrics(T0_MS, 0, gpu=1),
            *system_metrics(T0_MS + 10_000, 1, gpu=0),
            *system_metrics(T0_MS + 10_000, 1, gpu=1),
            *system_metrics(T0_MS, 0, gpu=0, prefix="system/node_1/"),
            Metric("system/cpu_utilization_percentage", 12.5, T0_MS, 0),
            Metric("system/cpu_utilization_percentage", 14.0, T0_MS + 10_000, 1),
        ],
        params=[Param("lr", "0.001")],
    )
    # Linked by Run.mlflow_run_id; its node agent sent NVML data, so MLflow GPU metrics are dropped.
    by_id = client.create_run(experiment_id, start_time=T0_MS + 1).info.run_id
    Run.objects.filter(pk=nvml_run.pk).update(mlflow_run_id=by_id)
    client.log_batch(by_id, metrics=[*series("accuracy", range(3)), *system_metrics(T0_MS, 0, gpu=0)])
    # A retry: attempt 2 of the tagged run has its own MLflow run.
    retry = client.create_run(experiment_id, start_time=T0_MS + 2).info.run_id
    Attempt.objects.create(run=tagged_run, number=2, mlflow_run_id=retry)
    client.log_batch(retry, metrics=system_metrics(T0_MS + 60_000, 0, gpu=3))
    # Nobody claims this one (its tag names no Airboard run); it has already finished.
    loose = client.create_run(experiment_id, start_time=T0_MS + 3, tags={"airboard.run_id": "nope"}).info.run_id
    client.log_batch(loose, metrics=series("loss", range(4)))
    client.set_terminated(loose)

    output = collect()

    assert "4 run(s) read (3 linked, 1 unlinked)" in output
    loss = MetricPoint.objects.filter(run=tagged_run, key="loss")
    assert sorted(loss.values_list("step", "value")) == [(s, s / 10) for s in range(5)]
    assert loss.get(step=2).ts == T0.replace(second=2)
    assert MetricPoint.objects.get(run=tagged_run, key="loss_nan").value is None
    cpu = MetricPoint.objects.filter(run=tagged_run, key="system/cpu_utilization_percentage")
    assert sorted(cpu.values_list("value", flat=True)) == [12.5, 14.0]
    assert not MetricPoint.objects.filter(key__contains="gpu_").exists()

    mlflow_samples = GpuSample.objects.filter(run=tagged_run, source=TelemetrySource.MLFLOW)
    assert mlflow_samples.count() == 2 * 2 + 1 + 1  # node 0 GPUs 0-1 at two times, node 1, the retry
    sample = mlflow_samples.get(node__index=0, node__attempt__number=1, gpu_index=0, ts=T0)
    assert sample.utilization_gpu == 87.5
    assert sample.memory_used_bytes == 40_000_500_000  # decimal megabytes
    assert sample.memory_total_bytes == 80_001_000_000
    assert (sample.power_watts, sample.power_limit_watts) == (350.0, 700.0)
    assert mlflow_samples.filter(node__index=1, node__attempt__number=1, gpu_index=0).count() == 1
    assert mlflow_samples.get(node__attempt__number=2).gpu_index == 3

    assert MetricPoint.objects.filter(run=nvml_run, key="accuracy").count() == 3
    assert not GpuSample.objects.filter(run=nvml_run, source=TelemetrySource.MLFLOW).exists()

    stored = MlflowRun.objects.get(mlflow_run_id=tagged)
    assert (stored.run, stored.experiment_name, stored.params) == (tagged_run, name, {"lr": "0.001"})
    assert stored.tags["airboard.run_id"] == "ext-tagged"
    assert stored.metric_cursors["loss"]["n"] == 5
    assert MlflowRun.objects.get(mlflow_run_id=retry).run == tagged_run
    unlinked = MlflowRun.objects.get(mlflow_run_id=loose)
    assert (unlinked.run, unlinked.metric_cursors, unlinked.status) == (None, {}, "FINISHED")
    assert loose not in {run_id for run_id, _, _ in history_reads}
    state = CollectorState.objects.get(name="mlflow")
    assert state.cursor["start_time_ms"] == T0_MS + 3
    assert state.last_success_at is not None
    assert state.items_last_run == 5 + 1 + 2 + 6 + 3

    # Second pass: three more loss points. Only `loss` is asked for, and only the new points come back.
    client.log_batch(tagged, metrics=series("loss", range(5, 8)))
    history_reads.clear()
    collect()

    assert history_reads == [(tagged, "loss", 3)]
    assert loss.count() == 8
    assert loss.values("step").distinct().count() == 8
    assert MlflowRun.objects.get(mlflow_run_id=tagged).metric_cursors["loss"]["n"] == 8
    assert CollectorState.objects.get(name="mlflow").items_last_run == 3

    # Third pass: nothing new, nothing read.
    history_reads.clear()
    collect()
    assert history_reads == []
    assert loss.count() == 8

    # An Airboard run now claims the finished, unlinked run: its whole history is read once.
    claimed = make_run(world.vision, "ext-late", mlflow_run_id=loose)
    collect()
    assert history_reads == [(loose, "loss", 4)]
    assert MlflowRun.objects.get(mlflow_run_id=loose).run == claimed
    assert MetricPoint.objects.filter(run=claimed, key="loss").count() == 4


def test_a_point_logged_with_an_older_timestamp_forces_one_full_read(
    world: World, experiment: tuple[MlflowClient, str, str], history_reads: list[tuple[str, str, int]]
) -> None:
    client, experiment_id, _ = experiment
    run = make_run(world.vision, "ext-late-point")
    mlflow_run_id = client.create_run(
        experiment_id, tags={"airboard.run_id": "ext-late-point", "mlflow.user": ALICE}
    ).info.run_id
    client.log_batch(mlflow_run_id, metrics=series("loss", range(3)))
    collect()
    # Step 3 stamped before all the others: it sorts first in the history, so the resume
    # anchor moves and the adapter reads the history again instead of skipping the point.
    client.log_batch(mlflow_run_id, metrics=[Metric("loss", 9.0, T0_MS - 5_000, 3)])
    history_reads.clear()
    collect()

    assert history_reads == [(mlflow_run_id, "loss", 4)]
    points = MetricPoint.objects.filter(run=run, key="loss")
    assert sorted(points.values_list("step", flat=True)) == [0, 1, 2, 3]
    assert MlflowRun.objects.get(mlflow_run_id=mlflow_run_id).metric_cursors["loss"]["n"] == 4


def test_named_node_ids_are_distinct_nodes_and_keep_them_across_passes(
    world: World, experiment: tuple[MlflowClient, str, str]
) -> None:
    """`system/<node id>/...` with ids other than node_<n> (MLFLOW_SYSTEM_METRICS_NODE_ID=worker-a)."""
    client, experiment_id, _ = experiment
    run = make_run(world.vision, "ext-multi")  # its node 0 is the agent's host 10.0.0.1
    mlflow_run_id = client.create_run(
        experiment_id, tags={"airboard.run_id": "ext-multi", "mlflow.user": ALICE}
    ).info.run_id
    client.log_batch(
        mlflow_run_id,
        metrics=[
            *system_metrics(T0_MS, 0, gpu=0, prefix="system/", util=10.0),
            *system_metrics(T0_MS, 0, gpu=0, prefix="system/worker-b/", util=30.0),
            *system_metrics(T0_MS, 0, gpu=0, prefix="system/worker-a/", util=20.0),
        ],
    )
    collect()
    samples = GpuSample.objects.filter(run=run, source=TelemetrySource.MLFLOW)
    by_util = dict(samples.values_list("utilization_gpu", "node__index"))
    assert by_util == {10.0: 0, 20.0: 1, 30.0: 2}  # before: all three on node 0, overwriting each other
    assert dict(samples.values_list("node__host", "node__index")) == {"10.0.0.1": 0, "worker-a": 1, "worker-b": 2}

    # Next pass: a new id that sorts first joins; the known ones stay on their nodes.
    client.log_batch(
        mlflow_run_id,
        metrics=[
            *system_metrics(T0_MS + 10_000, 1, gpu=0, prefix="system/worker-a/", util=21.0),
            *system_metrics(T0_MS + 10_000, 1, gpu=0, prefix="system/worker-0/", util=40.0),
            *system_metrics(T0_MS + 10_000, 1, gpu=0, prefix="system/worker-b/", util=31.0),
        ],
    )
    collect()
    later = dict(samples.filter(ts=T0 + timedelta(seconds=10)).values_list("utilization_gpu", "node__index"))
    assert later == {21.0: 1, 31.0: 2, 40.0: 3}
    assert Node.objects.filter(attempt__run=run).count() == 4


def test_parse_gpu_key_keeps_any_node_id() -> None:
    assert collector.parse_gpu_key("system/gpu_0_utilization_percentage") == collector.GpuKey(
        "", 0, "utilization_percentage"
    )
    key = collector.parse_gpu_key("system/ip-10-0-1-17.ec2.internal/gpu_3_power_usage_watts")
    assert key == collector.GpuKey("ip-10-0-1-17.ec2.internal", 3, "power_usage_watts")
    assert collector.parse_gpu_key("system/cpu_utilization_percentage") is None


def test_an_unreachable_server_fails_the_pass_with_a_clear_error(db: None, settings) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    settings.AIRBOARD_MLFLOW_TRACKING_URI = uri

    with pytest.raises(CommandError) as raised:
        collect()

    assert raised.value.returncode == 1
    assert f"mlflow collector failed: MLflow tracking server {uri} is unreachable" in str(raised.value)
    state = CollectorState.objects.get(name="mlflow")
    assert state.last_error.startswith("CollectorError: MLflow tracking server")
    assert state.last_success_at is None


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_collector_runs_in_a_real_worker(
    world: World,
    experiment: tuple[MlflowClient, str, str],
    tmp_path: Path,
    settings,
) -> None:
    from runs.tasks import collect_mlflow

    client, experiment_id, name = experiment
    run = make_run(world.vision, "ext-worker")
    mlflow_run_id = client.create_run(
        experiment_id, tags={"airboard.run_id": "ext-worker", "mlflow.user": ALICE}
    ).info.run_id
    client.log_batch(mlflow_run_id, metrics=[*series("loss", range(6)), *system_metrics(T0_MS, 0, gpu=0)])

    worker = start_worker(
        tmp_path,
        queues=QUEUE,
        extra_env={"MLFLOW_TRACKING_URI": settings.AIRBOARD_MLFLOW_TRACKING_URI, "AIRBOARD_MLFLOW_EXPERIMENTS": name},
    )
    try:
        collect_mlflow.apply_async(queue=QUEUE)
        assert wait_for(lambda: MetricPoint.objects.filter(run=run).count() == 6, timeout=60), worker.log()
        assert wait_for(lambda: GpuSample.objects.filter(run=run, source="mlflow").count() == 1), worker.log()
        assert wait_for(lambda: CollectorState.objects.filter(name="mlflow", last_success_at__isnull=False).exists())
    finally:
        stop_worker(worker)


def test_a_run_with_dcgm_exporter_samples_keeps_mlflow_gpu_metrics_out(
    world: World, experiment: tuple[MlflowClient, str, str]
) -> None:
    """The Prometheus source's samples are as fine as the agent's: MLflow's GPU metrics stay the fallback."""
    client, experiment_id, _ = experiment
    run = make_run(world.vision, "ext-prometheus")
    GpuSample.objects.create(run=run, node=run.attempts.get().nodes.get(), gpu_index=0, ts=T0,
                             source=TelemetrySource.PROMETHEUS)  # fmt: skip
    mlflow_id = client.create_run(experiment_id, start_time=T0_MS).info.run_id
    Run.objects.filter(pk=run.pk).update(mlflow_run_id=mlflow_id)
    client.log_batch(mlflow_id, metrics=[*series("loss", range(2)), *system_metrics(T0_MS, 0, gpu=0)])

    collect()

    assert MetricPoint.objects.filter(run=run, key="loss").count() == 2
    assert not GpuSample.objects.filter(run=run, source=TelemetrySource.MLFLOW).exists()
