"""Another team's runs never show, and are never written, through something shared.

Tried as a member of team nlp (charlie) against team vision's runs: a shared policy, an MLflow run
tagged with another team's run id.
"""

from __future__ import annotations

import csv
import io
import uuid

import pytest
from django.core.management import call_command
from django.utils import timezone
from mlflow import MlflowClient
from mlflow.entities import Metric

from billing.choices import EnforcementKind, EnforcementOutcome
from billing.models import PolicyAction, UsagePolicy
from runs.choices import RunOrigin
from runs.models import GpuSample, MetricPoint
from tests.conftest import T0, World, make_run
from tests.mlflow_server import MlflowServer, mlflow_server  # noqa: F401 (fixture)


def test_a_shared_policy_does_not_show_another_teams_runs(world: World) -> None:
    """A budget shared by vision and nlp: nlp's members see the policy, not vision's runs it acted on."""
    policy = UsagePolicy.objects.create(name="shared-gpu-budget", budget_usd="1000")
    policy.teams.add(world.vision, world.nlp)
    secret_run = make_run(world.vision, "vision-secret-run-77")
    PolicyAction.objects.create(
        policy=policy, run=secret_run, kind=EnforcementKind.BUDGET_CANCEL, outcome=EnforcementOutcome.DONE,
        method="command", output_tail="cancelled vision-secret-run-77", at=timezone.now(),
    )  # fmt: skip
    own_run = make_run(world.nlp, "nlp-run-5")
    PolicyAction.objects.create(
        policy=policy, run=own_run, kind=EnforcementKind.BUDGET_CANCEL, outcome=EnforcementOutcome.DONE,
        method="command", output_tail="cancelled nlp-run-5", at=timezone.now(),
    )  # fmt: skip
    charlie = world.client_for(world.charlie)
    page = charlie.get(f"/costs/policies/{policy.pk}/").content.decode()
    assert "nlp-run-5" in page
    assert "vision-secret-run-77" not in page
    text = charlie.get(f"/costs/policies/{policy.pk}/", {"format": "csv", "table": "actions"}).content.decode()
    runs = [row["run"] for row in csv.DictReader(io.StringIO(text))]
    assert runs == ["nlp-run-5"]
    # vision's own members still see it.
    alice_page = world.client_for(world.alice).get(f"/costs/policies/{policy.pk}/").content.decode()
    assert "vision-secret-run-77" in alice_page


@pytest.fixture
def experiment(mlflow_server: MlflowServer, settings) -> tuple[MlflowClient, str]:  # noqa: F811
    """A fresh experiment on a real `mlflow server`, and the MLflow collector pointed at it."""
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    name = f"exp-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name)
    settings.AIRBOARD_MLFLOW_TRACKING_URI = mlflow_server.uri
    settings.AIRBOARD_MLFLOW_EXPERIMENTS = [name]
    return client, experiment_id


def test_another_teams_mlflow_run_tagged_with_our_run_id_writes_nothing_into_it(
    world: World, experiment: tuple[MlflowClient, str]
) -> None:
    """charlie (nlp) tags an MLflow run with vision's run id and logs idle GPUs and network traffic:
    vision's run (the run source collector's) would get his metrics, GPU samples and so its idle cost."""
    client, experiment_id = experiment
    vision_run = make_run(world.vision, "1001", origin=RunOrigin.COLLECTOR)
    t0_ms = int(T0.timestamp() * 1000)
    tags = {"airboard.run_id": "1001", "mlflow.user": "charlie@example.com"}
    hostile = client.create_run(experiment_id, start_time=t0_ms, tags=tags).info.run_id
    idle_gpu = [Metric("system/gpu_0_utilization_percentage", 0.0, t0_ms + i * 10_000, i) for i in range(30)]
    client.log_batch(hostile, metrics=[*idle_gpu, Metric("loss", 99.0, t0_ms, 0)])
    call_command("collect", "mlflow", "--once", stdout=io.StringIO())
    assert not MetricPoint.objects.filter(run=vision_run).exists()
    assert not GpuSample.objects.filter(run=vision_run).exists()
