"""Template tag for the run page's under-use flag (runs/telemetry/underuse.py decides it)."""

from __future__ import annotations

from django import template

from runs.models import Run
from runs.telemetry import underuse

register = template.Library()


@register.simple_tag
def run_underuse(run: Run) -> underuse.Underuse | None:
    """The run's under-use answer, or None when it has no utilization yet: `{% run_underuse run as u %}`."""
    return underuse.underuse(run)
