"""dashboard/kit/figures.escaped: a series of numbers passes as it is; any string among values is still escaped."""

from __future__ import annotations

from dashboard.kit.figures import escaped


def test_numbers_pass_and_strings_among_them_are_escaped() -> None:
    figure = {
        "data": [
            {"x": [1, 2.5, None, True], "y": (0.0, -1, None), "name": "<b>node</b>"},
            {"y": [1.0, "<a href='x'>", None], "hovertemplate": "%{y}<extra></extra>"},
        ]
    }
    out = escaped(figure)
    assert out["data"][0]["x"] == [1, 2.5, None, True] and out["data"][0]["y"] == [0.0, -1, None]
    assert out["data"][0]["name"] == "&lt;b&gt;node&lt;/b&gt;"
    assert out["data"][1]["y"] == [1.0, "&lt;a href='x'&gt;", None]
    assert out["data"][1]["hovertemplate"] == "%{y}<extra></extra>"  # a template is the builder's own
