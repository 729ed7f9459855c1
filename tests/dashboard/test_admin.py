"""Admin: every registered model's changelist renders; API keys never show their hash."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from dashboard.models import ApiKey, ApiKeyRole
from runs.choices import BatchKind
from runs.models import GpuMinute, GpuSample, IngestBatch, LogChunk, MetricPoint, Node, Run
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(world: World) -> Client:
    root = User.objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(root)
    return client


@pytest.fixture
def data(world: World) -> Run:
    """A row in each runs table, so changelists render real rows and their related objects."""
    run = make_run(world.vision, "admin-run")
    node = Node.objects.get(attempt__run=run)
    LogChunk.objects.create(node=node, seq=0, text="hello\n", line_count=1)
    GpuSample.objects.create(run=run, node=node, gpu_index=0, ts=T0, utilization_gpu=50)
    GpuMinute.objects.create(run=run, node=node, gpu_index=0, minute=T0, samples=1, utilization_gpu_max=50)
    MetricPoint.objects.create(run=run, key="loss", step=0, ts=T0 + timedelta(seconds=1), value=1.0)
    IngestBatch.objects.create(team=world.vision, kind=BatchKind.METRICS, content_hash="0" * 64, rows=[], row_count=0)
    ApiKey.issue(world.vision, ApiKeyRole.INGEST, name="collector")
    return run


def registered() -> list[str]:
    return sorted(f"{m._meta.app_label}.{m._meta.model_name}" for m in admin.site._registry)


@pytest.mark.parametrize("label", registered())
def test_every_changelist_renders(superuser_client: Client, data: Run, label: str) -> None:
    app_label, model_name = label.split(".")
    response = superuser_client.get(reverse(f"admin:{app_label}_{model_name}_changelist"))
    assert response.status_code == 200, label


def test_runs_models_are_all_registered() -> None:
    for label in ("runs.run", "runs.attempt", "runs.node", "runs.logchunk", "runs.gpusample", "runs.gpuminute"):
        assert label in registered()
    assert "runs.metricpoint" in registered() and "runs.ingestbatch" in registered()
    assert "dashboard.apikey" in registered()


def test_run_change_page_with_attempt_inline(superuser_client: Client, data: Run) -> None:
    response = superuser_client.get(reverse("admin:runs_run_change", args=[data.pk]))
    assert response.status_code == 200
    assert b"attempts-TOTAL_FORMS" in response.content


def test_api_key_hash_is_never_listed(superuser_client: Client, data: Run) -> None:
    key = ApiKey.objects.get()
    changelist = superuser_client.get(reverse("admin:dashboard_apikey_changelist")).content.decode()
    assert key.prefix in changelist
    assert key.key_hash not in changelist
    change = superuser_client.get(reverse("admin:dashboard_apikey_change", args=[key.pk])).content.decode()
    # Shown read-only on the detail page, never as an editable input.
    assert 'name="key_hash"' not in change


def test_revoke_action(superuser_client: Client, world: World, data: Run) -> None:
    live = ApiKey.objects.get()
    already, _ = ApiKey.issue(world.nlp, ApiKeyRole.READ)
    ApiKey.objects.filter(pk=already.pk).update(revoked_at=T0)
    response = superuser_client.post(
        reverse("admin:dashboard_apikey_changelist"),
        {"action": "revoke", "_selected_action": [live.pk, already.pk]},
        follow=True,
    )
    assert b"Revoked 1 key." in response.content
    live.refresh_from_db()
    already.refresh_from_db()
    assert live.revoked_at is not None
    assert already.revoked_at == T0  # revoking again keeps the original time
    assert ApiKey.authenticate("anything") is None


def test_adding_a_key_in_admin_shows_the_raw_key_once(superuser_client: Client, world: World) -> None:
    response = superuser_client.post(
        reverse("admin:dashboard_apikey_add"),
        {"name": "node agent", "team": world.vision.pk, "role": ApiKeyRole.INGEST},
        follow=True,
    )
    assert response.status_code == 200
    raw = next(str(m).split(": ", 1)[1].split(" ", 1)[0] for m in response.context["messages"] if "New key" in str(m))
    key = ApiKey.authenticate(raw)
    assert key is not None and key.name == "node agent" and key.team == world.vision
    assert ApiKey.objects.count() == 1
