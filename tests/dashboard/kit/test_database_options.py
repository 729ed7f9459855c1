"""PostgreSQL connections run without JIT (dashboard/kit/pg.py): set when a connection opens, by a
plain SET, so an operator's PGOPTIONS and a connection pooler's startup rules are untouched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import ROOT

SHOW = "from django.db import connection; c = connection.cursor(); c.execute('SHOW {name}'); print(c.fetchone()[0])"


def _show(name: str, database_url: str, tmp_path, **env: str) -> str:
    environ = dict(os.environ, DATABASE_URL=database_url, AIRBOARD_VAR_DIR=str(tmp_path), **env)
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SHOW.format(name=name)],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout.strip().splitlines()[-1]


def _postgres_url() -> str:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...); this run is on " + connection.vendor)
    settings = connection.settings_dict
    return f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/postgres"


@pytest.mark.django_db
def test_live_connection_has_jit_off() -> None:
    _postgres_url()
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"


def test_a_new_connection_turns_jit_off_and_keeps_pgoptions(tmp_path) -> None:
    url = _postgres_url()
    assert _show("jit", url, tmp_path) == "off"
    # libpq's PGOPTIONS (an operator's statement_timeout, say) still applies: nothing replaces it.
    assert _show("statement_timeout", url, tmp_path, PGOPTIONS="-c statement_timeout=1234") == "1234ms"
    assert _show("jit", url, tmp_path, PGOPTIONS="-c statement_timeout=1234") == "off"


def test_jit_named_in_the_url_is_the_operators_choice(tmp_path) -> None:
    url = _postgres_url() + "?options=-c%20jit%3Don"
    assert _show("jit", url, tmp_path) == "on"
