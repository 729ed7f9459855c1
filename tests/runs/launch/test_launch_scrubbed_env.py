"""Workloads and operator commands run without the server's secrets (issue 33).

On 4ab1749 `launch` handed the workload its own environment, so a team's training script read
DJANGO_SECRET_KEY (sessions, signed cookies), DATABASE_URL (every team's data) and
AIRBOARD_METRICS_TOKEN; collector and cancel commands got the same.
"""

from __future__ import annotations

import pytest

from dashboard.kit.commands import run_command, scrubbed_env
from runs.models import Run
from tests.runs.launch.test_launcher import launch, log_of, write_workload

SECRETS = {
    "DJANGO_SECRET_KEY": "server-secret-key",
    "DATABASE_URL": "postgres://airboard:dbpass@db/airboard",
    "AIRBOARD_METRICS_TOKEN": "metrics-token-value",
    "AIRBOARD_ENCRYPTION_KEY": "encryption-key-value",
    "REDIS_URL": "redis://:redispass@cache:6379/0",
    "DATABRICKS_TOKEN": "dapi-server-token",
}


@pytest.fixture
def server_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.mark.django_db
def test_a_launched_workload_sees_none_of_the_servers_secrets(world, tmp_path, server_secrets) -> None:
    workload = write_workload(tmp_path, "env", "env_variables:\n  MY_SETTING: kept\n")
    code, out, _ = launch("-f", str(workload), "--team", "vision")
    assert code == 0, out
    log = log_of(Run.objects.get())
    assert "MY_SETTING=kept" in log and "PATH=" in log and "AIRBOARD_RUN_ID=" in log
    for name, value in SECRETS.items():
        assert value not in log, name


def test_operator_commands_keep_the_cli_credentials_but_not_the_servers(server_secrets) -> None:
    output = run_command(["env"], 10)
    assert "PATH=" in output
    assert "DATABRICKS_TOKEN=dapi-server-token" in output  # the CLI authenticates with it
    for name, value in SECRETS.items():
        if name != "DATABRICKS_TOKEN":
            assert value not in output, name


def test_scrubbed_env_keeps_what_commands_need() -> None:
    base = {"PATH": "/bin", "HOME": "/root", "HTTPS_PROXY": "http://proxy", "DJANGO_DEBUG": "1", **SECRETS}
    assert scrubbed_env(base) == {"PATH": "/bin", "HOME": "/root", "HTTPS_PROXY": "http://proxy",
                                  "DATABRICKS_TOKEN": "dapi-server-token"}  # fmt: skip
    assert "DATABRICKS_TOKEN" not in scrubbed_env(base, for_workload=True)
