"""Production settings: `check --deploy` is clean, the secret key is required, passwords use Argon2."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from django.contrib.auth.hashers import check_password, make_password

from tests.conftest import ROOT


def _run(code: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    # DJANGO_ALLOW_ASYNC_UNSAFE is the browser tests' harness setting (tests/e2e/conftest.py),
    # never a deployment's: the deployment check rightly refuses it.
    dropped = {"DJANGO_SECRET_KEY", "DJANGO_DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    environment = {k: v for k, v in os.environ.items() if k not in dropped}
    environment.update(env)
    return subprocess.run(
        [sys.executable, *code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_passes_with_no_warnings(tmp_path) -> None:
    result = _run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING", "--settings=dashboard.settings_production"],
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        AIRBOARD_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_production_refuses_to_start_without_a_secret_key(tmp_path) -> None:
    result = _run(["manage.py", "check", "--settings=dashboard.settings_production"], AIRBOARD_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is required" in result.stderr
    assert not (tmp_path / "secret_key").exists()


def test_production_settings_values(tmp_path) -> None:
    probe = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='dashboard.settings_production'; django.setup();"
        "from django.conf import settings as s;"
        "print(s.DEBUG, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE,"
        " s.SECURE_HSTS_SECONDS, s.SECURE_PROXY_SSL_HEADER, s.PASSWORD_HASHERS[0].rsplit('.', 1)[1])"
    )
    result = _run(
        ["-c", probe],
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_DEBUG="1",
        DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto,https",
        AIRBOARD_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "False", "True", "True", "True", "31536000", "('HTTP_X_FORWARDED_PROTO',", "'https')", "Argon2PasswordHasher",
    ]  # fmt: skip


def test_passwords_hash_with_argon2(settings) -> None:
    # The suite swaps in a fast hasher; this test puts the real list back.
    from dashboard import settings as base

    settings.PASSWORD_HASHERS = base.PASSWORD_HASHERS
    hashed = make_password("correct horse battery staple")
    assert hashed.startswith("argon2$argon2id$")
    assert check_password("correct horse battery staple", hashed)
