"""Every GPU task shape of the Jobs API, counted and priced; the workspace's region.

The records are `tests/data/databricks/gpu_task_shapes.json` (see SOURCES.md there): a notebook
task on serverless `GPU_8xH100` as the Databricks docs' AI Runtime scheduled job declares it, a
Python then a notebook task on two shapes, two `ai_runtime_task`s of 8 H100 each, a
`for_each_task` sweep of a serverless GPU notebook, and a job cluster of driver + 4 g4dn.xlarge.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing.engine import run_costs
from billing.models import AcceleratorPrice, InstancePrice
from billing.prices.money import ESTIMATED, LOWER_BOUND
from billing.prices.pricebook import load_default_prices
from runs.choices import RunSource, RunStatus
from runs.collectors import runsource
from runs.collectors.jobs_records import (
    RunKind,
    ai_runtime_compute,
    classify,
    gpu_task_keys,
    hardware_accelerator_gpus,
    split_gpu_tasks,
)
from runs.models import Cluster, CollectorState, Run
from runs.models.instance_types import cluster_gpus
from tests.conftest import StandInWorkspace, World, collect_runs

SHAPES = json.loads((Path(__file__).parents[2] / "data" / "databricks" / "gpu_task_shapes.json").read_text())
NOW = datetime(2026, 11, 3, tzinfo=UTC)


class _Client:
    """The run source's client over the recorded records (`get_run` answers by run id)."""

    def __init__(self, runs: list[dict[str, Any]], answers: dict[str, Any]) -> None:
        self.runs, self.answers = runs, answers

    def list_runs(self, start_time_from_ms: int | None = None) -> list[dict[str, Any]]:
        return json.loads(json.dumps(self.runs))

    def get_runs(self, run_ids: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        return [json.loads(json.dumps(self.answers[str(i)])) for i in run_ids if str(i) in self.answers], []

    def list_clusters(self) -> None:
        return None

    def get_outputs(self, task_run_ids: list[str]) -> tuple[dict[str, Any], list[str]]:
        return {}, []


def collect() -> runsource.CollectResult:
    return runsource.collect_once(_Client(SHAPES["runs"], SHAPES["get_run"]))


@pytest.fixture
def priced(db: None) -> None:
    """The shipped price book, and AWS's on-demand g4dn.xlarge rate ($0.526/h, us-west-2 Linux)."""
    load_default_prices()
    InstancePrice.objects.create(
        instance_type="g4dn.xlarge", region="", effective_from=datetime(2024, 1, 1, tzinfo=UTC), usd_per_hour="0.526"
    )


def test_the_record_readers_see_every_shape() -> None:
    notebook, two_shapes, towers, sweep, t4 = SHAPES["runs"]
    assert ai_runtime_compute(notebook) == ("GPU_8xH100", 8)
    assert gpu_task_keys(two_shapes) == ["train", "eval"] and gpu_task_keys(towers) == ["tower_a", "tower_b"]
    assert ai_runtime_compute(sweep) == ("GPU_1xA10", 1)
    assert [classify(r, {}) for r in (notebook, sweep, t4)] == [RunKind.AI_RUNTIME, RunKind.AI_RUNTIME, RunKind.CLASSIC]
    # One node of the shape; an unknown shape still says its per-node count.
    assert [hardware_accelerator_gpus(t) for t in ("GPU_1xA10", "GPU_8xH100", "GPU_4xA100", "CPU")] == [1, 8, 4, 0]
    assert hardware_accelerator_gpus("GPU_99999999999999999999xH100") == 0  # no node holds that many
    # A job of one GPU task stays one record; one of two is two, each with its own window and state.
    assert split_gpu_tasks(notebook) == [notebook]
    train, evaluate = split_gpu_tasks(two_shapes)
    assert [t["task_key"] for t in train["tasks"]] == ["train"] and evaluate["start_time"] == two_shapes["tasks"][1][
        "start_time"
    ]
    assert evaluate["_job_task"] == {"run_id": "12101", "task_key": "eval", "task_keys": ["train", "eval"]}


def test_every_gpu_task_is_counted_with_its_accelerators_and_window(settings, world: World) -> None:
    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    collect()

    def shape(external_id: str) -> tuple:
        run = Run.objects.get(external_id=external_id)
        return run.source, run.accelerator_type, run.num_accelerators, run.region

    assert shape("12001") == (RunSource.SERVERLESS, "GPU_8xH100", 8, "us-west-2")
    # Each GPU task of a job is a run with its own GPUs and window; the job itself is not one.
    assert shape("12101.train") == (RunSource.SERVERLESS, "GPU_8xH100", 8, "us-west-2")
    assert shape("12101.eval") == (RunSource.SERVERLESS, "GPU_1xH100", 1, "us-west-2")
    assert not Run.objects.filter(external_id__in=["12101", "12201"]).exists()
    evaluate = Run.objects.get(external_id="12101.eval")
    assert (evaluate.started_at, evaluate.ended_at) == (
        datetime(2026, 11, 2, 10, tzinfo=UTC), datetime(2026, 11, 2, 10, 30, tzinfo=UTC),
    )  # fmt: skip
    assert evaluate.experiment_name == "train-then-eval / eval"
    assert evaluate.parameters == {"job_run_id": "12101", "job_task_key": "eval"}
    # Two ai_runtime_tasks of 8 H100: 16 GPUs, each task's experiment kept.
    towers = Run.objects.filter(parameters__job_run_id="12201").order_by("external_id")
    assert [(r.external_id, r.num_accelerators, r.experiment_name) for r in towers] == [
        ("12201.tower_a", 8, "tower-a"), ("12201.tower_b", 8, "tower-b"),
    ]  # fmt: skip
    # The sweep's iterations, each on one A10.
    assert [shape(i) for i in ("12303", "12304")] == [(RunSource.SERVERLESS, "GPU_1xA10", 1, "us-west-2")] * 2
    # The job cluster: driver + 4 workers of a 1-T4 type hold 5 GPUs, as the clusters page counts.
    t4 = Run.objects.get(external_id="12401")
    cluster = Cluster.objects.get(cluster_id="1102-090000-t4job001")
    assert (t4.source, t4.num_accelerators, t4.gpus_per_node, t4.cluster_id) == (RunSource.CLASSIC, 5, 1, cluster.pk)
    assert cluster_gpus(cluster, 4) == 5 and t4.region == "us-west-2"


def test_each_shape_has_a_positive_estimate_that_is_no_lower_bound(settings, world: World, priced: None) -> None:
    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    collect()

    runs = list(Run.objects.all())
    answers = run_costs(runs, now=NOW)
    figures = {run.external_id: answers[run.pk].estimate for run in runs}
    assert set(figures) == {
        "12001", "12101.train", "12101.eval", "12201.tower_a", "12201.tower_b", "12303", "12304", "12401",
    }  # fmt: skip
    for external_id, figure in figures.items():
        assert (external_id, figure.kind, figure.unpriced) == (external_id, ESTIMATED, ())
        assert figure.usd > 0
    hours = {run.external_id: answers[run.pk].breakdown.gpu_hours for run in runs}
    # 8 H100 x 1 h and 1 H100 x 0.5 h; 16 H100 x 2 h; A10 40 + 60 min; 5 T4 x 1 h.
    assert (hours["12101.train"], hours["12101.eval"]) == (Decimal(8), Decimal("0.5"))
    assert hours["12201.tower_a"] + hours["12201.tower_b"] == 32
    assert hours["12303"] + hours["12304"] == Decimal(100) / 60 or abs(
        hours["12303"] + hours["12304"] - Decimal(100) / 60
    ) < Decimal("1e-8")
    assert hours["12401"] == 5
    # $6.88 an H100-hour (shipped book, from 2025-06-01); the T4 cluster at 5 x $0.526 for the hour.
    assert figures["12101.train"].usd == Decimal("55.04") and figures["12401"].usd == Decimal("2.630")


def test_a_multi_task_runs_page_lists_every_gpu_task_and_their_sum(settings, world: World, priced: None) -> None:
    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    collect()
    train = Run.objects.get(external_id="12101.train")

    page = world.client_for(world.alice).get(f"/runs/{train.pk}/").content.decode()

    section = page.split('id="job-tasks"')[1].split("</section>")[0]
    assert 'Job run <span class="mono">12101</span>' in page
    assert (
        "12101.train (this run)" in section
        and "/runs/{}/".format(Run.objects.get(external_id="12101.eval").pk) in section
    )
    assert "<strong>9 GPUs</strong>" in section and "GPU_1xH100" in section
    assert "Lower bound" not in page.split('class="cost-total"')[1].split("</section>")[0]


def test_unset_the_region_is_named_on_the_collectors_page_and_in_the_cost(settings, world: World, priced: None) -> None:
    settings.AIRBOARD_DATABRICKS_REGION = ""
    collect()

    run = Run.objects.get(external_id="12001")
    assert run.region == ""
    figure = run_costs([run], now=NOW)[run.pk].estimate
    assert figure.kind == LOWER_BOUND
    assert figure.unpriced == (
        "no region recorded for this run: set AIRBOARD_DATABRICKS_REGION to the workspace's region",
    )
    page = world.client_for(world.alice).get("/collectors/").content.decode()
    assert 'id="workspace-region"' in page and "AIRBOARD_DATABRICKS_REGION" in page
    assert "8 runs from the Databricks run source name no region" in page

    # Set, the next pass places every stored run there (finished runs are not read again), and the notice goes.
    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    result = collect()
    assert "runs: 8 stored run(s) without a region placed in us-west-2 (AIRBOARD_DATABRICKS_REGION)" in result.lines
    run.refresh_from_db()
    assert (run.region, run.home_region) == ("us-west-2", "us-west-2")
    assert run_costs([run], now=NOW)[run.pk].estimate.kind == ESTIMATED
    assert "AIRBOARD_DATABRICKS_REGION" not in world.client_for(world.alice).get("/collectors/").content.decode()
    # Once per value of the setting: the next pass does not scan the stored runs again.
    assert not any("placed in" in line for line in collect().lines)


def test_a_run_the_source_places_in_another_region_keeps_it(settings, world: World) -> None:
    settings.AIRBOARD_DATABRICKS_REGION = "us-east-1"
    t4 = json.loads(json.dumps(SHAPES["runs"][4]))
    t4["job_clusters"][0]["new_cluster"]["aws_attributes"]["zone_id"] = "us-west-2b"

    runsource.collect_once(_Client([t4], {}))

    run = Run.objects.get(external_id="12401")
    # Its cluster's zone says us-west-2: it ran there, away from the workspace's region.
    assert (run.region, run.home_region, run.is_cross_region) == ("us-west-2", "us-east-1", True)


def test_a_running_multi_task_job_is_tracked_by_its_own_run_id(world: World) -> None:
    job = json.loads(json.dumps(SHAPES["runs"][1]))
    job["state"] = {"life_cycle_state": "RUNNING", "state_message": ""}
    job["tasks"][1]["state"] = {"life_cycle_state": "RUNNING", "state_message": ""}
    job["tasks"][1]["end_time"] = 0

    runsource.collect_once(_Client([job], {}))

    # `get-run` of the job answers both tasks again; a task's compound id is no Databricks run id.
    assert CollectorState.objects.get(name="runs").cursor["active"] == {"12101": 12101}
    assert Run.objects.get(external_id="12101.eval").status == RunStatus.RUNNING
    assert Run.objects.get(external_id="12101.train").status == RunStatus.SUCCEEDED
    # The job is settled for `air list` only once every GPU task run is stored finished.
    assert runsource.stored_finished(["12101"]) == set()


def test_the_cli_fixture_runs_are_priced_in_the_workspace_region(
    settings, world: World, workspace: StandInWorkspace, priced: None
) -> None:
    """The Databricks CLI's own fixture runs (`air list`'s ai_runtime_task, `air get`'s legacy
    gen_ai_compute_task) through the stand-in CLI: placed in the workspace's region, priced."""
    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    # The `air get` fixture run is from 2023-11; the shipped book starts 2024-01-01.
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_1xA10", region="us-west-2", effective_from=datetime(2023, 1, 1, tzinfo=UTC),
        usd_per_hour="1.00",
    )  # fmt: skip
    collect_runs()

    runs = list(Run.objects.filter(external_id__in=["123", "334747067049496", "1001"]))
    answers = run_costs(runs, now=NOW)
    assert {r.external_id: (r.region, answers[r.pk].estimate.kind) for r in runs} == {
        "123": ("us-west-2", ESTIMATED), "334747067049496": ("us-west-2", ESTIMATED), "1001": ("us-west-2", ESTIMATED),
    }  # fmt: skip
    assert all(answers[r.pk].estimate.usd > 0 for r in runs)


def test_every_shape_shows_its_estimate_on_its_run_page(settings, world: World, priced: None) -> None:
    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    collect()
    client = world.client_for(world.alice)

    for run in Run.objects.all():
        page = client.get(f"/runs/{run.pk}/").content.decode()
        cost = page.split('class="cost-total"')[1].split("</section>")[0]
        assert "Lower bound" not in cost and not cost.lstrip(">").startswith("$0.00"), run.external_id
    # The job cluster's run shows the cluster's 5 GPUs, as the clusters page counts them.
    t4 = Run.objects.get(external_id="12401")
    assert "<dt>Accelerators</dt><dd>5 <span" in client.get(f"/runs/{t4.pk}/").content.decode()


def test_every_shape_tells_its_estimate_in_the_api(settings, world: World, priced: None) -> None:
    """The runs API's `cost` is the run page's figure: positive and no lower bound for every shape."""
    from dashboard.models import ApiKeyRole

    settings.AIRBOARD_DATABRICKS_REGION = "us-west-2"
    collect()
    api = world.api(world.vision, ApiKeyRole.READ)
    runs = Run.objects.filter(team=world.vision)
    assert runs.exists()
    for run in runs:
        cost = api.get(f"/api/v1/runs/{run.external_id}?source={run.source}").json()["cost"]
        assert cost["kind"] == ESTIMATED and Decimal(str(cost["usd"])) > 0, (run.external_id, cost)
        assert cost["kind"] != LOWER_BOUND and cost["reasons"] == [], (run.external_id, cost)
