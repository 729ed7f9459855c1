"""The collectors page's refusal count is staff's (issue 33).

On 4ab1749 the agent counted rows naming another team's run as refused and dropped rows of runs
nobody has without counting them, and every member saw the count: pushing a row naming a guessed
run id and watching the count move told whether another team had a run with that id. The agent's
HTTP door (?bad_rows=drop) now answers both alike, and the count and its reasons are staff's.
"""

from __future__ import annotations

import csv
import io

import pytest

from runs.choices import RunStatus
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def push(world: World, run_id: str) -> dict:
    sample = {"run": run_id, "run_source": "serverless", "gpu": 0, "ts": T0.isoformat(), "utilization_gpu": 1.0}
    response = world.api(world.nlp).post(
        "/api/v1/gpu-samples?bad_rows=drop", {"samples": [sample]}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def refused_cell(world: World, user: object) -> str:
    text = world.client_for(user).get("/collectors/", {"format": "csv"}).content.decode()
    return next(row["refused_total"] for row in csv.DictReader(io.StringIO(text)) if row["name"] == "agent")


def test_a_member_cannot_watch_the_refusal_count(world: World) -> None:
    make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    unknown, theirs = push(world, "no-such-run"), push(world, "1001")  # nobody's; vision's
    # The answer to the pusher is the same whether another team holds the id or nobody does.
    assert unknown["problems"][0].replace("no-such-run", "X") == theirs["problems"][0].replace("1001", "X")
    assert refused_cell(world, world.sam) == "2"
    assert refused_cell(world, world.charlie) == ""
    page = world.client_for(world.charlie).get("/collectors/").content.decode()
    assert "in your team" not in page
    assert "in your team" in world.client_for(world.sam).get("/collectors/").content.decode()
