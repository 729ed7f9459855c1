"""runs/<pk>/log/view/: the run page's log viewer alone, swapped in by logs.js on a node or attempt switch."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import LogChunk
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db


def test_the_log_view_answers_one_nodes_log_without_the_page(world: World) -> None:
    run = make_run(world.vision)
    attempt = run.attempts.get()
    first = attempt.nodes.get()
    second = attempt.nodes.create(index=1, host="10.0.0.2")
    for node in (first, second):
        text = "".join(f"node {node.index} step {i}\n" for i in range(50))
        LogChunk.objects.create(node=node, seq=0, text=text, line_count=50)
    client = world.client_for(world.alice)
    url = reverse("run_log_view", args=[run.pk])
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, {"attempt": "1", "node": "1"})
    html = response.content.decode()
    assert response.status_code == 200 and "node 1 step 49" in html and "node 0 step" not in html
    assert response["Cache-Control"] == "private, no-cache"
    # The viewer alone: its form posts back to the run page, no charts, no page chrome.
    assert f'action="/runs/{run.pk}/#log"' in html and "data-figure" not in html and "<html" not in html
    assert not [q for q in queries.captured_queries if "runs_gpu" in q["sql"]]  # no telemetry read
    searched = client.get(url, {"attempt": "1", "node": "0", "q": "step 4"}).content.decode()
    assert "11 matching lines" in searched
    # The run page carries the same viewer, and the URL logs.js swaps it from.
    page = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    # The frame leaves the log out (logs.js fetches it after the first charts): a link to it as text instead.
    assert f'data-fragment="{url}" data-lazy' in page and "node 0 step" not in page
    assert f'href="/runs/{run.pk}/log/?attempt=1&amp;node=0"' in page


def test_another_teams_run_has_no_log_view(world: World) -> None:
    run = make_run(world.nlp, "nlp-1")
    assert world.client_for(world.alice).get(reverse("run_log_view", args=[run.pk])).status_code == 404
