"""Under-use: is a run, or one of its GPUs, doing much less than it could? The one place it is decided.

A panel that plots each minute's maximum draws a run averaging ~60% near 95-100%, so the page
answers the question in words instead. Two flags, from the rollups (never raw samples):

- **Run under-used**: the mean utilization of its GPUs is under AIRBOARD_UNDERUSED_PERCENT
  (40 by default), over the last WINDOW (30 minutes) while the run is active, over its whole
  life once it has ended. The mean weighs each GPU-minute by its samples (as the hour rollup
  does), so every GPU counts by how long it reported.
- **GPU far below the others**: one GPU's mean over the same span is under FAR_BELOW_RATIO
  (half) of the mean of the run's other GPUs *and* FAR_BELOW_POINTS (25) percentage points or
  more under it: "GPU 3 on node 5 averaged 15% while the other 63 averaged 78%". Both, so that
  5% against 11% (an idle run: the run flag says so) or 60% against 85% (a slower rank, not
  idle) do not fire. The others are the run's other GPUs, on every node: in data-parallel
  training every rank does the same work, so the whole run is the baseline, and a node whose
  eight GPUs all sit idle is still caught, which comparing within the node would miss.

A run is judged once it has run MIN_LIFE (10 minutes): a run still loading its data is not
under-used yet. Spans:

    while active   GpuMinute rows of the last WINDOW   (run, minute, ...) natural key, one range a run
    once ended     GpuLife rows: each GPU's hours      (run, node, gpu) natural key; one row a GPU
                   summed on the write path (gpu_life.py), whatever the run's age

`underuse_of_runs` answers for any number of runs in at most two grouped queries (one per
tier), whatever their samples, so the overview's Active now, the runs table and the run page
read it at the same cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Case, F, FloatField, Q, QuerySet, Sum, When
from django.utils import timezone

from runs.models import GpuLife, GpuMinute, Run, mean_utilization
from runs.telemetry.labels import gpu_label

WINDOW = timedelta(minutes=30)
MIN_LIFE = timedelta(minutes=10)
FAR_BELOW_RATIO = 0.5
FAR_BELOW_POINTS = 25.0


@dataclass(frozen=True)
class GpuMean:
    """One GPU's mean utilization over the span, and the weight (samples) behind it."""

    node_index: int
    gpu_index: int
    mean: float
    samples: int


@dataclass(frozen=True)
class LaggingGpu:
    """A GPU far below the run's other GPUs."""

    node_index: int
    gpu_index: int
    mean: float
    others: int
    others_mean: float

    @property
    def message(self) -> str:
        return (
            f"{gpu_label(self.gpu_index)} on node {self.node_index} averaged {self.mean:.0f}% "
            f"while the other {self.others} averaged {self.others_mean:.0f}%"
        )


@dataclass(frozen=True)
class Underuse:
    """A run's under-use answer: its GPUs' mean over the span, the threshold, the lagging GPUs."""

    mean: float
    threshold: float
    whole_life: bool
    gpus: int
    lagging: tuple[LaggingGpu, ...]

    @property
    def under_used(self) -> bool:
        return self.mean < self.threshold

    @property
    def flagged(self) -> bool:
        return self.under_used or bool(self.lagging)

    @property
    def span(self) -> str:
        return "over its whole life" if self.whole_life else f"over the last {WINDOW.seconds // 60} minutes"

    @property
    def message(self) -> str:
        """The run-level sentence (empty when the run is not under-used)."""
        if not self.under_used:
            return ""
        gpus = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        return f"Under-used: its {gpus} averaged {self.mean:.0f}% {self.span}, under {self.threshold:.0f}%"


def _weighted(queryset: QuerySet, group: list[str]) -> QuerySet:
    """Per group, (sum of avg x samples, samples) over rows that reported utilization."""
    reported = Q(utilization_gpu_avg__isnull=False)
    return (
        queryset.values(*group)
        .annotate(
            total=Sum(F("utilization_gpu_avg") * F("samples"), filter=reported, output_field=FloatField()),
            weight=Sum(Case(When(reported, then=F("samples")), default=0)),
        )
        .order_by()
    )


def gpu_means(runs: Iterable[Run], now: datetime | None = None) -> dict[int, tuple[bool, list[GpuMean]]]:
    """Per run judged (see MIN_LIFE): (whole life?, each GPU's mean over the span); two queries at most."""
    now = now or timezone.now()
    active: list[int] = []
    ended: list[int] = []
    for run in runs:
        if run.started_at is None or (run.ended_at or now) - run.started_at < MIN_LIFE:
            continue
        (ended if run.ended_at is not None and not run.is_active else active).append(run.pk)
    out: dict[int, tuple[bool, list[GpuMean]]] = {}
    group = ["run_id", "node__index", "gpu_index"]
    queries: list[tuple[bool, QuerySet[Any]]] = []
    if active:
        # The minutes that start within the window: the last 30, the current one partly.
        queries.append((False, GpuMinute.objects.filter(run_id__in=active, minute__gt=now - WINDOW)))
    if ended:
        # Each GPU's hours already summed on the write path (runs/telemetry/gpu_life.py): one row a GPU.
        lives = GpuLife.objects.filter(run_id__in=ended).values_list(
            "run_id", "node__index", "gpu_index", "weighted_sum", "weight"
        )
        for run_id, node_index, gpu, weighted_sum, weight in lives:
            life_mean = mean_utilization(weight, weighted_sum)
            if life_mean is not None:  # a GPU that never reported utilization is not judged
                out.setdefault(run_id, (True, []))[1].append(GpuMean(node_index, gpu, life_mean, weight))
    for whole_life, queryset in queries:
        for row in _weighted(queryset, group):
            if row["weight"]:
                mean = GpuMean(row["node__index"], row["gpu_index"], row["total"] / row["weight"], row["weight"])
                out.setdefault(row["run_id"], (whole_life, []))[1].append(mean)
    return out


def lagging_gpus(means: list[GpuMean]) -> list[LaggingGpu]:
    """The GPUs far below the mean of the others (FAR_BELOW_RATIO and FAR_BELOW_POINTS), lowest first."""
    total = sum(m.mean * m.samples for m in means)
    weight = sum(m.samples for m in means)
    found = []
    for m in means:
        rest = weight - m.samples
        if rest <= 0:
            continue
        others = (total - m.mean * m.samples) / rest
        if m.mean < FAR_BELOW_RATIO * others and others - m.mean >= FAR_BELOW_POINTS:
            found.append(LaggingGpu(m.node_index, m.gpu_index, m.mean, len(means) - 1, others))
    return sorted(found, key=lambda g: (g.mean, g.node_index, g.gpu_index))


def underuse_of_runs(runs: Iterable[Run], now: datetime | None = None) -> dict[int, Underuse]:
    """Each judged run's answer, keyed by run id; runs without utilization (or too young) are absent."""
    threshold = float(settings.AIRBOARD_UNDERUSED_PERCENT)
    out = {}
    for run_id, (whole_life, means) in gpu_means(runs, now).items():
        weight = sum(m.samples for m in means)
        mean = sum(m.mean * m.samples for m in means) / weight
        out[run_id] = Underuse(mean, threshold, whole_life, len(means), tuple(lagging_gpus(means)))
    return out


def underuse(run: Run, now: datetime | None = None) -> Underuse | None:
    """One run's answer (see `underuse_of_runs`)."""
    return underuse_of_runs([run], now).get(run.pk)
