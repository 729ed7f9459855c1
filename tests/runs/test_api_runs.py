"""The runs API: upserts, logs, reads, scoping and refusals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command

from dashboard.models import ApiKey, ApiKeyRole
from runs.choices import RunStatus
from runs.models import Attempt, LogChunk, Node, Run
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _during_the_runs() -> Iterator[None]:
    """The payloads' runs started at T0: a run 'running' for weeks is refused as implausible."""
    with time_machine.travel(T0 + timedelta(hours=2)):
        yield


def run_payload(**overrides: object) -> dict:
    body = {
        "external_id": "812736451",
        "experiment_name": "/Workspace/Users/alice/llama-ft",
        "creator": "alice@example.com",
        "status": "running",
        "accelerator_type": "GPU_8xH100",
        "num_accelerators": 16,
        "region": "us-east-1",
        "home_region": "us-west-2",
        "submitted_at": (T0 - timedelta(minutes=3)).isoformat(),
        "started_at": T0.isoformat(),
        "timeout_minutes": 720,
        "max_retries": 2,
        "usage_policy_name": "ml-research",
        "parameters": {"lr": 2e-5, "epochs": 3},
        "attempts": [
            {
                "number": 1,
                "status": "running",
                "started_at": T0.isoformat(),
                "nodes": [{"index": 0, "host": "10.1.0.4"}, {"index": 1, "host": "10.1.0.5"}],
            }
        ],
    }
    body.update(overrides)
    return body


def test_upsert_creates_then_updates_without_duplicating(world: World) -> None:
    api = world.api(world.vision)
    created = api.post("/api/v1/runs", run_payload(), content_type="application/json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["created"] is True
    assert body["run"]["gpus_per_node"] == 8
    assert [n["host"] for n in body["run"]["attempts"][0]["nodes"]] == ["10.1.0.4", "10.1.0.5"]
    run = Run.objects.get(external_id="812736451")
    assert run.team == world.vision
    assert run.user == world.alice
    assert run.is_cross_region

    finished = run_payload(
        status="succeeded",
        ended_at=(T0 + timedelta(hours=2)).isoformat(),
        attempts=[{"number": 1, "status": "succeeded", "ended_at": (T0 + timedelta(hours=2)).isoformat()}],
    )
    updated = api.post("/api/v1/runs", finished, content_type="application/json")
    assert updated.status_code == 200
    assert updated.json()["created"] is False
    assert Run.objects.count() == 1
    assert Attempt.objects.count() == 1
    assert Node.objects.count() == 2  # nodes not resent are kept
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.ended_at == T0 + timedelta(hours=2)


def test_late_running_update_does_not_reopen_a_finished_run(world: World) -> None:
    api = world.api(world.vision)
    api.post("/api/v1/runs", run_payload(status="failed"), content_type="application/json")
    late = api.post("/api/v1/runs", run_payload(status="running", attempts=[]), content_type="application/json")
    assert late.status_code == 200
    assert any("status" in item for item in late.json()["ignored"])
    assert Run.objects.get().status == RunStatus.FAILED


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("status", "exploded", "status"),
        ("accelerator_type", "GPU_4xT4", "accelerator_type"),
        ("num_accelerators", 12, "body"),  # 12 is not a multiple of 8 for GPU_8xH100
        ("num_accelerators", 0, "num_accelerators"),
        ("started_at", "yesterday-ish", "started_at"),
        ("external_id", "", "external_id"),
        ("external_id", "has space", "external_id"),
        ("timeout_minutes", 0, "timeout_minutes"),
        ("mlflow_url", "javascript:alert(1)", "mlflow_url"),
    ],
)
def test_invalid_run_fields_get_422_naming_the_field(world: World, field: str, value: object, named: str) -> None:
    response = world.api(world.vision).post(
        "/api/v1/runs", run_payload(**{field: value}), content_type="application/json"
    )
    assert response.status_code == 422
    fields = [e["field"] for e in response.json()["errors"]]
    assert any(f.startswith(named) for f in fields), fields
    assert not Run.objects.exists()


def test_bad_update_leaves_the_stored_run_alone(world: World) -> None:
    api = world.api(world.vision)
    api.post("/api/v1/runs", run_payload(), content_type="application/json")
    bad = api.post(
        "/api/v1/runs", run_payload(ended_at=(T0 - timedelta(hours=1)).isoformat()), content_type="application/json"
    )
    assert bad.status_code in (409, 422)
    run = Run.objects.get()
    assert run.ended_at is None
    assert run.status == RunStatus.RUNNING


def test_malformed_json_is_a_4xx(world: World) -> None:
    response = world.api(world.vision).post("/api/v1/runs", "{not json", content_type="application/json")
    assert 400 <= response.status_code < 500


def test_writes_need_an_ingest_key(world: World) -> None:
    anonymous = world.client_for(world.alice)  # a session may read but not write
    assert anonymous.post("/api/v1/runs", run_payload(), content_type="application/json").status_code in (401, 403)
    reader = world.api(world.vision, ApiKeyRole.READ)
    assert reader.post("/api/v1/runs", run_payload(), content_type="application/json").status_code == 403
    assert not Run.objects.exists()


def test_no_key_or_a_revoked_key_is_401(world: World, client) -> None:
    assert client.get("/api/v1/runs").status_code == 401
    key, raw = ApiKey.issue(world.vision, ApiKeyRole.READ)
    key.revoked_at = T0
    key.save()
    assert client.get("/api/v1/runs", headers={"authorization": f"Bearer {raw}"}).status_code == 401


def test_another_teams_key_cannot_see_or_overwrite_a_run(world: World) -> None:
    make_run(world.vision, "vision-run")
    nlp = world.api(world.nlp)
    assert nlp.get("/api/v1/runs/vision-run").status_code == 404
    assert nlp.get("/api/v1/runs").json()["count"] == 0
    # The same id answers as an unused one would (no existence oracle) and creates nlp's own
    # run; vision's is neither seen nor changed (tests/dashboard/security/test_security_ownership.py).
    hijack = nlp.post("/api/v1/runs", run_payload(external_id="vision-run"), content_type="application/json")
    assert hijack.status_code == 201
    assert (
        Run.objects.get(external_id="vision-run", team=world.vision).experiment_name
        == "/Workspace/Users/alice/llama-ft"
    )
    log = nlp.post(
        "/api/v1/runs/vision-run/logs?source=serverless", {"seq": 0, "text": "x"}, content_type="application/json"
    )
    assert log.status_code == 404


def test_users_read_their_teams_runs_through_the_session(world: World) -> None:
    make_run(world.vision, "vision-run")
    make_run(world.nlp, "nlp-run")
    alice = world.client_for(world.alice)
    ids = [r["external_id"] for r in alice.get("/api/v1/runs").json()["results"]]
    assert ids == ["vision-run"]
    assert alice.get("/api/v1/runs/nlp-run").status_code == 404
    detail = alice.get("/api/v1/runs/vision-run").json()
    assert detail["attempts"][0]["nodes"][0]["host"] == "10.0.0.1"
    staff_ids = {r["external_id"] for r in world.client_for(world.sam).get("/api/v1/runs").json()["results"]}
    assert staff_ids == {"vision-run", "nlp-run"}


def test_log_chunks_append_in_order_and_resends_are_no_ops(world: World) -> None:
    make_run(world.vision, "r1")
    api = world.api(world.vision)
    url = "/api/v1/runs/r1/logs"
    first = api.post(url, {"seq": 0, "text": "step 1 loss 2.31\nstep 2 loss 2.29\n"}, content_type="application/json")
    assert first.status_code == 201
    assert first.json()["lines"] == 2
    again = api.post(url, {"seq": 0, "text": "step 1 loss 2.31\nstep 2 loss 2.29\n"}, content_type="application/json")
    assert again.status_code == 200
    assert again.json()["status"] == "duplicate"
    clash = api.post(url, {"seq": 0, "text": "something else"}, content_type="application/json")
    assert clash.status_code == 409
    assert LogChunk.objects.get(seq=0).text.startswith("step 1")
    other_node = api.post(url, {"node": 1, "attempt": 2, "seq": 0, "text": "rank 1\n"}, content_type="application/json")
    assert other_node.status_code == 201
    assert Node.objects.filter(attempt__run__external_id="r1", attempt__number=2, index=1).exists()


def test_bad_bytes_in_logs_are_kept_not_fatal(world: World) -> None:
    make_run(world.vision, "r1")
    raw = b'{"seq": 0, "text": "ok \\u0000 nul and lone \\udc80 surrogate"}'
    response = world.api(world.vision).post("/api/v1/runs/r1/logs", raw, content_type="application/json")
    assert response.status_code == 201
    text = LogChunk.objects.get().text
    assert "\x00" not in text
    assert "nul and lone" in text


def test_oversized_log_chunk_is_413(world: World, settings) -> None:
    settings.AIRBOARD_MAX_LOG_CHUNK_BYTES = 1024
    make_run(world.vision, "r1")
    response = world.api(world.vision).post(
        "/api/v1/runs/r1/logs", {"seq": 0, "text": "x" * 2000}, content_type="application/json"
    )
    assert response.status_code == 413
    assert not LogChunk.objects.exists()


def test_openapi_document_and_docs_are_served(client) -> None:
    spec = client.get("/api/v1/openapi.json")
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    for path in ("/api/v1/runs", "/api/v1/runs/{external_id}", "/api/v1/runs/{external_id}/logs",
                 "/api/v1/gpu-samples", "/api/v1/metrics"):  # fmt: skip
        assert path in paths
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()


def test_create_api_key_command_prints_the_key_once_and_stores_a_hash(world: World, capsys) -> None:
    call_command("create_api_key", "--team", "vision", "--role", "ingest", "--name", "node-agent")
    raw = capsys.readouterr().out.strip()
    assert raw.startswith("ab_")
    key = ApiKey.objects.get(name="node-agent")
    assert raw not in key.key_hash
    assert ApiKey.authenticate(raw) == key
    assert ApiKey.authenticate(raw + "x") is None


WORKLOAD = """\
experiment_name: llama-ft
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 16
command: torchrun --nproc_per_node 8 train.py
parameters:
  epochs: 3
secrets:
  HF_TOKEN: ml-team/hf-token
max_retries: 2
timeout_minutes: 720
usage_policy_name: ml-research
"""


def test_the_workload_yaml_is_validated_and_fills_the_run(world: World) -> None:
    body = {"external_id": "wl-1", "status": "queued", "workload_yaml": WORKLOAD}
    response = world.api(world.vision).post("/api/v1/runs", body, content_type="application/json")
    assert response.status_code == 201, response.content
    run = Run.objects.get(external_id="wl-1")
    assert (run.accelerator_type, run.num_accelerators, run.gpus_per_node) == ("GPU_8xH100", 16, 8)
    assert (run.timeout_minutes, run.max_retries, run.usage_policy_name) == (720, 2, "ml-research")
    assert run.workload_yaml == WORKLOAD


def test_a_workload_with_a_literal_token_is_refused_and_not_stored(world: World) -> None:
    token = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"
    leaky = WORKLOAD + f"env_variables:\n  HF_TOKEN: {token}\n"
    body = {"external_id": "wl-2", "workload_yaml": leaky}
    response = world.api(world.vision).post("/api/v1/runs", body, content_type="application/json")
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert errors[0]["field"] == "workload_yaml"
    assert "line 14" in errors[0]["message"]
    assert "secrets" in errors[0]["message"]
    assert token not in response.content.decode()
    assert not Run.objects.exists()


def test_a_nul_character_is_refused_with_the_field_named_on_every_backend(world: World) -> None:
    body = run_payload(experiment_name="llama\x00ft")
    response = world.api(world.vision).post("/api/v1/runs", body, content_type="application/json")
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "experiment_name"
    assert not Run.objects.exists()
    assert world.api(world.vision).get("/api/v1/runs/bad%00id").status_code in (404, 422)


@pytest.mark.parametrize("when", ["0419-12-16T14:58:57-23:00", "1900-01-01T00:00:00Z", "2999-01-01T00:00:00Z"])
def test_implausible_times_are_refused_with_the_field_named(world: World, when: str) -> None:
    response = world.api(world.vision).post(
        "/api/v1/runs", run_payload(started_at=when, attempts=[]), content_type="application/json"
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "started_at"


def test_times_with_an_offset_are_stored_in_utc(world: World) -> None:
    body = run_payload(started_at="2026-11-02T04:00:00-05:00", attempts=[])
    assert world.api(world.vision).post("/api/v1/runs", body, content_type="application/json").status_code == 201
    assert Run.objects.get().started_at == T0


def test_numbers_past_what_the_database_holds_are_4xx(world: World) -> None:
    api = world.api(world.vision)
    assert api.get("/api/v1/runs?offset=71623063114069557248").status_code == 422
    assert api.get(f"/api/v1/batches/{2**63 + 5}").status_code in (404, 422)
