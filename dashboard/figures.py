"""The one base layout every Plotly figure starts from, in both apps.

Transparent backgrounds so the page's light or dark theme shows through, and the same left
margin everywhere so stacked charts line up. Each figure adds its own axes, legend and hover.
"""

from __future__ import annotations

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
