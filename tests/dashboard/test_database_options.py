"""PostgreSQL connections run without JIT: compiling cost more than the pages' queries it sped up."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import ROOT

PRINT_OPTIONS = "from django.conf import settings; print(json.dumps(settings.DATABASES['default'].get('OPTIONS', {})))"


def _options(database_url: str, tmp_path) -> dict[str, object]:
    env = dict(os.environ, DATABASE_URL=database_url, AIRBOARD_VAR_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", f"import json; {PRINT_OPTIONS}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_postgres_url_turns_jit_off(tmp_path) -> None:
    assert _options("postgres://airboard@db.example:5432/airboard", tmp_path)["options"] == "-c jit=off"


def test_options_in_the_url_win(tmp_path) -> None:
    options = _options("postgres://airboard@db.example:5432/airboard?options=-c%20jit%3Don", tmp_path)
    assert options["options"] == "-c jit=on"


def test_sqlite_gets_no_postgres_options(tmp_path) -> None:
    assert "options" not in _options("sqlite:///" + str(tmp_path / "x.sqlite3"), tmp_path)


@pytest.mark.django_db
def test_live_connection_has_jit_off() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...); this run is on " + connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
