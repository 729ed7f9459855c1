"""The one base layout every Plotly figure starts from, in both apps.

Transparent backgrounds so the page's light or dark theme shows through, and the same left
margin everywhere so stacked charts line up. Each figure adds its own axes, legend and hover.
"""

from __future__ import annotations

import html
from typing import Any

TRANSPARENT = "rgba(0,0,0,0)"


def base_layout(*, height: int, top: int = 36, right: int = 16, **extra: Any) -> dict[str, Any]:
    """A Plotly layout of `height` px; `extra` keys (axes, legend, hovermode...) are added as given."""
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 60, "r": right, "t": top, "b": 40},
        "paper_bgcolor": TRANSPARENT,
        "plot_bgcolor": TRANSPARENT,
    }
    layout.update(extra)
    return layout


# Keys whose strings are Plotly templates a builder wrote (`<extra>`, `<br>`): left as they are.
# A builder that puts user text into one escapes it itself, with `plotly_text`.
TEMPLATE_KEYS = frozenset({"hovertemplate", "texttemplate"})
# Values `escaped` hands back as they are, without a call each.
PLAIN_TYPES = frozenset({int, float, bool, type(None)})


class PlotlyMarkup(str):
    """Pseudo-HTML a builder wrote (a title's smaller note, a line break), which `escaped` keeps.

    Build it with `plotly_markup`, which escapes every value put into the template: only the
    builder's own tags stay tags.
    """


def plotly_markup(template: str, **values: object) -> PlotlyMarkup:
    """`template.format(**values)` with each value escaped by `plotly_text`, kept as markup."""
    return PlotlyMarkup(template.format(**{name: plotly_text(str(value)) for name, value in values.items()}))


def plotly_text(text: str) -> str:
    """`text` as Plotly shows it literally: Plotly reads trace names, labels and hover values as
    pseudo-HTML (`<a href>`, `<b>`) and decodes `&lt;`, `&gt;` and `&amp;` back for display."""
    return html.escape(text, quote=False)


def escaped(figure: Any, key: str | None = None) -> Any:
    """The figure with every string escaped by `plotly_text`, template keys aside (issue 33).

    Metric keys, run and node names come from users: in a legend, `<a href=...>` became a link.
    Every figure leaves through here (the `_figure.html` partial, the chart JSON endpoint).
    """
    if isinstance(figure, str):
        if key in TEMPLATE_KEYS or isinstance(figure, PlotlyMarkup):
            return figure
        return plotly_text(figure)
    if isinstance(figure, dict):
        return {name: escaped(value, name) for name, value in figure.items()}
    if isinstance(figure, list | tuple):
        if all(type(value) in PLAIN_TYPES for value in figure):
            # A series of numbers (a panel's x and y: thousands of them) has nothing to escape.
            return list(figure)
        return [escaped(value, key) for value in figure]
    return figure
