"""The MLflow collector isolates its runs (issue 33), against a real `mlflow server`.

Tags are whatever a training script sets: on 4ab1749 `airboard.attempt=²` (a digit to
`str.isdigit`, not to `int`) ended the pass for every team, and on PostgreSQL one run whose tags
hold U+0000 (jsonb refuses it) did the same.
"""

from __future__ import annotations

from django.db import connection
from mlflow import MlflowClient
from mlflow.entities import Metric

from runs.collectors.mlflow import attempt_from_tag
from runs.models import CollectorState, MetricPoint, MlflowRun, Run
from tests.conftest import World, make_run
from tests.mlflow_server import MlflowServer, free_port, mlflow_server  # noqa: F401 (fixture)
from tests.runs.collectors.test_collect_mlflow import ALICE, T0_MS, collect, experiment  # noqa: F401 (fixture)


def test_odd_tags_skip_only_their_run(world: World, experiment: tuple[MlflowClient, str, str]) -> None:  # noqa: F811
    client, experiment_id, _name = experiment
    make_run(world.vision, "ext-a")
    theirs = make_run(world.nlp, "ext-b")
    odd = {"airboard.run_id": "ext-a", "airboard.attempt": "²", "mlflow.user": ALICE}
    tagged = client.create_run(experiment_id, start_time=T0_MS, tags=odd).info.run_id
    client.log_batch(tagged, metrics=[Metric("loss", 1.5, T0_MS, 0)])
    by_id = client.create_run(experiment_id, start_time=T0_MS + 1).info.run_id
    Run.objects.filter(pk=theirs.pk).update(mlflow_run_id=by_id)
    client.log_batch(by_id, metrics=[Metric("loss", 2.5, T0_MS, 0)])
    nul = client.create_run(experiment_id, start_time=T0_MS + 2, tags={"note": "a\x00b"}).info.run_id

    collect()

    state = CollectorState.objects.get(name="mlflow")
    assert state.last_error == "" and state.last_success_at is not None
    # The ² tag names no attempt: the run is linked, its points stored, the latest attempt assumed.
    assert MetricPoint.objects.filter(run__external_id="ext-a").count() == 1
    assert MetricPoint.objects.filter(run=theirs).count() == 1
    assert f"MLflow run {tagged}: tag airboard.attempt='²' is no attempt number; ignored" in state.last_refusal
    if connection.vendor == "postgresql":
        assert not MlflowRun.objects.filter(mlflow_run_id=nul).exists()
        assert state.refused_total == 2 and f"MLflow run {nul}: DataError" in state.last_refusal
    else:  # SQLite stores U+0000 in JSON text
        assert MlflowRun.objects.filter(mlflow_run_id=nul).exists()
        assert state.refused_total == 1


def test_attempt_tags_are_ascii_numbers_in_range() -> None:
    tags = ("1", "12", "²", "\u0661", "0", "-1", "9" * 40, " 2", None, "10000", "10001")
    assert [attempt_from_tag(v) for v in tags] == [1, 12, None, None, None, None, None, None, None, 10_000, None]
