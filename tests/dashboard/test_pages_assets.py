"""Every page that draws a chart loads the script that draws it, and every page has an icon.

A `data-figure` div without plotly.js and charts.js stays an empty box with no console error to
say why (the policy burn-downs did exactly that), so the rule is checked page by page.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from billing.models import UsagePolicy
from billing.policies import versions
from tests.conftest import World

SCRIPTS = ('<script src="/static/vendor/plotly.min.js" defer></script>', '<script src="/static/js/charts.js" defer>')


@pytest.fixture
def policy(world: World) -> UsagePolicy:
    policy = UsagePolicy.objects.create(name="vision-research", budget_usd=Decimal("1000"))
    policy.teams.add(world.vision)
    versions.record_version(policy, world.sam, note="created")
    return policy


@pytest.mark.parametrize("name", ["policy_list", "policy_detail"])
def test_a_page_with_a_figure_loads_plotly_and_charts_js(world: World, policy: UsagePolicy, name: str) -> None:
    url = reverse(name, args=[policy.pk]) if name == "policy_detail" else reverse(name)
    html = world.client_for(world.alice).get(url).content.decode()
    assert "data-figure=" in html, "the page should draw a burn-down"
    for script in SCRIPTS:
        assert script in html


@pytest.mark.parametrize("url", ["/login/", "/"])
def test_every_page_links_an_icon_that_is_served(world: World, url: str) -> None:
    client = world.client_for(world.alice) if url != "/login/" else Client()
    html = client.get(url).content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html
    response = Client().get("/static/favicon.svg")
    assert response.status_code == 200
    assert b"<svg" in b"".join(response.streaming_content)
