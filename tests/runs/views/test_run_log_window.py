"""The log viewer sends a window of INLINE_LINE_LIMIT lines, never the whole log: the tail, or the lines
before or after another window, or those around a linked line (#L123), searched or not."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.choices import RunStatus
from runs.logs import INLINE_LINE_LIMIT
from runs.models import LogChunk
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db


def numbers(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<span class="line" id="L(\d+)"', html)]


def logged_run(world: World, lines: dict[int, int], **fields: object):
    """A run whose node i logs lines[i] lines "step N loss ...", in chunks of 1,000 lines."""
    run = make_run(world.vision, **fields)
    attempt = run.attempts.get()
    for index, count in lines.items():
        node = attempt.nodes.get_or_create(index=index, defaults={"host": f"10.0.0.{index + 1}"})[0]
        for seq, first in enumerate(range(1, count + 1, 1000)):
            text = "".join(f"step {i} loss {2.5 - i / 1e5:.5f}\n" for i in range(first, min(first + 1000, count + 1)))
            LogChunk.objects.create(node=node, seq=seq, text=text, line_count=text.count("\n"))
    return run


def test_the_fragment_is_the_same_size_for_a_log_of_2000_or_20000_lines(world: World) -> None:
    run = logged_run(world, {0: 2_000, 1: 20_000})
    client = world.client_for(world.alice)
    url = reverse("run_log_view", args=[run.pk])
    client.get(url)  # warm: the session, the user
    sizes, counts = {}, {}
    for node, total in ((0, 2_000), (1, 20_000)):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url, {"attempt": "1", "node": str(node)})
        html = response.content.decode()
        # The tail: the last INLINE_LINE_LIMIT lines, and a link to the ones before them.
        assert numbers(html) == list(range(total - INLINE_LINE_LIMIT + 1, total + 1))
        assert f"{total:,} lines." in html and f"Showing lines {total - INLINE_LINE_LIMIT + 1:,}" in html
        assert f"before={total - INLINE_LINE_LIMIT + 1}#log" in html and "data-log-page" in html
        sizes[total], counts[total] = len(response.content), len(queries.captured_queries)
    # Ten times the log: the same window, the same bytes give or take the longer line numbers.
    assert sizes[2_000] < 40_000 and sizes[20_000] < 40_000 and abs(sizes[20_000] - sizes[2_000]) < 2_000, sizes
    # One more chunk batch read for the longer log (50 chunks a round trip), no more.
    assert counts[20_000] <= counts[2_000] + 1, counts


def test_earlier_later_and_linked_windows_page_through_the_log(world: World) -> None:
    run = logged_run(world, {0: 2_000}, status=RunStatus.RUNNING, ended_at=None)
    client = world.client_for(world.alice)
    url = reverse("run_log_view", args=[run.pk])
    tail = client.get(url).content.decode()
    # The live tail follows the log only while the window shows its end.
    assert "data-logtail=" in tail and 'data-logtail-after="2000"' in tail
    earlier = client.get(url, {"attempt": "1", "node": "0", "before": "1701"}).content.decode()
    assert numbers(earlier) == list(range(1401, 1701)) and "data-logtail=" not in earlier
    assert "1,400 earlier lines" in earlier and "300 later lines" in earlier and "start=1701#log" in earlier
    first = client.get(url, {"before": "150"}).content.decode()
    assert numbers(first) == list(range(1, 150)) and "earlier line" not in first
    later = client.get(url, {"start": "1850"}).content.decode()
    assert numbers(later) == list(range(1850, 2001)) and "later line" not in later and "data-logtail=" in later
    # A link to line 1,000 (#L1000): the window around it, the line in it.
    around = client.get(url, {"line": "1000"}).content.decode()
    shown = numbers(around)
    assert 1000 in shown and shown[0] == 1000 - INLINE_LINE_LIMIT // 2 and len(shown) == INLINE_LINE_LIMIT
    # The links go back to the run page with the window in the URL: the page is linkable as it is shown.
    assert f'href="/runs/{run.pk}/?attempt=1&amp;node=0&amp;before=850#log"' in around


def test_a_search_pages_over_its_matches(world: World) -> None:
    run = logged_run(world, {0: 2_000})
    client = world.client_for(world.alice)
    url = reverse("run_log_view", args=[run.pk])
    # "loss 2.49": lines 1-1000 (2.5 - i / 1e5 from 2.49999 down to 2.49000), 1,000 matches.
    found = client.get(url, {"q": "loss 2.49"}).content.decode()
    assert "1,000 matching lines" in found and numbers(found) == list(range(701, 1001))
    assert found.count("<mark>loss 2.49</mark>") == INLINE_LINE_LIMIT
    assert "700 earlier matches" in found and "q=loss%202.49&amp;before=701#log" in found
    earlier = client.get(url, {"q": "loss 2.49", "before": "701"}).content.decode()
    assert numbers(earlier) == list(range(401, 701)) and "300 later matches" in earlier
    nothing = client.get(url, {"q": "no such text"}).content.decode()
    assert "No line contains" in nothing and numbers(nothing) == []


@pytest.mark.parametrize("key", ["start", "before", "line"])
@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5", "²", "9" * 40])
def test_a_window_that_is_not_a_line_number_is_a_400_naming_it(world: World, key: str, value: str) -> None:
    run = logged_run(world, {0: 10})
    response = world.client_for(world.alice).get(reverse("run_log_view", args=[run.pk]), {key: value})
    assert response.status_code == 400 and response.content.decode().startswith(f"{key} must be a line number")
