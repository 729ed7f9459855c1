"""Issue 35's small slips: the admin's plural, a share's apostrophe, the icon, the API docs' frame."""

from __future__ import annotations

from datetime import timedelta
from html import unescape

import pytest
from django.contrib import admin
from django.test import Client

from billing.models import InstancePrice, UsagePolicy
from runs.choices import RunSource
from runs.models import Cluster
from tests.conftest import T0, World, make_run


def test_the_admin_says_usage_policies() -> None:
    assert UsagePolicy._meta.verbose_name_plural == "usage policies"
    assert UsagePolicy in admin.site._registry


@pytest.mark.django_db
@pytest.mark.parametrize(("runs", "expected"), [(1, "(its 1 run's share"), (3, "(its 3 runs' shares")])
def test_a_clusters_runs_share_reads_right_in_the_singular_and_the_plural(
    world: World, runs: int, expected: str
) -> None:
    start, end = T0 - timedelta(hours=1), T0 + timedelta(hours=4)
    InstancePrice.objects.create(instance_type="g5.12xlarge", effective_from=start, usd_per_hour="10.00")
    cluster = Cluster.objects.create(
        team=world.vision, cluster_id="shared", node_type_id="g5.12xlarge", num_workers=0, single_node=True,
        region="us-west-2", last_restarted_time=start, terminated_time=end,
    )  # fmt: skip
    for i in range(runs):
        make_run(world.vision, f"r{i}", source=RunSource.CLASSIC, cluster=cluster, accelerator_type="",
                 num_accelerators=4, started_at=T0, ended_at=T0 + timedelta(hours=1))  # fmt: skip
    html = world.client_for(world.alice).get(f"/runs/clusters/{cluster.pk}/").content.decode()
    assert expected in unescape(html)


def test_the_browsers_favicon_request_lands_on_the_sites_icon(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/favicon.svg")


@pytest.mark.django_db
def test_the_api_docs_page_has_the_sites_header_and_no_cdn(world: World) -> None:
    html = world.client_for(world.alice).get("/api/v1/docs").content.decode()
    assert 'class="topbar"' in html and 'href="/"' in html and ">Runs</a>" in html
    assert 'id="swagger-ui"' in html and "swagger-ui-bundle.js" in html and 'id="swagger-settings"' in html
    assert 'aria-current="page">API docs' in html
    assert "cdn" not in html.lower() and "https://" not in html
