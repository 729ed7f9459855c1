"""The main pages in a real Chromium: login, run list, run page, logs, policies, costs.

Each test uses its own browser context; the `browsing` fixture fails the test on any console
error, uncaught exception or CSP violation the pages produce.
"""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from tests.conftest import PASSWORD
from tests.e2e.conftest import Browsing, Scene, path_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_anonymous_visit_is_sent_to_login(browsing: Browsing, scene: Scene) -> None:
    browsing.goto(f"/runs/{scene.failed.pk}/")
    assert path_of(browsing.page.url) == f"/login/?next=/runs/{scene.failed.pk}/"
    expect(browsing.page.locator("h1")).to_have_text("Log in to Airboard")


def test_login_through_the_form_by_keyboard(browsing: Browsing, scene: Scene) -> None:
    """Tab order on the login page is username, password, submit; Enter logs in."""
    page = browsing.page
    browsing.goto("/login/?next=/runs/")
    page.locator("input[name=username]").focus()
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "password"
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Tab")
    focused = page.evaluate("[document.activeElement.tagName, document.activeElement.type]")
    assert focused == ["BUTTON", "submit"]
    # The focus ring is visible: the keyboard user sees where they are.
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", ""), f"no visible focus style on the submit button ({outline})"
    browsing.screenshot("login")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/runs/$"))
    expect(page.locator("header .logout .muted")).to_have_text("alice")


def test_wrong_password_stays_on_login(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.goto("/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "not the password")
    page.click("button[type=submit]")
    expect(page.locator(".form-errors")).to_be_visible()
    assert path_of(page.url).startswith("/login/")


def test_run_list_status_filter(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto("/runs/")
    expect(page.locator("table.runs-table tbody tr")).to_have_count(3)
    browsing.screenshot("runs")
    page.select_option("select[name=status]", "failed")
    page.click(".filter-actions button[type=submit]")
    page.wait_for_url(re.compile(r"status=failed"))
    rows = page.locator("table.runs-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.locator(".run-id")).to_have_text("vision-failed-1")
    expect(rows.locator(".status")).to_have_text("Failed")
    # Charlie's failed run (team nlp) never shows.
    expect(page.locator("text=nlp-secret-1")).to_have_count(0)


def test_run_page_draws_one_trace_per_gpu(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    # The GPU section's link (#gpus): its panels load as they come into view.
    browsing.goto(f"/runs/{scene.running.pk}/#gpus")
    chart = page.locator("[data-figure=fig-utilization]")
    expect(chart.locator(".main-svg").first).to_be_visible()
    # By default the run's GPUs are one envelope: the min-max band and the mean.
    assert page.evaluate("document.querySelector('[data-figure=fig-utilization]').data.length") == 3
    assert (
        page.evaluate("document.querySelector('[data-figure=fig-utilization]').layout.meta.gpus") == scene.running_gpus
    )
    # "Each GPU" draws one trace per GPU, without a page load.
    page.evaluate("window.__sameDocument = true")
    page.locator("#gpu-view").get_by_role("link", name="each GPU").click()
    page.wait_for_url(re.compile(r"view=gpus"))
    expect(chart.locator(".scatterlayer .trace")).to_have_count(scene.running_gpus)
    expect(page.locator("[data-figure=fig-memory] .scatterlayer .trace")).to_have_count(scene.running_gpus)
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"
    # Deep links: the MLflow run and the run's page in its source workspace.
    expect(page.locator(".actions a", has_text="Run page")).to_have_attribute(
        "href", "https://adb-1234.cloud.databricks.com/jobs/runs/812736451"
    )
    browsing.screenshot("run-page")
    page.locator("#gpus").scroll_into_view_if_needed()
    browsing.screenshot("run-telemetry", full_page=True)


def test_log_viewer_switch_attempt_node_and_search(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto(f"/runs/{scene.failed.pk}/")
    log = page.locator("pre.log")
    # The latest attempt's first node by default.
    expect(log).to_contain_text("attempt 2 node 0 step 0")
    page.select_option(".log-controls select[name=attempt]", "1")
    page.wait_for_url(re.compile(r"attempt=1"))
    expect(log).to_contain_text("attempt 1 node 0 step 0")
    page.select_option(".log-controls select[name=node]", "1")
    page.wait_for_url(re.compile(r"node=1"))
    expect(log).to_contain_text("attempt 1 node 1 step 0")
    page.select_option(".log-controls select[name=attempt]", "2")
    page.wait_for_url(re.compile(r"attempt=2"))
    page.select_option(".log-controls select[name=node]", "1")
    page.wait_for_url(re.compile(r"attempt=2&node=1"))
    page.fill(".log-controls input[name=q]", "out of memory")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"q=out"))
    expect(page.locator(".match-count")).to_have_text("2 matching lines")
    marks = page.locator("pre.log mark")
    expect(marks).to_have_count(2)
    expect(marks.first).to_have_text(re.compile("out of memory", re.IGNORECASE))
    expect(page.locator("pre.log .line").first).to_contain_text("RuntimeError: CUDA out of memory")
    browsing.screenshot("run-log-search")


def test_staff_edits_a_policy_and_sees_the_new_version(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.sam)
    browsing.goto(f"/costs/policies/{scene.policy.pk}/edit/")
    page.fill("input[name=budget_usd]", "2500")
    page.click("form.card button[type=submit]")
    page.wait_for_url(re.compile(rf"/costs/policies/{scene.policy.pk}/$"))
    expect(page.locator(".messages")).to_contain_text("version 2")
    browsing.goto(f"/costs/policies/{scene.policy.pk}/versions/")
    newest = page.locator(".policy-version").first
    expect(newest.locator("h2")).to_contain_text("Version 2")
    expect(newest.locator("tbody tr", has_text="Budget (USD)")).to_contain_text("$2,500.00")  # labels, money formatted
    browsing.screenshot("policy-history")


def test_cost_page_downloads_csv(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto("/costs/")
    expect(page.locator("[data-figure=spend-figure] .main-svg").first).to_be_visible()
    browsing.screenshot("costs")
    with page.expect_download() as info:
        page.locator("a", has_text="Download daily CSV").click()
    download = info.value
    assert download.suggested_filename.startswith("costs-daily-")
    rows = list(csv.reader(io.StringIO(download.path().read_text(encoding="utf-8"))))
    assert rows[0] == ["day", "team", "compute_usd", "egress_usd", "idle_usd", "total_usd", "gpu_hours",
                       "idle_gpu_hours", "figure"]  # fmt: skip
    assert all(r[8].startswith(("estimated, as of ", "lower bound")) for r in rows[1:])
    assert {r[1] for r in rows[1:]} == {"vision"}
    assert sorted(Decimal(r[2]) for r in rows[1:]) == [Decimal("12.50"), Decimal("30.25")]
