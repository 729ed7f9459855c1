"""The collectors page's refusal count is staff's (issue 33).

The agent counts rows that name another team's run as refused, and drops rows of runs nobody has
without counting them. On 4ab1749 every member saw the count: pushing a row naming a guessed run
id and watching the count move told whether another team had a run with that id.
"""

from __future__ import annotations

import csv
import io

import pytest

from runs.choices import RunStatus
from runs.collectors.agent import ingest_agent_payload
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def push(world: World, run_id: str) -> None:
    sample = {"run": run_id, "run_source": "serverless", "gpu": 0, "ts": T0.isoformat(), "utilization_gpu": 1.0}
    ingest_agent_payload({"version": 1, "key": world.key(world.nlp), "host": "h", "node": 0, "attempt": None,
                          "samples": [sample], "events": []})  # fmt: skip


def refused_cell(world: World, user: object) -> str:
    text = world.client_for(user).get("/collectors/", {"format": "csv"}).content.decode()
    return next(row["refused_total"] for row in csv.DictReader(io.StringIO(text)) if row["name"] == "agent")


def test_a_member_cannot_watch_the_refusal_count(world: World) -> None:
    make_run(world.vision, "1001", status=RunStatus.RUNNING, ended_at=None)
    push(world, "no-such-run")  # dropped, not counted: creates the agent's state
    push(world, "1001")  # vision's run: refused and counted
    assert refused_cell(world, world.sam) == "1"
    assert refused_cell(world, world.charlie) == ""
    page = world.client_for(world.charlie).get("/collectors/").content.decode()
    assert "outside team nlp" not in page
    assert "outside team nlp" in world.client_for(world.sam).get("/collectors/").content.decode()
