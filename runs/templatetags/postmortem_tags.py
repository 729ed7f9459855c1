"""Template tags for the run page's failure card and stall warnings.

They read runs/failures/classify_pass.py and runs/telemetry/stalls.py.
"""

from __future__ import annotations

from django import template

from runs.models import FailureAnalysis, Run
from runs.telemetry import stalls

register = template.Library()


@register.simple_tag
def run_failure(run: Run) -> FailureAnalysis | None:
    """The stored classification of a run, or None: `{% run_failure run as analysis %}`."""
    return FailureAnalysis.objects.filter(run=run).first()


@register.simple_tag
def run_stalls(run: Run) -> list[stalls.RunStalls]:
    """Stalled or process-less GPUs of a running run now (empty for any other run)."""
    return stalls.run_stalls([run])
