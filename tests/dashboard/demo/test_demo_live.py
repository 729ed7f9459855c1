"""The live demo (dashboard.demo.live): a seeded demo keeps moving through the real ingest path."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import time_machine
from django.db.models import Max
from django.utils import timezone

from dashboard.demo import live as demo_live
from dashboard.demo.write import seed_demo
from dashboard.schedule import BEAT_SCHEDULE
from dashboard.tasks import collect_live_demo
from runs.choices import BatchStatus, RunStatus
from runs.models import GpuMinute, GpuSample, IngestBatch, LogChunk, MetricPoint, Run
from tests.conftest import World, make_run, wait_for


class AlwaysEnds(random.Random):
    """A generator whose every draw is below the end and failure thresholds: each run ends, failed."""

    def random(self) -> float:
        return 0.0

    def getrandbits(self, k: int) -> int:
        # Defined so that randrange and choice keep drawing from the bits, not from random().
        return super().getrandbits(k)


def batches_done() -> bool:
    return not IngestBatch.objects.filter(status=BatchStatus.PENDING).exists()


@pytest.mark.django_db(transaction=True)
def test_a_tick_moves_every_running_demo_run_through_the_worker(celery_worker, settings) -> None:
    settings.AIRBOARD_DEMO_LIVE_RUNNING = 0  # this test looks at the seeded runs only
    # The seed is two hours old when the tick comes. A run logs about 120 points over twice its
    # elapsed time, so a run 10 h in logs one every 10-20 minutes: a tick 5 minutes after the seed
    # added no point for such a run, and whether the seed had one depended on the time of day.
    # A run's attempt lasts at most 52 h (the seed's cap), so one log interval is under 2 h.
    with time_machine.travel(timezone.now() - timedelta(hours=2), tick=True):
        seed_demo(seed=7, runs=40, advice_examples=False, log=lambda line: None)
    running = list(Run.objects.filter(is_demo=True, status=RunStatus.RUNNING).exclude(source="local"))
    assert running, "the seed has running runs"
    before = {r.pk: MetricPoint.objects.filter(run=r).aggregate(s=Max("step"))["s"] or 0 for r in running}
    now = timezone.now().replace(microsecond=0)

    result = demo_live.tick(now=now, rng=random.Random(1))

    assert wait_for(batches_done, timeout=90), celery_worker.log()
    assert result.runs == len(running)
    for run in running:
        if run.status != RunStatus.RUNNING or run.external_id in result.finished + result.failed:
            continue
        last = GpuSample.objects.filter(run=run).aggregate(ts=Max("ts"))["ts"]
        # Samples up to the tick's time, for every node of the last attempt, rolled up by the worker.
        assert last is not None and now - last <= timedelta(seconds=2), run
        nodes = run.attempts.order_by("-number").first().nodes.count()
        assert (
            GpuSample.objects.filter(run=run, ts__gt=now - timedelta(minutes=1)).values("node").distinct().count()
            == nodes
        )
        assert GpuMinute.objects.filter(run=run, minute__gte=now - timedelta(minutes=2)).exists()
        assert (MetricPoint.objects.filter(run=run).aggregate(s=Max("step"))["s"] or 0) > before[run.pk]
    assert LogChunk.objects.filter(node__attempt__run__in=running, received_at__gte=now - timedelta(minutes=6)).exists()


@pytest.mark.django_db(transaction=True)
def test_runs_end_failed_with_their_log_tail_and_new_ones_start(celery_worker, settings) -> None:
    seed_demo(seed=7, runs=40, advice_examples=False, log=lambda line: None)
    running = Run.objects.filter(is_demo=True, status=RunStatus.RUNNING).exclude(source="local").count()
    settings.AIRBOARD_DEMO_LIVE_RUNNING = running + 2
    now = timezone.now().replace(microsecond=0) + timedelta(minutes=1)

    result = demo_live.tick(now=now, rng=AlwaysEnds())

    assert len(result.failed) == running and not result.finished
    for external_id in result.failed:
        run = Run.objects.get(external_id=external_id)
        assert run.status == RunStatus.FAILED and run.ended_at == now and run.state_message
        # The failing node's log ends with the error the message names (what classification reads).
        tail = LogChunk.objects.filter(node__attempt__run=run).order_by("-received_at", "-seq").first().text
        assert tail.strip()
    # Every run that ended is replaced, plus two more: the target is the seed's count + 2.
    assert len(result.started) == running + 2
    new = Run.objects.filter(external_id__in=result.started)
    assert all(r.is_demo and r.status == RunStatus.RUNNING and r.team_id and r.usage_policy_name for r in new)
    assert wait_for(batches_done, timeout=90), celery_worker.log()
    nxt = demo_live.tick(now=now + timedelta(minutes=1), rng=random.Random(3))
    assert wait_for(batches_done, timeout=90), celery_worker.log()
    assert set(result.started) <= {r.external_id for r in Run.objects.filter(gpu_samples__isnull=False).distinct()}
    assert nxt.samples > 0


@pytest.mark.django_db
def test_nothing_moves_outside_a_demo_workspace(world: World, settings) -> None:
    run = make_run(world.vision, status=RunStatus.RUNNING, ended_at=None)
    assert demo_live.tick().runs == 0
    assert not demo_live.tick().started
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and not GpuSample.objects.exists() and not IngestBatch.objects.exists()
    # A demo workspace with the switch off stays the snapshot it was seeded as.
    Run.objects.filter(pk=run.pk).update(is_demo=True)
    settings.AIRBOARD_DEMO_LIVE = False
    assert not demo_live.is_live() and demo_live.tick().runs == 0
    settings.AIRBOARD_DEMO_LIVE = True
    assert demo_live.is_live()


def test_beat_runs_the_live_demo_each_minute() -> None:
    entry = BEAT_SCHEDULE["collect-live-demo"]
    assert entry["task"] == collect_live_demo.name == "runs.collect_live_demo"
    assert str(entry["schedule"]) == "<crontab: * * * * * (m/h/dM/MY/d)>"
