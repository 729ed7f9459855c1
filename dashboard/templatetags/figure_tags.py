"""`{{ figure|plotly_escaped|json_script:id }}`: every figure a page embeds, user text escaped."""

from __future__ import annotations

from typing import Any

from django import template

from dashboard.kit.figures import escaped

register = template.Library()


@register.filter
def plotly_escaped(figure: Any) -> Any:
    return escaped(figure)
