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


# Every drawn chart's modebar and title, as boxes in the viewport (None where a chart has no title).
CHART_BOXES = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
    const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
                        return {x: r.left, y: r.top, right: r.right, bottom: r.bottom}; };
    return {id: gd.dataset.figure, chart: box(gd), title: box(gd.querySelector('.gtitle')),
            modebar: box(gd.querySelector('.modebar'))};
})"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["x"] < b["right"] and b["x"] < a["right"] and a["y"] < b["bottom"] and b["y"] < a["bottom"]


def test_on_a_phone_the_chart_controls_keep_off_the_panel_titles(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    page.set_viewport_size(PHONE)
    browsing.login_as(scene.world.alice)
    browsing.goto(f"/runs/{scene.running.pk}/")
    # The GPU panels draw once they come into view.
    page.locator("#gpu-panels").scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('#gpu-panels .js-plotly-plot .gtitle').length >= 2")
    checked = 0
    for chart in page.locator(".js-plotly-plot").all():
        # The modebar shows on a tap (hover): measure it as the reader sees it.
        chart.scroll_into_view_if_needed()
        chart.hover()
        boxes = {b["id"]: b for b in page.evaluate(CHART_BOXES)}[chart.get_attribute("data-figure")]
        # Full width: the chart spans the content column, and the viewport holds it.
        assert boxes["chart"]["right"] - boxes["chart"]["x"] >= PHONE["width"] - 64, boxes
        assert boxes["chart"]["x"] >= 0 and boxes["chart"]["right"] <= PHONE["width"], boxes
        if boxes["title"] and boxes["modebar"]:
            assert not _overlap(boxes["title"], boxes["modebar"]), boxes
            checked += 1
    assert checked >= 2, "the GPU panels, titled, with their modebar"
    browsing.screenshot("phone-run-charts")
