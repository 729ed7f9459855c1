"""Post-mortem text is rendered and parsed in time linear in its size, and bounded (issue 33).

On 4ab1749 a body of 20,000 `[` made every view of the post-mortem time out (Python-Markdown
rescans the rest of the text from each `[`) and an action-item line of 40,000 spaces took 32 s
to save (a backtracking pattern). Unloaded, the worst body renders in about 0.2 s (figures from
`bench/bench_parsers.py`); the deadlines allow for a test machine running eight suites on two cores,
and still fail at once on the old quadratic code.
"""

from __future__ import annotations

import pytest

from runs.choices import PostMortemStatus
from runs.failures.postmortem import MARKDOWN_MAX_CHARS, parse_action_items, render_markdown
from runs.models import PostMortem
from tests.bounded_time import finishes_within
from tests.conftest import World
from tests.runs.failures.test_postmortem import failed_run


@pytest.mark.parametrize(
    "body",
    [
        "[" * 20_000,
        "![" * 10_000,
        "[a](" * 5_000,
        "<a " * 6_600,
        "".join("  " * depth + "- a\n" for depth in range(500)),  # RecursionError on 4ab1749
    ],
    ids=["brackets", "images", "open-links", "open-tags", "deep-list"],
)
def test_adversarial_markdown_renders_quickly(body: str) -> None:
    with finishes_within(2.0):
        html = render_markdown(body)
    assert "<script" not in html


@pytest.mark.django_db
def test_a_post_mortem_of_20000_brackets_still_opens(world: World) -> None:
    run = failed_run(world)
    pm = PostMortem.objects.create(run=run, title="t", owner=world.alice, body="[" * 20_000, root_cause="[" * 20_000)
    client = world.client_for(world.alice)
    with finishes_within(4.0):  # two fields of the worst size, plus the page
        response = client.get(f"/runs/postmortems/{pm.pk}/")
    assert response.status_code == 200 and "[[[[" in response.content.decode()


@pytest.mark.django_db
def test_a_stored_body_past_the_limit_is_cut_and_says_so() -> None:
    html = render_markdown("word " * (MARKDOWN_MAX_CHARS // 5) + "TAIL")
    assert "TAIL" not in html and "4 more characters not shown" in html


@pytest.mark.django_db
def test_the_form_refuses_a_body_over_the_limit(world: World) -> None:
    run = failed_run(world)
    client = world.client_for(world.alice)
    fields = {"title": "t", "status": PostMortemStatus.DRAFT, "owner": world.alice.pk}
    response = client.post(f"/runs/{run.pk}/postmortem/new/", {**fields, "body": "x" * (MARKDOWN_MAX_CHARS + 1)})
    assert response.status_code == 200 and not PostMortem.objects.exists()
    assert f"at most {MARKDOWN_MAX_CHARS:,}".replace(",", "") in response.content.decode().replace(",", "")
    ok = client.post(f"/runs/{run.pk}/postmortem/new/", {**fields, "body": "x" * MARKDOWN_MAX_CHARS})
    assert ok.status_code == 302


def test_an_action_item_of_40000_spaces_parses_quickly() -> None:
    with finishes_within(1.0):
        items = parse_action_items("- [ ] a" + " " * 40_000 + "b\n" + " " * 40_000 + "\n" + "- [x]" + " \t" * 20_000)
    assert items == [
        {"text": "a" + " " * 40_000 + "b", "owner": "", "done": False},
        {"text": "", "owner": "", "done": True},
    ]


@pytest.mark.parametrize(
    ("line", "item"),
    [
        ("- [ ] Lower the batch size @alice", {"text": "Lower the batch size", "owner": "alice", "done": False}),
        ("* [X]   Add checkpointing  @bob.smith  ", {"text": "Add checkpointing", "owner": "bob.smith", "done": True}),
        ("- [ ] @carol", {"text": "", "owner": "carol", "done": False}),
        ("- [ ]@carol", {"text": "@carol", "owner": "", "done": False}),
        ("[ ] mail a@b.com", {"text": "mail a@b.com", "owner": "", "done": False}),
        ("- just a note", {"text": "just a note", "owner": "", "done": False}),
    ],
)
def test_action_items_read_as_before(line: str, item: dict[str, object]) -> None:
    assert parse_action_items(line) == [item]
