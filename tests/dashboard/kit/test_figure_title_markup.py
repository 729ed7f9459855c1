"""Panel titles: the builder's own markup (a smaller note, a line break) stays markup through
`escaped`; a user's text put into a title is still shown as text."""

from __future__ import annotations

import pytest

from dashboard.kit.figures import PlotlyMarkup, escaped, plotly_markup
from runs.models import Node
from tests.conftest import World, make_run
from tests.runs.telemetry.test_run_panels import page_panels, store


def test_markup_keeps_the_builders_tags_and_escapes_the_values() -> None:
    title = plotly_markup("{name} <span style='font-size:12px'>· {note}</span>", name="<a href='x'>n</a>", note="1 & 2")
    assert isinstance(title, PlotlyMarkup)
    out = escaped({"layout": {"title": {"text": title}}, "data": [{"name": "<b>gpu</b>"}]})
    assert (
        out["layout"]["title"]["text"]
        == "&lt;a href='x'&gt;n&lt;/a&gt; <span style='font-size:12px'>· 1 &amp; 2</span>"
    )
    assert out["data"][0]["name"] == "&lt;b&gt;gpu&lt;/b&gt;"  # plain strings are still escaped


@pytest.mark.django_db
def test_a_run_page_panel_title_shows_its_note_not_its_tags(world: World) -> None:
    run = make_run(world.vision)
    Node.objects.filter(attempt__run=run).update(host="<img src=x>")
    store(run, range(0, 120))
    panels = page_panels(world.client_for(world.alice), run)
    titles = [figure["layout"]["title"]["text"] for figure in panels.values() if figure]
    assert titles
    for text in titles:
        # The note is a real span (Plotly draws it smaller), never the literal "<span ...>" as
        # `escaped` used to make it; and no user text in the title becomes a tag.
        assert "<span style='font-size:12px'>" in text and "&lt;span" not in text, text
        assert "<img" not in text
