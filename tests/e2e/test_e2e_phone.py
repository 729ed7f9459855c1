"""A phone (390x844) in a real Chromium: the nav collapses and no page scrolls sideways.

Wide tables scroll inside their card; the page itself is never wider than the viewport. The same
walk at 1280x800 checks the desktop layout did not regress while the phone's was fixed.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.models import PostMortem
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
# How far the document sticks out past the viewport, in px (0 when it fits).
OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"


def _pages(scene: Scene) -> list[str]:
    postmortem = PostMortem.objects.create(
        run=scene.failed,
        owner=scene.world.alice,
        title="OOM on node 1",
        root_cause="RuntimeError: CUDA out of memory. " + "z" * 300,
        body="## Timeline\n\n| when | what |\n|---|---|\n| 09:00 | " + "x" * 300 + " |\n\n`" + "y" * 400 + "`\n",
    )
    return [
        "/",
        "/runs/",
        f"/runs/{scene.running.pk}/",
        f"/runs/{scene.failed.pk}/",
        f"/runs/{scene.failed.pk}/failure/",
        f"/runs/{scene.failed.pk}/log/",
        "/runs/fleet/",
        "/runs/failures/",
        "/runs/clusters/",
        "/runs/advice/",
        "/runs/postmortems/",
        reverse("postmortem_detail", args=[postmortem.pk]),
        "/costs/",
        "/costs/prices/",
        "/costs/policies/",
        f"/costs/policies/{scene.policy.pk}/",
        f"/costs/policies/{scene.policy.pk}/versions/",
        "/collectors/",
    ]


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390x844", "1280x800"])
def test_no_page_scrolls_sideways(browsing: Browsing, scene: Scene, viewport: dict[str, int]) -> None:
    page = browsing.page
    page.set_viewport_size(viewport)
    browsing.login_as(scene.world.sam)
    wide = {}
    for path in _pages(scene):
        response = browsing.goto(path)
        assert response.status == 200, path
        overflow = page.evaluate(OVERFLOW)
        if overflow > 0:
            wide[path] = overflow
    assert wide == {}, f"pages wider than {viewport['width']} px (by px): {wide}"


def test_the_phone_nav_collapses_behind_a_menu_button(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    page.set_viewport_size(PHONE)
    browsing.login_as(scene.world.alice)
    browsing.goto("/runs/")
    runs_link = page.locator("nav.nav a", has_text="Runs")
    logout = page.get_by_role("button", name="Log out")
    # Closed: the first screen is the page, not ten links.
    assert not runs_link.is_visible() and not logout.is_visible()
    assert page.locator("h1").first.bounding_box()["y"] < 200
    page.locator("label.nav-toggle-label", has_text="Menu").click()
    assert runs_link.is_visible() and logout.is_visible()
    box = logout.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    runs_link.click()
    page.wait_for_url("**/runs/")
    browsing.screenshot("phone-runs")


def test_the_desktop_nav_shows_every_link_without_a_menu(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    page.set_viewport_size(DESKTOP)
    browsing.login_as(scene.world.alice)
    browsing.goto("/")
    assert not page.locator("label.nav-toggle-label", has_text="Menu").is_visible()
    assert page.locator("nav.nav a", has_text="Collectors").is_visible()
    assert page.get_by_role("button", name="Log out").is_visible()
