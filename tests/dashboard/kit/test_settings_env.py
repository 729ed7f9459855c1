"""Settings come from the environment; a bad value stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard.kit.env import env_bool, env_int, env_url
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://db/airboard"),
        ("REDIS_URL", "amqp://guest@localhost//"),
        ("AIRBOARD_MAX_SAMPLES_PER_BATCH", "lots"),
        ("DJANGO_DEBUG", "maybe"),
        ("AIRBOARD_RUNS_PER_PAGE", "0"),
    ],
)
def test_bad_value_stops_start_up_with_the_variable_named(name: str, value: str, tmp_path) -> None:
    env = dict(os.environ, **{name: value, "AIRBOARD_VAR_DIR": str(tmp_path)})
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert name in result.stderr
    assert "Traceback" not in result.stderr


def test_helpers_parse_and_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLAG", "yes")
    assert env_bool("FLAG", False) is True
    monkeypatch.setenv("N", "12")
    assert env_int("N", 1, minimum=1) == 12
    monkeypatch.setenv("URL", "postgres://u:hunter2@db/x")
    assert env_url("URL", {"postgres"}) == "postgres://u:hunter2@db/x"
    with pytest.raises(ImproperlyConfigured) as excinfo:
        env_url("URL", {"redis"})
    assert "hunter2" not in str(excinfo.value)
