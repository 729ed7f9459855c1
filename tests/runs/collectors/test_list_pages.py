"""A run or cluster command that prints one page of a paged REST answer (`databricks api get
/api/2.2/jobs/runs/list`: `{"runs": [...], "has_more": true, "next_page_token": "..."}`) is read,
and the pass says that the other pages were not: runs past the first page are never dropped silently."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from runs.collectors import runsource
from runs.collectors.databricks_cli import CliClient, more_pages
from runs.models import Run
from tests.conftest import World

DATA = Path(__file__).resolve().parents[2] / "data" / "databricks"


def printing(tmp_path: Path, name: str, payload: object) -> str:
    """A command that prints `payload` as JSON, as `databricks api get ...` prints a page."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(payload))
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(f'print(open({str(path)!r}).read())')}"


def test_a_page_with_more_after_it_is_named() -> None:
    page = {"runs": [{"run_id": 1}, {"run_id": 2}], "has_more": True, "next_page_token": "CAEQ"}
    note = more_pages(page, "runs", "run_id", ["databricks", "api", "get", "/api/2.2/jobs/runs/list"])
    assert note is not None and "2 runs" in note and "databricks api get /api/2.2/jobs/runs/list" in note
    assert more_pages({"runs": [{"run_id": 1}], "next_page_token": "CAEQ"}, "runs", "run_id", ["x"]) is not None
    # The last page, a bare list (what `jobs list-runs -o json` prints) and one record: nothing to say.
    assert more_pages({"runs": [{"run_id": 1}], "has_more": False}, "runs", "run_id", ["x"]) is None
    assert more_pages({"runs": [{"run_id": 1}], "next_page_token": ""}, "runs", "run_id", ["x"]) is None
    assert more_pages([{"run_id": 1}], "runs", "run_id", ["x"]) is None
    assert more_pages({"run_id": 7, "state": {}}, "runs", "run_id", ["x"]) is None
    # One run whose tasks are paged (Jobs API 2.2 get-run with more than 100 tasks): not a list page.
    assert (
        more_pages({"run_id": 7, "tasks": [], "has_more": True, "next_page_token": "x"}, "runs", "run_id", ["x"])
        is None
    )
    assert (
        more_pages({"clusters": [{"cluster_id": "a"}], "has_more": True}, "clusters", "cluster_id", ["x"]) is not None
    )


@pytest.mark.django_db
def test_the_pass_reads_the_page_and_says_the_rest_was_not_read(settings, world: World, tmp_path: Path) -> None:
    records = json.loads((DATA / "list_runs_finished.json").read_text())
    page = {"runs": records, "has_more": True, "next_page_token": "CAEQ6M2ljQ8iBAgBEAA="}
    settings.AIRBOARD_RUN_SOURCE_COMMAND = printing(tmp_path, "runs", page)
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = printing(
        tmp_path, "clusters", {"clusters": [], "has_more": True, "next_page_token": "x"}
    )
    settings.AIRBOARD_RUN_SOURCE_TEAM = "vision"
    result = runsource.collect_once()
    text = "\n".join(result.lines)
    assert text.count("printed one page") == 2, text
    assert any(line.startswith("clusters: ") and "(0 clusters)" in line for line in result.lines), text
    assert any(line.startswith("runs: ") and "(13 runs)" in line for line in result.lines), text
    assert "(13 runs)" in text and "(0 clusters)" in text, text
    assert Run.objects.exists()  # the page itself is stored as a bare list would be
    stored = Run.objects.count()
    settings.AIRBOARD_RUN_SOURCE_COMMAND = printing(tmp_path, "runs", records)
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = printing(tmp_path, "clusters", [])
    again = "\n".join(runsource.collect_once().lines)
    assert "printed one page" not in again and Run.objects.count() == stored


def test_the_client_hands_each_note_over_once(tmp_path: Path) -> None:
    client = CliClient(printing(tmp_path, "runs", {"runs": [], "has_more": True}))
    assert client.list_runs() == [] and len(client.take_notes()) == 1
    assert client.take_notes() == []  # a client used for another pass does not repeat it
    client.list_runs()
    assert len(client.take_notes()) == 1
