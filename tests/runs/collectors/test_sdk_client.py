"""The collectors' databricks-sdk path (`SdkClient`), against a local stand-in of the workspace REST API.

With DATABRICKS_HOST and DATABRICKS_TOKEN set and no AIRBOARD_RUN_SOURCE_COMMAND, the collectors
read runs through databricks-sdk's WorkspaceClient (installed with MLflow). The stand-in answers
the endpoints the SDK calls (`/api/2.2/jobs/runs/list` in pages of `next_page_token`,
`/api/2.2/jobs/runs/get`, `/api/2.2/jobs/runs/get-output`, `/api/2.1/clusters/list`) with the
records of tests/data/databricks (the CLI prints the API's records), so what is checked is that
the SDK's typed round trip (`Run.from_dict(...).as_dict()`) leaves our readers seeing what the
CLI path sees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from runs.collectors import jobs_records, run_records
from runs.collectors.databricks_cli import SdkClient
from tests.conftest import TESTS

DATA = TESTS / "data" / "databricks"
RUNS: list[dict[str, Any]] = json.loads((DATA / "list_runs_finished.json").read_text())
CLUSTERS: list[dict[str, Any]] = json.loads((DATA / "clusters_list.json").read_text())
OUTPUTS: dict[str, dict[str, Any]] = json.loads((DATA / "runs_get_output.json").read_text())
TOKEN = "dapi0123456789abcdef0123456789abcdef"


class _Workspace(BaseHTTPRequestHandler):
    """GET endpoints of a workspace, answered from the fixtures; anything else is a 404 as Databricks writes it."""

    requests: list[str] = []

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        type(self).requests.append(url.path)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(401, {"error_code": "UNAUTHENTICATED", "message": "Invalid access token."})
        if url.path == "/api/2.2/jobs/runs/list":
            if query.get("page_token") == "page-2":
                return self._send(200, {"runs": RUNS[5:], "has_more": False})
            return self._send(200, {"runs": RUNS[:5], "has_more": True, "next_page_token": "page-2"})
        if url.path == "/api/2.2/jobs/runs/get":
            found = [run for run in RUNS if str(run["run_id"]) == query.get("run_id")]
            if found:
                return self._send(200, found[0])
            return self._send(
                400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Run {query.get('run_id')} does not exist."}
            )
        if url.path == "/api/2.2/jobs/runs/get-output" and query.get("run_id") in OUTPUTS:
            return self._send(200, OUTPUTS[query["run_id"]])
        if url.path == "/api/2.1/clusters/list":
            return self._send(200, {"clusters": CLUSTERS})
        return self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": f"No API found for 'GET {url.path}'"})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def client() -> Iterator[SdkClient]:
    _Workspace.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Workspace)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SdkClient(f"http://127.0.0.1:{server.server_port}", TOKEN)
    finally:
        server.shutdown()
        server.server_close()


def reading(record: dict[str, Any]) -> dict[str, Any]:
    """What the collectors take from one run record."""
    return {
        "status": run_records.map_status(record),
        "kind": jobs_records.classify(record, {}),
        "workload": run_records.workload_fields(record),
        "attempts": [(t.get("run_id"), t.get("attempt_number")) for t in jobs_records.task_attempts(record)],
        "clusters": jobs_records.cluster_ids_of(record),
        "window": (record.get("start_time"), record.get("end_time")),
        "creator": record.get("creator_user_name"),
    }


def test_listed_runs_read_as_the_cli_paths_do(client: SdkClient) -> None:
    listed = client.list_runs()
    assert _Workspace.requests.count("/api/2.2/jobs/runs/list") == 2  # both pages
    assert [run["run_id"] for run in listed] == [run["run_id"] for run in RUNS]
    assert [reading(run) for run in listed] == [reading(run) for run in RUNS]
    kinds = {reading(run)["kind"] for run in listed}
    assert {jobs_records.RunKind.AI_RUNTIME, jobs_records.RunKind.CLASSIC} <= kinds


def test_runs_fetched_by_id_and_a_missing_one_named(client: SdkClient) -> None:
    found, problems = client.get_runs([RUNS[0]["run_id"], 999_999])
    assert [reading(run) for run in found] == [reading(RUNS[0])]
    assert problems == ["run 999999: Run 999999 does not exist."]


def test_clusters_read_as_the_cli_paths_do(client: SdkClient) -> None:
    clusters = client.list_clusters()
    assert clusters is not None
    assert [run_records.cluster_fields(c) | {"raw": None} for c in clusters] == [
        run_records.cluster_fields(c) | {"raw": None} for c in CLUSTERS
    ]


def test_task_outputs_carry_the_mlflow_run(client: SdkClient) -> None:
    task_run_id = next(iter(OUTPUTS))
    found, problems = client.get_outputs([task_run_id, "424242"])
    assert found[task_run_id]["ai_runtime_task_output"] == OUTPUTS[task_run_id]["ai_runtime_task_output"]
    assert len(problems) == 1 and problems[0].startswith("task run 424242: ")


def test_a_bad_token_is_an_error_without_the_token(client: SdkClient) -> None:
    bad = SdkClient(client.client.config.host, "dapi" + "f" * 32)
    found, problems = bad.get_runs([RUNS[0]["run_id"]])
    assert found == []
    assert problems and "Invalid access token" in problems[0]
    assert "dapi" + "f" * 32 not in problems[0]
