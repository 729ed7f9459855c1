"""The run page's log viewer in Chromium: a window of the log, a linked line found and marked, and
earlier lines paged in without a page load (the URL follows, the back button returns)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from runs.logs import INLINE_LINE_LIMIT
from runs.models import LogChunk
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)

LINES = 2_000


@pytest.fixture
def long_log(scene: Scene):
    run = scene.succeeded
    node = run.attempts.order_by("-number").first().nodes.order_by("index").first()
    text = "".join(f"step {i} loss {2.5 - i / 1e5:.5f}\n" for i in range(1, LINES + 1))
    LogChunk.objects.filter(node=node).delete()
    LogChunk.objects.create(node=node, seq=0, text=text, line_count=LINES)
    return run, node


def shown(page) -> list[int]:
    return page.evaluate("[...document.querySelectorAll('#log-body pre.log .line')].map(l => Number(l.id.slice(1)))")


def test_a_link_to_a_line_shows_its_window_and_earlier_lines_page_in(browsing: Browsing, long_log) -> None:
    run, node = long_log
    page = browsing.page
    browsing.login_as(run.team.user_set.get(username="alice"))
    attempt = node.attempt.number
    # A deep link to line 500, as the failure page's "Jump to line" gives: not in the tail, so
    # logs.js asks for the window around it, then marks it and scrolls to it.
    browsing.goto(f"/runs/{run.pk}/?attempt={attempt}&node={node.index}#L500")
    line = page.locator("#log-body #L500")
    expect(line).to_have_class(re.compile(r"line-target"))
    expect(line).to_be_in_viewport()
    assert shown(page) == list(range(500 - INLINE_LINE_LIMIT // 2, 500 - INLINE_LINE_LIMIT // 2 + INLINE_LINE_LIMIT))
    page.evaluate("window.__sameDocument = true")
    swaps = int(page.evaluate("document.getElementById('log-body').dataset.swaps"))
    page.locator("#log-body a[data-log-page]", has_text="earlier lines").click()
    page.wait_for_function(f"() => Number(document.getElementById('log-body').dataset.swaps) > {swaps}")
    first = 500 - INLINE_LINE_LIMIT // 2
    assert shown(page) == list(range(max(1, first - INLINE_LINE_LIMIT), first))
    page.wait_for_url(re.compile(rf"before={first}"))
    # The last lines are one click away, and the back button walks back through the windows.
    page.locator("#log-body a[data-log-page]", has_text="The end").click()
    page.wait_for_url(re.compile(r"^(?!.*before=)"))
    page.wait_for_function(f"() => document.querySelector('#log-body #L{LINES}') !== null")
    page.go_back()
    page.wait_for_url(re.compile(rf"before={first}"))
    page.wait_for_function(f"() => document.querySelector('#log-body #L{first - 1}') !== null")
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"
