"""Logs of a serverless GPU run: the AI Runtime logs endpoint and `air logs -o json`, per node and attempt.

The stand-in CLI answers the shapes of databricks/cli's acceptance test `logs` (records newest
first, pages, `{"type", "ts", "node", "line"}` lines with ALERT repeats); see
tests/data/databricks/SOURCES.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import time_machine
from mlflow import MlflowClient

from runs.choices import RunStatus
from runs.collectors.air_logs import json_lines_text, mlflow_node_log, records_text
from runs.collectors.mlflow_client import MlflowSource
from runs.models import LogChunk, Run
from tests.conftest import DATABRICKS, StandInWorkspace, World, collect_runs, make_run
from tests.runs.collectors.test_collect_logs import collect as collect_logs
from tests.runs.collectors.test_collect_logs import stored

# Run 6001's second try is running at 09:00; in the "finished" phase it ended at 09:30.
NOW = datetime(2026, 11, 2, 9, 40, tzinfo=UTC)
ENDPOINT = (
    f"{DATABRICKS} api get '/api/2.0/ai-training/workflows/by-run-id/{{run_id}}/logs"
    "?ref.attempt_number={retry}&filter.node_index={node}&page_size=2&page_token={page_token}'"
)
AIR_LOGS = f"{DATABRICKS} experimental air logs {{run_id}} --retry {{retry}} --node {{node}} -o json"


@pytest.fixture
def workspace(workspace: StandInWorkspace, settings) -> StandInWorkspace:
    """The shared stand-in workspace (tests/conftest.py) without clusters or a log directory."""
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = ""
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    return workspace


@pytest.mark.parametrize("command", [ENDPOINT, AIR_LOGS], ids=["logs-endpoint", "air-logs-json"])
def test_each_node_and_attempt_gets_its_log_in_time_order_incrementally(
    settings, world: World, workspace: StandInWorkspace, command: str
) -> None:
    settings.AIRBOARD_LOG_SOURCE_COMMAND = command
    with time_machine.travel(NOW, tick=False):
        collect_runs()
        run = Run.objects.get(external_id="6001")
        collect_logs()

        # The failed first try: the runtime's own lines are lines of node 0's log.
        assert stored(run, attempt=1, node=0) == (
            "[rank0] loading checkpoint shards: 100%\n"
            "[MLflow Logger][Warning] No new logs have been emitted in the last 300 seconds\n"
            "ERROR: Script failed with exit code 1 after 600s\n"
        )
        assert stored(run, attempt=1, node=1) == (
            "[rank8] loading checkpoint shards: 100%\n"
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
        )  # ALERT repeats are not stored twice
        assert stored(run, attempt=2, node=0) == "step 1 loss=2.31\nstep 2 loss=2.05\nstep 3 loss=1.88\n"
        assert stored(run, attempt=2, node=1) == "step 1 loss=2.31\n"
        chunks = LogChunk.objects.count()

        collect_logs()
        assert LogChunk.objects.count() == chunks  # nothing new, nothing stored

        workspace.finish()
        collect_runs()
        collect_logs()
        assert stored(run, attempt=2, node=0).endswith("step 3 loss=1.88\nstep 4 loss=1.71\n")
        assert LogChunk.objects.count() == chunks + 1


def test_the_endpoint_is_read_page_by_page(settings, world: World, workspace: StandInWorkspace) -> None:
    settings.AIRBOARD_LOG_SOURCE_COMMAND = ENDPOINT
    with time_machine.travel(NOW, tick=False):
        collect_runs()
        collect_logs()

    pages = [call for call in workspace.calls() if "by-run-id/6001/" in call and "attempt_number=0" in call]
    # Node 0 of the first try has 3 records: two pages of 2; node 1 has 2: one page.
    assert len(pages) == 3 and any("page_token=2" in call for call in pages)


def test_an_air_error_envelope_is_the_nodes_error(settings, world: World, workspace: StandInWorkspace) -> None:
    settings.AIRBOARD_LOG_SOURCE_COMMAND = f"{DATABRICKS} experimental air get notanumber -o json"
    with time_machine.travel(NOW, tick=False):
        collect_runs()
        with pytest.raises(Exception, match="every log fetch failed") as excinfo:
            collect_logs()
    assert "INVALID_ARGS" in str(excinfo.value)


def test_the_clis_fixture_records_in_time_order() -> None:
    """acceptance/experimental/air/logs/test.toml: three records, newest first; printed oldest first."""
    records = [
        {"time_unix_nano": 1700000003000000000, "body": "CUDA out of memory", "node_index": 0},
        {"time_unix_nano": 1700000002000000000, "body": "step 2", "node_index": 0},
        {"time_unix_nano": 1700000001000000000, "body": "step 1", "node_index": 0},
    ]
    assert records_text(records, 0) == "step 1\nstep 2\nCUDA out of memory\n"
    assert records_text(records, 1) == ""
    output = (
        '{"type":"LOG","ts":"2023-11-14T22:13:21Z","node":0,"line":"step 1"}\n'
        '{"type":"ALERT","ts":"2023-11-14T22:13:23Z","node":0,"line":"CUDA out of memory"}\n'
        '{"type":"LOG","ts":"2023-11-14T22:13:23Z","node":0,"line":"CUDA out of memory"}\n'
    )
    assert json_lines_text(output, 0) == "step 1\nCUDA out of memory\n"
    assert json_lines_text('{"run_id": 1}\n', 0) is None


def mlflow_store(tmp_path: Path) -> tuple[str, MlflowClient]:
    """A real MLflow tracking store (SQLite) in tmp_path."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return uri, MlflowClient(tracking_uri=uri)


def experiment(client: MlflowClient, tmp_path: Path, name: str) -> str:
    return client.create_experiment(name, artifact_location=(tmp_path / "artifacts" / name).as_uri())


def test_without_the_logs_endpoint_the_mlflow_artifacts_are_read(
    settings, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layout `air logs` falls back to: logs/attempt_<n>/node_<m>/logs-<i>.chunk.txt, by index."""
    uri, client = mlflow_store(tmp_path)
    mlflow_run = client.create_run(experiment(client, tmp_path, "qwen-sft")).info.run_id
    for index, text in ((10, "step 3\n"), (0, "step 1\n"), (2, "step 2\n")):
        client.log_text(mlflow_run, text, f"logs/attempt_0/node_0/logs-{index}.chunk.txt")
    client.log_text(mlflow_run, "other node\n", "logs/attempt_0/node_1/logs-0.chunk.txt")
    run = make_run(world.vision, "6001", status=RunStatus.RUNNING, ended_at=None)
    run.attempts.update(mlflow_run_id=mlflow_run)
    monkeypatch.setenv("FAKE_DATABRICKS_LOGS", "disabled")
    settings.AIRBOARD_MLFLOW_TRACKING_URI = uri
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    settings.AIRBOARD_LOG_SOURCE_COMMAND = ENDPOINT

    output = collect_logs()

    assert "read from MLflow" in output and "training log streaming is not enabled" in output
    assert stored(run) == "step 1\nstep 2\nstep 3\n"


def test_the_older_artifact_layout_and_no_logs_at_all(tmp_path: Path) -> None:
    uri, client = mlflow_store(tmp_path)
    old = client.create_run(experiment(client, tmp_path, "old")).info.run_id
    client.log_text(old, "from the old layout\n", "logs/node_0/logs-0.chunk.txt")
    empty = client.create_run(experiment(client, tmp_path, "empty")).info.run_id

    source = MlflowSource(uri)
    assert mlflow_node_log(source, old, 1, 0) == "from the old layout\n"
    assert mlflow_node_log(source, empty, 1, 0) is None
