"""seed_demo: every node of a multi-node run has telemetry over the same span, a running run's whole life."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db.models import Count, Max, Min

from dashboard.demo.write import seed_demo
from runs.choices import RunStatus
from runs.glance import node_skew
from runs.models import Attempt, GpuMinute, GpuSample

NOW = datetime(2026, 3, 12, 15, 0, 17, tzinfo=UTC)


def spans(model: type[GpuMinute] | type[GpuSample], attempt: Attempt, field: str) -> dict[int, tuple]:
    """Per node of the attempt: (first, last, rows) of its rows in `model`."""
    rows = (
        model.objects.filter(node__attempt=attempt)
        .values("node__index")
        .annotate(first=Min(field), last=Max(field), rows=Count("id"))
    )
    return {r["node__index"]: (r["first"], r["last"], r["rows"]) for r in rows}


@pytest.mark.django_db
def test_every_node_of_a_multi_node_run_has_telemetry_over_the_same_span() -> None:
    seed_demo(seed=42, now=NOW, runs=60, advice_examples=False, log=lambda line: None)
    attempts = [
        a
        for a in Attempt.objects.filter(run__is_demo=True, run__gpu_minutes__isnull=False).distinct()
        if a.number == a.run.attempts.count() and a.nodes.count() > 1
    ]
    assert len(attempts) >= 3, "the seed has multi-node runs with telemetry"
    raw_checked = 0
    for attempt in attempts:
        nodes = attempt.nodes.count()
        minutes = spans(GpuMinute, attempt, "minute")
        # Every node, every GPU: the same first and last minute and as many rows as node 0.
        assert len(minutes) == nodes, attempt.run.external_id
        assert len(set(minutes.values())) == 1, (attempt.run.external_id, minutes)
        samples = spans(GpuSample, attempt, "ts")
        if samples:
            assert len(samples) == nodes and len(set(samples.values())) == 1, (attempt.run.external_id, samples)
            raw_checked += 1
        # The node-skew table compares like with like: each node sits near the run's mean.
        skew = node_skew(attempt.run)
        assert len(skew) == nodes and all(abs(row.skew) < 10 for row in skew), skew
    assert raw_checked, "a multi-node run among those with 1 Hz samples"


@pytest.mark.django_db
def test_a_running_multi_node_run_has_telemetry_on_every_node_from_its_start() -> None:
    seed_demo(seed=42, now=NOW, runs=60, advice_examples=False, log=lambda line: None)
    # The 16-GPU fine-tune started about an hour before the seed (a scenario of dashboard/demo/seed.py).
    attempt = Attempt.objects.get(
        run__is_demo=True, run__experiment_name__endswith="/llama3-8b-sft", status=RunStatus.RUNNING,
        run__num_accelerators=16, run__submitted_at__gte=NOW.replace(hour=13),
    )  # fmt: skip
    assert attempt.nodes.count() == 2
    start_minute = attempt.started_at.replace(second=0, microsecond=0)
    for first, last, rows in spans(GpuMinute, attempt, "minute").values():
        minutes = int((NOW - start_minute).total_seconds() // 60) + 1
        assert (first, last, rows) == (start_minute, NOW.replace(second=0), minutes * 8)
