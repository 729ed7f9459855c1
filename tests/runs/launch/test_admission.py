"""Admission (billing.policies.admission.admit): the API, `check_workload --team` and the launcher hook."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command

from billing.choices import SpentAction
from billing.costs import rollups
from billing.models import AcceleratorPrice, UsagePolicy
from dashboard.models import ApiKeyRole
from runs.choices import RunStatus
from runs.launch.admission import admit_yaml
from runs.launch.launcher import admit
from runs.workload.schema import parse_workload
from tests.conftest import T0, make_run

NOW = T0 + timedelta(days=3)
WORKLOAD = """\
experiment_name: llama-ft
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 8
command: python train.py
max_retries: 1
timeout_minutes: 60
usage_policy_name: vision-research
"""


def workload(**changes: object) -> str:
    """WORKLOAD with top-level or compute keys replaced (None removes the key)."""
    lines = []
    for line in WORKLOAD.splitlines():
        key = line.strip().split(":")[0]
        if key in changes:
            if changes[key] is not None:
                lines.append(line.split(":")[0] + f": {changes[key]}")
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.fixture
def policy(world) -> UsagePolicy:
    AcceleratorPrice.objects.create(
        accelerator_type="GPU_8xH100", region="us-west-2", effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        usd_per_hour=Decimal("10"),
    )  # fmt: skip
    policy = UsagePolicy.objects.create(
        name="vision-research", budget_usd=Decimal("1000"), action=SpentAction.REFUSE,
        allowed_accelerator_types=["GPU_8xH100", "GPU_1xA10"], max_num_accelerators=16, max_timeout_minutes=120,
        max_retries=2, allowed_regions=["us-west-2", "us-east-1"], allow_cross_region=False,
    )  # fmt: skip
    policy.teams.add(world.vision)
    return policy


def decide(world, text: str = WORKLOAD, region: str | None = "us-west-2") -> dict:
    with time_machine.travel(NOW, tick=False):
        return admit_yaml(text, world.vision, region=region).as_dict()


def rules(answer: dict) -> list[str]:
    return [v["rule"] for v in answer["violations"]]


def test_allow_with_remaining_budget_and_rate(world, policy) -> None:
    answer = decide(world)
    assert answer["decision"] == "allow", answer
    assert answer["violations"] == []
    assert answer["policy"] == "vision-research"
    assert answer["remaining_budget_usd"] == "1000"
    assert answer["estimated_usd_per_hour"] == "80"


@pytest.mark.parametrize(
    ("changes", "region", "rule"),
    [
        ({"accelerator_type": "GPU_8xB300"}, "us-west-2", "accelerator_type"),
        ({"num_accelerators": 24}, "us-west-2", "num_accelerators"),
        ({"timeout_minutes": 600}, "us-west-2", "timeout_minutes"),
        ({"timeout_minutes": None}, "us-west-2", "timeout_minutes"),
        ({"max_retries": 5}, "us-west-2", "max_retries"),
        ({}, "us-east-2", "region"),
        ({}, None, "region"),
        ({"usage_policy_name": "vision-reserch"}, "us-west-2", "usage_policy_name"),
        ({"num_accelerators": 3}, "us-west-2", "workload"),
        ({"command": None}, "us-west-2", "workload"),
    ],
)
def test_deny_per_constraint(world, policy, changes, region, rule) -> None:
    answer = decide(world, workload(**changes), region=region)
    assert answer["decision"] == "deny"
    assert rule in rules(answer), answer
    assert all(len(v["message"]) > 20 for v in answer["violations"])


def test_allowed_values_pass_each_constraint(world, policy) -> None:
    text = workload(accelerator_type="GPU_1xA10", num_accelerators=16, timeout_minutes=120, max_retries=2)
    assert decide(world, text, region="us-east-1")["decision"] == "allow"


def test_cross_region_denied_where_no_serverless_gpus(world, policy) -> None:
    policy.allowed_regions = []
    policy.save()
    answer = decide(world, region="eu-west-1")
    assert rules(answer) == ["cross_region"]
    policy.allow_cross_region = True
    policy.save()
    assert decide(world, region="eu-west-1")["decision"] == "allow"


def test_region_defaults_to_team_home_region(world, policy) -> None:
    make_run(world.vision, home_region="us-east-2", region="us-east-2")
    answer = decide(world, region=None)
    assert answer["region"] == "us-east-2"
    assert rules(answer) == ["region"]


def test_policy_of_another_team_is_denied(world, policy) -> None:
    with time_machine.travel(NOW, tick=False):
        answer = admit_yaml(WORKLOAD, world.nlp, region="us-west-2").as_dict()
    assert rules(answer) == ["usage_policy_name"]
    assert "does not cover team nlp" in answer["violations"][0]["message"]


def test_no_policy_named_is_allowed_with_a_warning(world, policy) -> None:
    answer = decide(world, workload(usage_policy_name=None))
    assert answer["decision"] == "allow"
    assert answer["policy"] is None
    assert answer["warnings"]


def test_spent_budget_denies_when_action_refuses(world, policy) -> None:
    # 2 runs x 8 GPUs x 7 h x $10 = $1,120 > $1,000.
    for n in range(2):
        make_run(world.vision, f"r{n}", usage_policy_name="vision-research", ended_at=T0 + timedelta(hours=7))
    rollups.recompute_days([T0.date()], now=NOW)
    answer = decide(world)
    assert rules(answer) == ["budget"]
    assert answer["remaining_budget_usd"] == "-120"
    policy.action = SpentAction.NOTIFY
    policy.save()
    assert decide(world)["decision"] == "allow"


def test_running_runs_accrue_to_now(world, policy) -> None:
    # A running run since T0, never rolled up: 8 GPUs x 13 h x $10 = $1,040 at T0 + 13 h.
    make_run(world.vision, "live", usage_policy_name="vision-research", status=RunStatus.RUNNING, ended_at=None)
    with time_machine.travel(T0 + timedelta(hours=13), tick=False):
        answer = admit_yaml(WORKLOAD, world.vision, region="us-west-2").as_dict()
    assert rules(answer) == ["budget"]
    assert answer["remaining_budget_usd"] == "-40"


# --- The API ---------------------------------------------------------------------------------


def post(client, **body: object):
    return client.post("/api/v1/admission", json.dumps(body), content_type="application/json")


def test_api_with_team_key(world, policy) -> None:
    with time_machine.travel(NOW, tick=False):
        response = post(world.api(world.vision, ApiKeyRole.READ), workload_yaml=WORKLOAD, team="vision",
                        user="alice", region="us-west-2")  # fmt: skip
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["decision"] == "allow"
    assert set(body) >= {"decision", "violations", "policy", "remaining_budget_usd", "estimated_usd_per_hour"}


def test_api_deny_answers_200_with_violations(world, policy) -> None:
    response = post(world.api(world.vision), workload_yaml=workload(max_retries=9), team="vision", region="us-west-2")
    assert response.status_code == 200
    assert response.json()["decision"] == "deny"
    assert response.json()["violations"][0]["rule"] == "max_retries"


def test_api_key_of_another_team_is_refused(world, policy) -> None:
    response = post(world.api(world.nlp), workload_yaml=WORKLOAD, team="vision")
    assert response.status_code == 403


def test_api_user_must_belong_to_the_team(world, policy) -> None:
    assert post(world.client_for(world.charlie), workload_yaml=WORKLOAD, team="vision").status_code == 404
    assert post(world.client_for(world.alice), workload_yaml=WORKLOAD, team="vision").status_code == 200
    assert post(world.client_for(world.alice), workload_yaml=WORKLOAD, team="nope").status_code == 404


def test_api_anonymous_is_401(world, policy) -> None:
    from django.test import Client

    assert post(Client(), workload_yaml=WORKLOAD, team="vision").status_code == 401


# --- check_workload --team and the launcher hook ------------------------------------------------


def test_check_workload_with_team(world, policy, tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(workload(max_retries=9))
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("check_workload", "-f", str(path), "--team", "vision", "--region", "us-west-2",
                     stdout=out, stderr=err)  # fmt: skip
    assert exited.value.code == 1
    assert out.getvalue().startswith("DENY")
    assert "max_retries" in err.getvalue()
    path.write_text(WORKLOAD)
    out = StringIO()
    call_command("check_workload", "-f", str(path), "--team", "vision", "--region", "us-west-2", stdout=out)
    assert out.getvalue().startswith("ALLOW")


def test_check_workload_json_and_unknown_team(world, policy, tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("check_workload", "-f", str(path), "--team", "nope", "--json", stdout=out)
    assert json.loads(out.getvalue())["admission"]["violations"][0]["rule"] == "team"


def test_launcher_admit_hook(world, policy) -> None:
    make_run(world.vision, home_region="us-west-2")
    assert admit(parse_workload(WORKLOAD), world.vision) == []
    reasons = admit(parse_workload(workload(max_retries=9)), world.vision)
    assert len(reasons) == 1 and "max_retries" in reasons[0]
