"""Post-mortem write-ups: created from a failed run (prefilled), edited, shown sanitised, exported."""

from __future__ import annotations

import re

import pytest

from runs.choices import PostMortemStatus
from runs.failures.classify_pass import classify_run
from runs.failures.postmortem import format_action_items, parse_action_items, render_markdown
from runs.models import PostMortem
from tests.conftest import World, make_run
from tests.runs.failures.test_postmortem import OOM, add_log, failed_run

pytestmark = pytest.mark.django_db

EVIL = (
    "## Timeline\n\n<script>alert('x')</script>\n\n"
    "[click me](javascript:alert(1)) and [docs](https://example.com/oom)\n\n"
    '<img src=x onerror="alert(2)">\n'
)


def test_markdown_is_sanitised() -> None:
    html = render_markdown(EVIL)
    assert "<h2>Timeline</h2>" in html
    assert "<script" not in html and "javascript:" not in html and "onerror" not in html and "<img" not in html
    assert 'href="https://example.com/oom"' in html


def test_action_items_round_trip() -> None:
    text = "- [ ] Lower the batch size @alice\n- [x] Add checkpointing\n"
    items = parse_action_items(text)
    assert items == [
        {"text": "Lower the batch size", "owner": "alice", "done": False},
        {"text": "Add checkpointing", "owner": "", "done": True},
    ]
    assert format_action_items(items) == text.strip()


def test_create_view_and_export(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, f"step 1\n{OOM}\n")
    classify_run(run)
    client = world.client_for(world.alice)

    form = client.get(f"/runs/{run.pk}/postmortem/new/").content.decode()
    assert "GPU out of memory" in form and "Lower the per-GPU batch size" in form  # prefilled root cause

    response = client.post(
        f"/runs/{run.pk}/postmortem/new/",
        {
            "title": "OOM on rank 0",
            "summary": "Ran out of GPU memory at step 2.",
            "status": PostMortemStatus.IN_REVIEW,
            "owner": world.bob.pk,
            "root_cause": "Batch too large.",
            "body": EVIL,
            "action_items_text": "- [ ] Lower the batch size @bob",
        },
    )
    pm = PostMortem.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/postmortems/{pm.pk}/"
    assert pm.owner == world.bob and pm.created_by == world.alice
    assert pm.action_items == [{"text": "Lower the batch size", "owner": "bob", "done": False}]

    page = client.get(f"/runs/postmortems/{pm.pk}/").content.decode()
    assert "<h2>Timeline</h2>" in page and "alert('x')" not in page and "javascript:" not in page
    assert "In review" in page and "@bob" in page

    export = client.get(f"/runs/postmortems/{pm.pk}/?format=md")
    assert export["Content-Disposition"] == 'attachment; filename="oom-on-rank-0.md"'
    text = export.content.decode()
    assert text.startswith("# OOM on rank 0") and "- [ ] Lower the batch size @bob" in text
    assert "Team: vision" in text


def test_edit_and_scoping(world: World) -> None:
    run = failed_run(world)
    pm = PostMortem.objects.create(run=run, title="Draft", owner=world.alice)
    client = world.client_for(world.alice)
    response = client.post(
        f"/runs/postmortems/{pm.pk}/edit/",
        {"title": "Final", "status": PostMortemStatus.DONE, "owner": world.alice.pk, "action_items_text": ""},
    )
    assert response.status_code == 302
    pm.refresh_from_db()
    assert (pm.title, pm.status) == ("Final", PostMortemStatus.DONE)
    # Owners come from the run's team: charlie (nlp) is not a valid choice.
    bad = client.post(f"/runs/postmortems/{pm.pk}/edit/", {"title": "x", "status": "done", "owner": world.charlie.pk})
    assert bad.status_code == 200 and "Select a valid choice" in bad.content.decode()
    charlie = world.client_for(world.charlie)
    urls = [f"/runs/postmortems/{pm.pk}/", f"/runs/postmortems/{pm.pk}/edit/", f"/runs/postmortems/{pm.pk}/?format=md"]
    for url in [*urls, f"/runs/{run.pk}/postmortem/new/"]:
        assert charlie.get(url).status_code == 404
    assert charlie.post(f"/runs/postmortems/{pm.pk}/edit/", {"title": "pwned", "status": "done"}).status_code == 404


def test_a_new_post_mortem_drafts_itself_and_the_export_carries_it(world: World) -> None:
    from datetime import timedelta

    from runs.choices import RunEventKind
    from runs.models import RunEvent
    from tests.runs.failures.test_postmortem import add_minutes

    run = failed_run(world, max_retries=1)
    run.attempts.filter(number=1).update(status="failed", exit_code=1)
    add_log(run, 1, 0, "ModuleNotFoundError: No module named 'flash_attn'\n")
    add_log(run, 2, 0, f"step 1\n{OOM}\n")
    add_minutes(run, memory=0.995, util=97, power=0.9, minutes=3)
    RunEvent.objects.create(run=run, ts=run.ended_at - timedelta(minutes=1), kind=RunEventKind.NOTE, message="paged")
    classify_run(run)
    client = world.client_for(world.alice)
    failure = client.get(f"/runs/{run.pk}/failure/").content.decode()
    assert "Attempt 2, node 0, line 2" in failure and "Confidence 98%" in failure
    assert "Earlier attempts:" in failure and "Attempt 1: Missing or incompatible dependency" in failure
    form = client.get(f"/runs/{run.pk}/postmortem/new/").content.decode()
    for part in ("## Timeline", "Attempt 1 started", "Attempt 2 ended", "the attempt that ended the run",
                 "Note: paged", "## Cost of the failed attempts", "## Telemetry before the failure",
                 "| Minute | GPU utilization |", "## Evidence", "Attempt 1: Missing or incompatible dependency",
                 "## Links", f"/runs/{run.pk}/failure/"):  # fmt: skip
        assert part in form, part
    body = form.split('name="body"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    # The cost of the failed attempts, formatted as every page shows money.
    cost_line = body.split("## Cost of the failed attempts", 1)[1].strip().splitlines()[0]
    assert re.fullmatch(r"\$\d[\d,]*\.\d\d", cost_line), cost_line
    response = client.post(
        f"/runs/{run.pk}/postmortem/new/",
        {"title": "Retried OOM", "status": PostMortemStatus.DRAFT, "owner": world.alice.pk, "body": body.replace(
            "&#x27;", "'").replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")},
    )  # fmt: skip
    assert response.status_code == 302
    pm = PostMortem.objects.get(run=run)
    text = client.get(f"/runs/postmortems/{pm.pk}/?format=md").content.decode()
    assert "## Timeline" in text and "| Minute | GPU utilization |" in text and "CUDA out of memory" in text
    page = client.get(f"/runs/postmortems/{pm.pk}/").content.decode()
    assert "<h2>Timeline</h2>" in page and "<table>" in page


def test_post_mortem_index_and_the_failures_page_mark_which_failures_have_one(world: World) -> None:
    mine = failed_run(world, "mine")
    add_log(mine, 1, 0, f"{OOM}\n")
    classify_run(mine)
    without = failed_run(world, "without")
    add_log(without, 1, 0, f"{OOM}\n")
    classify_run(without)
    pm = PostMortem.objects.create(run=mine, title="Mine", owner=world.alice, status=PostMortemStatus.IN_REVIEW)
    theirs = make_run(world.nlp, "theirs", status="failed")
    PostMortem.objects.create(run=theirs, title="Theirs")
    alice = world.client_for(world.alice)
    index = alice.get("/runs/postmortems/").content.decode()
    assert "Mine" in index and "Theirs" not in index
    assert "Mine" not in alice.get("/runs/postmortems/?status=done").content.decode()
    overview = alice.get("/runs/failures/").content.decode()
    assert f'href="/runs/postmortems/{pm.pk}/">In review</a>' in overview
    assert f'href="/runs/{without.pk}/postmortem/new/">write one</a>' in overview
    assert "Theirs" in world.client_for(world.charlie).get("/runs/postmortems/").content.decode()
