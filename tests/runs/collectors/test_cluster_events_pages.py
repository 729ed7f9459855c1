"""A paged `clusters/events` answer is read whole: `next_page` followed, with a loop guard.

Page 1 is the Clusters API reference's example answer (`cluster_events.json`: 3 events,
`next_page` with `offset` 50, `total_count` 55); page 2 (`cluster_events_page2.json`) is ours in
that shape, the last page (no `next_page`). The workspace is a script standing in for
`databricks api post /api/2.1/clusters/events --json {request}`: it answers by the request body.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from runs.collectors.cluster_events import collect_events, read_events
from runs.models import Cluster
from tests.conftest import TESTS, World

DATA = TESTS / "data" / "databricks"


def stand_in(tmp_path: Path, pages: dict[str, str]) -> str:
    """A command template answering page `pages[offset or '']` for the request it is given."""
    script = tmp_path / "events.py"
    script.write_text(
        "import json, pathlib, sys\n"
        "request = json.loads(sys.argv[1])\n"
        f"pages = {pages!r}\n"
        "log = pathlib.Path(sys.argv[2])\n"
        "log.write_text(log.read_text() + json.dumps(request, sort_keys=True) + '\\n' if log.exists() else"
        " json.dumps(request, sort_keys=True) + '\\n')\n"
        "print(pathlib.Path(pages[str(request.get('offset', ''))]).read_text())\n"
    )
    return f"{sys.executable} {script} {{request}} {tmp_path / 'requests.log'}"


def test_next_page_is_followed_until_the_last_page(world: World, tmp_path: Path) -> None:
    template = stand_in(
        tmp_path, {"": str(DATA / "cluster_events.json"), "50": str(DATA / "cluster_events_page2.json")}
    )
    cluster = Cluster.objects.create(team=world.vision, cluster_id="1202-211320-brick1", node_type_id="g5.12xlarge")

    lines = collect_events([cluster], template, timeout=30)

    assert lines == ["cluster events: 5 new"]
    assert sorted(cluster.events.values_list("kind", flat=True)) == [
        "CREATING", "RESTARTING", "RUNNING", "RUNNING", "TERMINATING",
    ]  # fmt: skip
    # The second request is the answer's next_page, for our cluster (the reference's example names another).
    requests = [json.loads(line) for line in (tmp_path / "requests.log").read_text().splitlines()]
    assert requests == [
        {"cluster_id": "1202-211320-brick1"},
        {"cluster_id": "1202-211320-brick1", "end_time": 1534371918659, "offset": 50},
    ]


def test_a_next_page_that_repeats_stops_the_read_and_says_so(tmp_path: Path) -> None:
    # A workspace answering page 1 whatever it is asked: its next_page never moves on.
    template = stand_in(tmp_path, {"": str(DATA / "cluster_events.json"), "50": str(DATA / "cluster_events.json")})

    read = read_events("1202-211320-brick1", template, timeout=30)

    assert read.problems == ["page 2: next_page repeats an earlier page; stopped after 2 pages"]
    assert len(read.events) == 6  # the same 3 twice; storing them is idempotent


def test_a_paged_answer_to_a_command_that_cannot_ask_for_the_next_page_is_named(tmp_path: Path) -> None:
    template = f'{sys.executable} -c "print(open({str(DATA / "cluster_events.json")!r}).read())" {{cluster_id}}'

    read = read_events("1202-211320-brick1", template, timeout=30)

    assert len(read.events) == 3
    assert read.problems[0].startswith(
        "the command printed one page (3 of 55 events) and names a next_page: only that page was read; put {request}"
    )
