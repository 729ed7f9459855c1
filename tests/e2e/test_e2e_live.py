"""Live pages in Chromium: status badges and chart points update without a reload; local times; dark charts.

Timers run on Playwright's fake clock (`page.clock`), so a 5 s poll costs no wall time; the
requests those timers make are real, to the live server.
"""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs.choices import RunStatus
from runs.models import GpuSample, Node, Run
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_page_status_and_chart_update_without_reload(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    page.clock.install()
    browsing.goto(f"/runs/{scene.running.pk}/#gpus")  # the panels load as they come into view
    expect(page.locator("h1 .status")).to_have_text("Running")
    chart = page.locator("[data-figure=fig-utilization]")
    expect(chart.locator(".scatterlayer .trace")).to_have_count(3)  # the envelope: band and mean
    page.evaluate("window.__sameDocument = true")
    page.locator("#gpu-view").get_by_role("link", name="each GPU").click()
    expect(chart.locator(".scatterlayer .trace")).to_have_count(scene.running_gpus)

    # Three new samples per GPU after the chart's last point: one poll appends them all.
    node = Node.objects.get(attempt__run=scene.running)
    now = timezone.now()
    GpuSample.objects.bulk_create(
        GpuSample(run=scene.running, node=node, gpu_index=gpu, ts=now + timedelta(seconds=s), utilization_gpu=50.0)
        for gpu in range(scene.running_gpus) for s in (1, 2, 3)
    )  # fmt: skip
    page.clock.run_for(10_500)
    expect(chart).to_have_attribute("data-live-points", str(3 * scene.running_gpus))

    # The run fails: both badges on the page follow within one poll.
    Run.objects.filter(pk=scene.running.pk).update(status=RunStatus.FAILED, ended_at=timezone.now())
    page.clock.run_for(5_500)
    expect(page.locator("h1 .status")).to_have_text("Failed")
    expect(page.locator("h1 .status")).to_have_class("badge status status-failed")
    expect(page.locator(".facts .status")).to_have_text("Failed")
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"


def test_run_list_active_row_updates(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    page.clock.install()
    browsing.goto("/runs/")
    row = page.locator("tr", has_text="vision-live-1")
    expect(row.locator(".status")).to_have_text("Running")
    # Only the active run's row polls.
    expect(page.locator("tr[data-live-run]")).to_have_count(1)
    Run.objects.filter(pk=scene.running.pk).update(status=RunStatus.SUCCEEDED, ended_at=timezone.now())
    page.clock.run_for(5_500)
    expect(row.locator(".status")).to_have_text("Succeeded")
    expect(page.locator("tr[data-live-run]")).to_have_count(0)


def test_times_in_the_viewers_zone_with_utc_on_hover(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto(f"/runs/{scene.failed.pk}/")
    started = page.locator(".facts time").nth(1)
    expect(started).to_have_attribute("data-local", "1")
    utc_start = scene.failed.started_at.astimezone(UTC)
    expect(started).to_have_attribute("title", f"{utc_start:%Y-%m-%d %H:%M:%S} UTC · shown in America/New York")
    # The browser runs in New York (see conftest): its text is 4 or 5 hours behind UTC.
    local = page.evaluate(
        """(el) => new Date(el.getAttribute("datetime")).toLocaleString("en-US", {timeZone: "America/New_York",
             month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23"})""",
        started.element_handle(),
    )
    expect(started).to_have_text(local)


def test_charts_follow_the_dark_colour_scheme(dark_browsing: Browsing, scene: Scene) -> None:
    page = dark_browsing.page
    dark_browsing.login_as(scene.world.alice)
    dark_browsing.goto(f"/runs/{scene.running.pk}/#gpus")  # the panels load as they come into view
    expect(page.locator("[data-figure=fig-utilization] .main-svg").first).to_be_visible()
    text = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--text').trim()")
    font = page.evaluate("document.querySelector('[data-figure=fig-utilization]')._fullLayout.font.color")
    assert font.replace(" ", "").lower() == text.replace(" ", "").lower()
    # Light text on the dark page: the axis titles are readable.
    r, g, b = (
        page.evaluate("getComputedStyle(document.querySelector('[data-figure=fig-utilization] .gtitle')).fill")
        .removeprefix("rgb(")
        .removesuffix(")")
        .split(",")
    )
    assert int(r) + int(g) + int(b) > 3 * 150, "chart title too dark for the dark theme"
    dark_browsing.screenshot("run-page-dark")
