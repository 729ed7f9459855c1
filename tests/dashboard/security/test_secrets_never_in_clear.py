"""No secret reaches the database, a log line, a page, an API answer or an export in clear.

Planted: a raw API key (used for real requests), a literal token attempted in a workload's
env_variables (must be refused), a workload secret given properly as a `scope/key` reference,
a Databricks token in settings, and a password inside a bad DATABASE_URL. Then every text and
JSON column of every table, the captured log at DEBUG, every page, the API answers and the CSV
exports are searched for the secret values.
"""

from __future__ import annotations

import json
import logging

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.test import Client

from dashboard.kit.env import env_url
from dashboard.models import ApiKeyRole
from runs.models import Run
from tests.dashboard.test_access_every_url import Seeded, fill_url, page_routes, seeded  # noqa: F401

HF_TOKEN = "hf_" + "Zq8Xw2Lp5Nv7Rt1Ys4Ub6Mc9Kd3Jf0Hg"
DATABRICKS_TOKEN = "dapi" + "0123456789abcdef0123456789abcdef"
DB_PASSWORD = "s3cr3t-db-pa55word"

WORKLOAD = """\
experiment_name: secret-test
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 8
command: python train.py
secrets:
  HF_TOKEN: ml-team/hf-token
"""


def _text_columns() -> list[tuple[type[models.Model], str]]:
    kinds = (models.CharField, models.TextField, models.JSONField)
    return [
        (model, field.name)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, kinds)
    ]


def _database_dump() -> str:
    """Every text and JSON value in every table, as one string to search."""
    parts = []
    for model, column in _text_columns():
        for value in model._default_manager.values_list(column, flat=True):
            parts.append(json.dumps(value) if not isinstance(value, str) else value)
    return "\n".join(parts)


@pytest.fixture
def planted(seeded: Seeded, settings, caplog: pytest.LogCaptureFixture) -> tuple[Seeded, list[str], list[str]]:  # noqa: F811
    """Plant every secret through the ways it could arrive; returns the secrets and the bodies seen."""
    caplog.set_level(logging.DEBUG)
    settings.DATABRICKS_TOKEN = DATABRICKS_TOKEN
    world = seeded.world
    raw_key = world.key(world.vision, ApiKeyRole.INGEST)
    api = Client(headers={"authorization": f"Bearer {raw_key}"})
    bodies: list[str] = []

    ok = api.post("/api/v1/runs", {"external_id": "wl-ok", "workload_yaml": WORKLOAD}, content_type="application/json")
    assert ok.status_code == 201, ok.content
    leaky = WORKLOAD + f"env_variables:\n  HF_TOKEN: {HF_TOKEN}\n"
    refused = api.post(
        "/api/v1/runs", {"external_id": "wl-leak", "workload_yaml": leaky}, content_type="application/json"
    )
    assert refused.status_code == 422
    assert not Run.objects.filter(external_id="wl-leak").exists()
    # A log line quoting the key (a misconfigured client printing its own header) is still a log.
    bodies += [ok.content.decode(), refused.content.decode()]
    for url in ["/api/v1/runs", "/api/v1/runs/wl-ok", "/api/v1/openapi.json"]:
        bodies.append(api.get(url).content.decode())
    bodies.append(api.get("/api/v1/runs", headers={"authorization": "Bearer " + raw_key + "x"}).content.decode())
    return seeded, [raw_key, HF_TOKEN, DATABRICKS_TOKEN], bodies


def test_secrets_are_not_in_any_table(planted) -> None:
    _, secrets, _ = planted
    dump = _database_dump()
    assert dump, "no text column was read"
    for secret in secrets:
        assert secret not in dump
    # The workload's secret stays a reference: that much is fine, and proves the run was stored.
    assert "ml-team/hf-token" in dump


def test_secrets_are_not_in_api_answers_or_logs(planted, caplog: pytest.LogCaptureFixture) -> None:
    _, secrets, bodies = planted
    logged = "\n".join(r.getMessage() + " " + str(r.args) for r in caplog.records)
    for secret in secrets:
        for body in bodies:
            assert secret not in body
        assert secret not in logged


def test_secrets_are_not_on_any_page_or_export(planted) -> None:
    world_objects, secrets, _ = planted
    staff = world_objects.world.client_for(world_objects.world.sam)
    urls = [fill_url(route, world_objects) for route in page_routes()]
    urls += ["/admin/dashboard/apikey/", "/costs/?format=csv", "/costs/prices/export.csv"]
    for url in urls:
        response = staff.get(url)
        if response.status_code == 405:
            continue
        body = b"".join(response.streaming_content) if response.streaming else response.content
        text = body.decode("utf-8", "replace")
        for secret in secrets:
            assert secret not in text, f"{url} shows a secret"


def test_a_bad_database_url_never_prints_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", f"mysql://airboard:{DB_PASSWORD}@db.internal:3306/airboard")
    with pytest.raises(ImproperlyConfigured) as error:
        env_url("DATABASE_URL", {"postgres", "sqlite"})
    assert DB_PASSWORD not in str(error.value)
    assert "***" in str(error.value)
