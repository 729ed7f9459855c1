"""Post-mortem write-ups: created from a failed run (prefilled), edited, shown sanitised, exported."""

from __future__ import annotations

import pytest

from runs.choices import PostMortemStatus
from runs.models import PostMortem
from runs.postmortem import classify_run, format_action_items, parse_action_items, render_markdown
from tests.conftest import World
from tests.test_postmortem import OOM, add_log, failed_run

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
