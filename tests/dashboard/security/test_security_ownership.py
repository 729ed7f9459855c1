"""Ownership: a run is (source, external id) of one team; nothing another team sends reaches it.

Each test is one reproduction from issue 14, tried as a hostile member of team nlp would,
against vision's run 1001 (alice's serverless run in the stand-in workspace, tests/bin/databricks).
Real parts where the attack used them: the run source collector runs the stand-in CLI, the log
collector reads a real directory and runs a real command, the cancel command is a real executable.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.db import IntegrityError
from django.test import Client

from agent.buffer import DiskBuffer
from agent.shipper import HttpSender, Shipper
from billing.choices import SpentAction
from billing.costs import rollups
from billing.models import AcceleratorPrice, BilledUsage, PolicyAction, UsagePolicy
from billing.policies import enforcement
from billing.reconcile import compare, importing
from dashboard.models import ApiKey, ApiKeyRole
from runs import ingest, ingest_process
from runs.choices import RunOrigin, RunSource, RunStatus
from runs.collectors.logsource import RefusedPath, open_inside
from runs.collectors.mlflow import claims
from runs.models import CollectorState, GpuSample, IngestBatch, LogChunk, Run, RunEvent
from tests.conftest import T0, TESTS, World, make_run
from tests.mlflow_server import free_port

BIN = TESTS / "bin"
FAKE_CANCEL = BIN / "fake-cancel"


@pytest.fixture(autouse=True)
def _during_the_runs() -> Iterator[None]:
    """The stand-in's runs started at T0; pushed runs 'running' for weeks are refused as implausible."""
    with time_machine.travel(T0 + timedelta(hours=2)):
        yield


def key_client(world: World, team_name: str, source: str = RunSource.LOCAL) -> Client:
    team = world.vision if team_name == "vision" else world.nlp
    raw = ApiKey.issue(team, ApiKeyRole.INGEST, name="test", source=source)[1]
    return Client(headers={"authorization": f"Bearer {raw}"})


def push(client: Client, **body: object) -> tuple[int, dict]:
    payload = {"external_id": "1001", "experiment_name": "squatted", "status": "running",
               "started_at": T0.isoformat(), **body}  # fmt: skip
    response = client.post("/api/v1/runs", payload, content_type="application/json")
    return response.status_code, response.json()


def collect(what: str) -> str:
    out = StringIO()
    call_command("collect", what, "--once", stdout=out)
    return out.getvalue()


def log_text(run: Run) -> str:
    chunks = LogChunk.objects.filter(node__attempt__run=run).order_by("node__attempt__number", "node__index", "seq")
    return "".join(chunks.values_list("text", flat=True))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# 1. Squatting a run id ------------------------------------------------------------------------


def test_a_squatted_id_gets_neither_the_run_nor_its_logs(world: World, workspace: None, logs: Path) -> None:
    nlp = key_client(world, "nlp", source=RunSource.SERVERLESS)
    assert push(nlp, source="serverless", creator="charlie@example.com")[0] == 201

    assert "0 skipped" in collect("runs")  # the squat does not stop the real run

    theirs = Run.objects.get(team=world.vision, source=RunSource.SERVERLESS, external_id="1001")
    assert (theirs.origin, theirs.experiment_name, theirs.creator) == (
        RunOrigin.COLLECTOR, "llama-ft-8xh100", "alice@example.com",
    )  # fmt: skip
    squat = Run.objects.get(team=world.nlp, external_id="1001")
    assert (squat.origin, squat.experiment_name, squat.creator, squat.state_message) == (
        RunOrigin.KEY, "squatted", "charlie@example.com", "",
    )  # fmt: skip

    write(logs / "1001" / "1" / "0.log", "export HF_TOKEN=hf_secret\nstep 1\n")
    collect("logs")
    assert "hf_secret" in log_text(theirs)
    assert log_text(squat) == ""


def test_a_local_squat_gets_no_logs_and_the_real_run_gets_them(world: World, workspace: None, logs: Path) -> None:
    nlp = key_client(world, "nlp")  # a plain key: source local
    assert push(nlp)[0] == 201
    collect("runs")
    write(logs / "1001" / "1" / "0.log", "step 1\n")

    collect("logs")

    assert log_text(Run.objects.get(team=world.vision, external_id="1001")) == "step 1\n"
    assert log_text(Run.objects.get(team=world.nlp, external_id="1001")) == ""


def test_a_key_writes_only_its_own_source(world: World) -> None:
    plain = key_client(world, "nlp")
    status, body = push(plain, source="serverless")
    assert status == 403
    assert "create_api_key --source serverless" in body["detail"]
    assert not Run.objects.exists()
    assert push(plain)[1]["run"]["source"] == RunSource.LOCAL


def test_a_collector_never_adopts_a_run_a_key_created(world: World, workspace: None) -> None:
    # vision pushes its own serverless 1001 through a granted key, then the collector lists 1001.
    vision = key_client(world, "vision", source=RunSource.SERVERLESS)
    assert push(vision, source="serverless")[0] == 201

    output = collect("runs")

    assert "skipped 1001: run '1001' (serverless) was written by the api key" in output
    run = Run.objects.get(external_id="1001")
    assert (run.origin, run.experiment_name) == (RunOrigin.KEY, "squatted")


def test_a_key_cannot_change_a_run_the_collector_wrote(world: World, workspace: None) -> None:
    collect("runs")
    vision = key_client(world, "vision", source=RunSource.SERVERLESS)
    status, body = push(vision, source="serverless", experiment_name="renamed")
    assert status == 409
    assert "run source collector" in body["detail"]
    assert Run.objects.get(external_id="1001").experiment_name == "llama-ft-8xh100"


# 2. A twin under another source receives no logs from the log command -------------------------


def test_a_twin_under_another_source_gets_nothing_from_the_log_command(world: World, settings, tmp_path: Path) -> None:
    theirs = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    nlp = key_client(world, "nlp", source=RunSource.CLASSIC)
    assert push(nlp, source="classic", attempts=[{"number": 1, "status": "running", "nodes": [{"index": 0}]}])[0] == 201
    root = tmp_path / "remote"
    write(root / "1001" / "1" / "0.log", "vision's secret line\n")
    settings.AIRBOARD_LOG_SOURCE_DIR = ""
    settings.AIRBOARD_LOG_SOURCE_COMMAND = f"cat {shlex.quote(str(root))}/{{run_id}}/{{attempt}}/{{node}}.log"

    collect("logs")

    assert log_text(theirs) == "vision's secret line\n"
    assert log_text(Run.objects.get(team=world.nlp)) == ""


# 3. A twin under a cancelling policy never runs the cancel command ----------------------------


def test_a_twin_under_a_cancelling_policy_does_not_cancel_the_real_run(
    world: World, settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancel_log = tmp_path / "cancel.log"
    monkeypatch.setenv("FAKE_CANCEL_LOG", str(cancel_log))
    settings.AIRBOARD_CANCEL_COMMAND = f"{FAKE_CANCEL} air cancel {{run_id}}"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("10"),
    )  # fmt: skip
    policy = UsagePolicy.objects.create(name="nlp-tight", budget_usd=Decimal("1"), action=SpentAction.CANCEL)
    policy.teams.add(world.nlp)
    theirs = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    nlp = key_client(world, "nlp", source=RunSource.SERVERLESS)
    status, _ = push(nlp, source="serverless", usage_policy_name="nlp-tight", accelerator_type="GPU_8xH100",
                     num_accelerators=8, region="us-west-2", attempts=[{"number": 1, "status": "running",
                     "started_at": T0.isoformat(), "nodes": [{"index": 0}]}])  # fmt: skip
    assert status == 201
    now = T0 + timedelta(hours=2)
    rollups.recompute_days([T0.date()], now=now)

    enforcement.enforce_all(now)

    assert not cancel_log.exists()  # the command never ran, with 1001 or anything else
    twin = Run.objects.get(team=world.nlp)
    assert twin.cancel_requested_at is not None  # its own writer is asked, through the flag
    assert PolicyAction.objects.get().run == twin
    theirs.refresh_from_db()
    assert theirs.cancel_requested_at is None


# 4. Policies count only what they own ---------------------------------------------------------


def test_a_pushed_run_names_only_its_teams_policy_and_stays_plausible(world: World) -> None:
    UsagePolicy.objects.create(name="everyone", budget_usd=Decimal("100"), action=SpentAction.CANCEL)
    UsagePolicy.objects.create(name="vision-only").teams.add(world.vision)
    nlp = key_client(world, "nlp")

    status, body = push(nlp, usage_policy_name="vision-only")
    assert status == 422
    assert body["errors"] == [
        {"field": "usage_policy_name", "message": "Policy vision-only does not cover team nlp; use one of your "
         "team's policies."}
    ]  # fmt: skip
    status, body = push(nlp, usage_policy_name="everyone", accelerator_type="GPU_8xH100", num_accelerators=100_000)
    assert status == 422
    assert [e["field"] for e in body["errors"]] == ["num_accelerators"]
    status, body = push(nlp, usage_policy_name="everyone", started_at="1970-01-01T00:00:00Z")
    assert status == 422
    assert [e["field"] for e in body["errors"]] == ["started_at"]
    assert not Run.objects.exists()
    assert push(nlp, usage_policy_name="everyone", accelerator_type="GPU_8xH100", num_accelerators=16)[0] == 201


# 13. No existence oracle ----------------------------------------------------------------------


def test_another_teams_id_answers_like_an_unused_one(world: World) -> None:
    make_run(world.vision, "1001", experiment_name="vision-secret")
    nlp = key_client(world, "nlp", source=RunSource.SERVERLESS)

    taken_status, taken = push(nlp, source="serverless")
    unused_status, unused = push(nlp, source="serverless", external_id="1002")

    assert taken_status == unused_status == 201
    assert taken.keys() == unused.keys()
    assert (taken["created"], taken["ignored"]) == (unused["created"], unused["ignored"]) == (True, [])
    assert "vision" not in json.dumps(taken)
    assert Run.objects.get(team=world.vision).experiment_name == "vision-secret"


# 8. Clean refusals: NaN and infinities, IntegrityError ----------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_parameter_is_a_422_naming_it(world: World, literal: str) -> None:
    body = '{"external_id": "r1", "parameters": {"optim": {"lr": ' + literal + '}, "epochs": 3}}'
    response = key_client(world, "vision").post("/api/v1/runs", body, content_type="application/json")
    assert response.status_code == 422, response.content
    assert response.json()["errors"] == [
        {"field": "parameters.optim.lr", "message": "must be a finite number (NaN and Infinity cannot be stored)"}
    ]
    assert not Run.objects.exists()


def test_a_non_finite_workload_parameter_is_a_422(world: World) -> None:
    yaml = "experiment_name: ft\ncompute:\n  accelerator_type: GPU_1xA10\n  num_accelerators: 1\n"
    yaml += "command: python train.py\nparameters:\n  lr: .nan\n"
    status, body = push(key_client(world, "vision"), workload_yaml=yaml)
    assert status == 422
    assert body["errors"][0]["field"] == "parameters.lr"


def test_launch_refuses_a_non_finite_parameter_before_the_run_exists(world: World, tmp_path: Path) -> None:
    workload = tmp_path / "nan.yaml"
    workload.write_text(
        "experiment_name: nan-lr\ncompute:\n  accelerator_type: GPU_1xA10\n  num_accelerators: 1\n"
        "parameters:\n  lr: .nan\n  warmup: -.inf\ncommand: echo never\n"
    )
    err = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("launch", "-f", str(workload), "--team", "vision", stdout=StringIO(), stderr=err)
    assert exited.value.code == 1
    assert f"{workload}: parameters.lr: must be a finite number" in err.getvalue()
    assert f"{workload}: parameters.warmup: must be a finite number" in err.getvalue()
    assert not Run.objects.exists()


def test_an_integrity_error_is_retried_once_then_a_409(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    tries: list[int] = []

    def conflicting_save(self: Run, *args: object, **kwargs: object) -> None:
        tries.append(1)
        raise IntegrityError("UNIQUE constraint failed")  # what a concurrent create of the same run raises

    monkeypatch.setattr(Run, "save", conflicting_save)
    with pytest.raises(ingest.IngestConflict, match="still conflicts after a retry"):
        ingest.upsert_run(world.vision, {"source": "local", "external_id": "r1"})
    assert len(tries) == 2

    status, body = push(key_client(world, "vision"))
    assert status == 409
    assert "'1001' (local) was written concurrently" in body["detail"]


# 6. The log directory never follows links out of itself ---------------------------------------


def test_symlinks_and_hard_links_in_the_log_directory_are_refused(world: World, logs: Path, tmp_path: Path) -> None:
    run = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    secret = tmp_path / "secret_key"
    secret.write_text("django-insecure-SECRET\n")
    (logs / "1001" / "1").mkdir(parents=True)
    (logs / "1001" / "1" / "0.log").symlink_to("/etc/passwd")
    os.link(secret, logs / "1001" / "1" / "1.log")
    outside = tmp_path / "elsewhere" / "1"
    write(outside / "2.log", "outside line\n")
    (logs / "1001" / "2").symlink_to(outside)  # a linked directory: never walked into
    write(logs / "1001" / "3" / "0.log", "real line\n")

    output = collect("logs")

    assert "logs: refused 1001/1/0.log: is a symbolic link" in output
    assert "logs: refused 1001/1/1.log: has other hard links" in output
    assert log_text(run) == "real line\n"


def test_a_directory_swapped_for_a_link_after_the_walk_is_not_followed(logs: Path, tmp_path: Path) -> None:
    write(tmp_path / "elsewhere" / "0.log", "outside\n")
    (logs / "1001").mkdir()
    (logs / "1001" / "1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RefusedPath, match="1/ is a symbolic link"):
        open_inside(logs, "1001/1/0.log")


# The agent path: the node posts to the HTTP API with a node key bound to a team --------------


def _agent_payload(*runs: str) -> dict:
    samples = [{"run": run, "run_source": "serverless", "gpu": gpu, "ts": T0.isoformat(), "utilization_gpu": 99.0,
                "host": "gpu-node-9"} for gpu, run in enumerate(runs)]  # fmt: skip
    events = [{"kind": "xid", "run": runs[0], "gpu": 0, "ts": T0.isoformat(), "message": "Xid 79"}]
    return {"source": "nvml", "samples": samples, "events": events}


def test_agent_batches_need_a_team_key_and_never_reach_another_teams_run(world: World) -> None:
    theirs = make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    mine = make_run(world.nlp, "2001", status=RunStatus.RUNNING, ended_at=None)
    url = "/api/v1/gpu-samples?bad_rows=drop"

    def push(client: Client, *runs: str) -> Any:
        return client.post(url, json.dumps(_agent_payload(*runs)), content_type="application/json")

    no_key = push(Client(), "1001")
    bad_key = push(Client(headers={"authorization": "Bearer ab_" + "x" * 43}), "1001")
    read_key = push(world.api(world.nlp, ApiKeyRole.READ), "2001")
    nlp = push(world.api(world.nlp), "1001", "2001")

    assert (no_key.status_code, bad_key.status_code, read_key.status_code) == (401, 401, 403)
    assert nlp.status_code == 202
    out = nlp.json()
    # vision's sample and its event are dropped and named; nlp's sample is kept.
    assert (out["rows"], out["dropped_rows"], out["events"], out["dropped_events"]) == (1, 1, 0, 1)
    assert "samples[0].run: no run '1001' (serverless) in your team" in out["problems"]
    assert IngestBatch.objects.get(pk=out["batch"]["id"]).team == world.nlp
    ingest_process.process_batch(out["batch"]["id"])
    assert not GpuSample.objects.filter(run=theirs).exists() and not RunEvent.objects.filter(run=theirs).exists()
    assert GpuSample.objects.filter(run=mine).count() == 1
    state = CollectorState.objects.get(name="agent")
    assert state.refused_total == 2
    assert state.last_refusal.startswith("2 refused: team nlp: samples[0].run: no run '1001'")
    rows = list(csv.DictReader(io.StringIO(
        world.client_for(world.sam).get("/collectors/", {"format": "csv"}).content.decode()
    )))  # fmt: skip
    assert [(r["name"], r["refused_total"]) for r in rows] == [("agent", "2")]


def test_the_agent_keeps_its_key_out_of_the_disk_buffer(tmp_path: Path) -> None:
    buffer = DiskBuffer(tmp_path / "buffer")
    down = Shipper(HttpSender(f"http://127.0.0.1:{free_port()}", "ab_secret-node-key"), buffer)
    assert down.ship(_agent_payload("1001")) is False
    assert len(buffer) == 1
    assert "ab_secret-node-key" not in "".join(p.read_text() for p in (tmp_path / "buffer").rglob("*") if p.is_file())


# Billing records and MLflow runs join only the run that owns the id --------------------------


def test_billed_usage_joins_the_collectors_run_not_a_keys_twin(world: World) -> None:
    theirs = make_run(world.vision, "1001")
    squat = make_run(world.nlp, "1001", origin=RunOrigin.KEY)  # an nlp key granted serverless
    metadata = json.dumps({"job_run_id": "1001"}).replace('"', '""')
    usage = (
        "record_id,usage_start_time,usage_end_time,usage_date,sku_name,usage_quantity,usage_unit,usage_metadata,"
        "custom_tags\n"
        f'r1,2026-11-02T09:00:00Z,2026-11-02T10:00:00Z,2026-11-02,SERVERLESS_GPU,10,DBU,"{metadata}","{{}}"\n'
    )

    importing.import_usage(io.StringIO(usage, newline=""))

    assert BilledUsage.objects.get().run == theirs
    assert compare.billed_for_run(squat) is None


def test_a_keys_run_claims_an_mlflow_run_only_of_its_own_teams_user(world: World) -> None:
    squat = make_run(world.nlp, "1001", origin=RunOrigin.KEY, mlflow_run_id="a" * 32)
    theirs = make_run(world.vision, "1001")
    alices = {"mlflow.user": "alice@example.com", "airboard.run_id": "1001"}
    charlies = {"mlflow.user": "charlie@example.com", "airboard.run_id": "1001"}
    assert not claims(squat, alices) and claims(squat, charlies) and not claims(squat, {})
    assert claims(theirs, alices)  # the collector's run keeps the id its source gave it
