"""The live demo continues each seeded run's series where the seed left them, run by run."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from dashboard.demo import live as demo_live
from dashboard.demo.seed import EXPERIMENT_BY_SLUG, run_curve
from dashboard.demo.write import seed_demo
from runs.choices import BatchStatus, RunStatus
from runs.ingest_process import process_batch
from runs.logs import chunk_texts
from runs.models import GpuMinute, GpuSample, IngestBatch, MetricPoint, Node, Run

SEEDED = datetime(2026, 3, 12, 15, 0, 17, tzinfo=UTC)
PROGRESS = re.compile(r"(?<![\d.])(\d+)/(\d+)(?: \[| \|)")  # "1200/57352 [" (tqdm) or "step 1200/57352 |"
GIB = 1024**3


class NeverEnds(random.Random):
    """The tick's generator with every draw above the end threshold: no run ends by chance."""

    def random(self) -> float:
        return 0.999


@dataclass(frozen=True)
class Last:
    """A GPU's last seeded reading: a raw sample, or the seed's last minute rollup."""

    after: datetime  # the first second the seed left: after its last sample, or its last minute's seconds
    temperature: float
    memory: float


def running() -> list[Run]:
    return list(Run.objects.filter(is_demo=True, status=RunStatus.RUNNING).exclude(source="local").order_by("pk"))


def node_of(run: Run, index: int) -> Node:
    return run.attempts.order_by("-number").first().nodes.get(index=index)


def last_readings(run: Run) -> dict[tuple[int, int], Last]:
    """(node index, gpu) -> the seed's last reading of that GPU."""
    out: dict[tuple[int, int], Last] = {}
    for node in run.attempts.order_by("-number").first().nodes.all():
        for gpu in range(run.gpus_per_node):
            sample = GpuSample.objects.filter(node=node, gpu_index=gpu).order_by("-ts").first()
            if sample is not None:
                out[node.index, gpu] = Last(
                    sample.ts + timedelta(seconds=1), sample.temperature_c, sample.memory_used_bytes
                )
                continue
            minute = GpuMinute.objects.filter(node=node, gpu_index=gpu).order_by("-minute").first()
            if minute is not None:
                stop = minute.minute + timedelta(seconds=minute.samples)
                out[node.index, gpu] = Last(stop, minute.temperature_c_avg, minute.memory_used_bytes_max)
    return out


def log_steps(node: Node) -> list[tuple[int, int]]:
    return [(int(step), int(total)) for step, total in PROGRESS.findall("".join(chunk_texts(node)))]


def tick(at: datetime) -> demo_live.TickResult:
    """One beat of the live demo at `at`, its batches written as the worker writes them."""
    with time_machine.travel(at, tick=False):
        result = demo_live.tick(now=at, rng=NeverEnds(1))
        for batch in IngestBatch.objects.filter(status=BatchStatus.PENDING).order_by("pk"):
            process_batch(batch.pk)
    return result


@pytest.fixture
def seeded(settings) -> list[Run]:
    settings.AIRBOARD_DEMO_LIVE_RUNNING = 0  # only the seeded runs move
    seed_demo(seed=42, now=SEEDED, runs=60, advice_examples=False, log=lambda line: None)
    runs = running()
    assert len(runs) >= 3 and any(r.num_accelerators > r.gpus_per_node for r in runs)
    return runs


@pytest.mark.django_db
def test_the_first_tick_continues_every_gpu_of_every_node_where_the_seed_stopped(seeded: list[Run]) -> None:
    before = {run.pk: last_readings(run) for run in seeded}
    assert all(before.values())
    seeded_samples = set(GpuSample.objects.values_list("pk", flat=True))

    tick(SEEDED + timedelta(seconds=61))

    for run in seeded:
        for (index, gpu), last in before[run.pk].items():
            node = node_of(run, index)
            new = GpuSample.objects.filter(node=node, gpu_index=gpu).exclude(pk__in=seeded_samples)
            first = new.order_by("ts").first()
            assert first is not None, (run.external_id, index, gpu)
            # From the first second the seed left (no gap, no second written twice), at the
            # temperature and memory the GPU was at (no cold restart, no other run's memory
            # footprint): a step like any other second's.
            assert first.ts == last.after, (run.external_id, index, gpu, last, first.ts)
            assert abs(first.temperature_c - last.temperature) < 6, (run.external_id, index, gpu, last, first)
            assert abs(first.memory_used_bytes - last.memory) < 0.02 * first.memory_total_bytes, (run, index, gpu)


@pytest.mark.django_db
def test_metrics_and_log_steps_continue_each_runs_own_curve(seeded: list[Run]) -> None:
    keys = ("loss", "learning_rate", "tokens_per_second", "samples_per_second")
    seeded_points = {
        (run.pk, key): list(MetricPoint.objects.filter(run=run, key=key).order_by("step").values_list("step", "value"))
        for run in seeded
        for key in keys
    }
    seeded_log = {run.pk: log_steps(node_of(run, 0)) for run in seeded}
    # A minute, then a beat 40 minutes on: long enough for every run to log its next points.
    tick(SEEDED + timedelta(seconds=61))
    tick(SEEDED + timedelta(minutes=40))

    continued = 0
    for run in seeded:
        for key in keys:
            points = seeded_points[run.pk, key]
            if len(points) < 2:
                continue
            (step_2, value_2), (step_1, value_1) = points[-2:]
            nxt = MetricPoint.objects.filter(run=run, key=key, step__gt=step_1).order_by("step").first()
            assert nxt is not None, (run.external_id, key)
            # The next logged step at the seed's own logging interval, not a restart of the count.
            assert nxt.step - step_1 == step_1 - step_2, (run.external_id, key, step_2, step_1, nxt.step)
            if key == "learning_rate":
                # The same schedule: the change over one interval no bigger than the seed's last one allows.
                assert abs(nxt.value - value_1) <= 1.5 * abs(value_1 - value_2) + 1e-12, (run.external_id, nxt.value)
            else:
                # Loss and throughput: noise around the same level (the handover once halved the loss).
                assert abs(nxt.value - value_1) < 0.15 * abs(value_1), (run.external_id, key, value_1, nxt.value)
            continued += 1
        steps = seeded_log[run.pk]
        if len(steps) >= 2:
            new = log_steps(node_of(run, 0))[len(steps) :]
            assert new, run.external_id
            (step_2, total), (step_1, _) = steps[-2:]
            # The progress line after the seed's last, of the same job (the same total steps).
            assert new[0] == (step_1 + (step_1 - step_2), total), (run.external_id, steps[-2:], new[:2])
    assert continued >= 3 * len(seeded) // 2


@pytest.mark.django_db
def test_a_run_that_has_trained_all_its_steps_succeeds(seeded: list[Run]) -> None:
    curves = {
        run.pk: run_curve(
            run.external_id, EXPERIMENT_BY_SLUG[run.experiment_name.rsplit("/", 1)[-1]], run.accelerator_type,
            run.num_accelerators,
        )
        for run in seeded
    }  # fmt: skip
    ends = {
        run.pk: run.attempts.order_by("-number").first().started_at
        + timedelta(seconds=curves[run.pk].total_steps * curves[run.pk].step_seconds)
        for run in seeded
    }
    run = min(seeded, key=lambda r: ends[r.pk])
    assert ends[run.pk] > SEEDED  # running at the seed: its last step still ahead

    early = tick(ends[run.pk] - timedelta(minutes=2))
    assert run.external_id not in early.finished + early.failed
    result = tick(ends[run.pk] + timedelta(seconds=30))

    assert run.external_id in result.finished
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.ended_at == ends[run.pk] + timedelta(seconds=30)
    last = MetricPoint.objects.filter(run=run, key="loss").order_by("-step").first()
    assert curves[run.pk].total_steps - curves[run.pk].log_every() < last.step <= curves[run.pk].total_steps
