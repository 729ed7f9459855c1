"""The fleet page: live GPUs of running runs, team-scoped, and utilization history from GpuHour."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.choices import AcceleratorType, RunStatus
from runs.models import GpuSample, Node
from runs.telemetry import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(minutes=10)


def running(world_team, external_id: str, utilization: float, **fields):
    """A running 8-GPU run with 10 minutes of 1 Hz telemetry up to NOW."""
    run = make_run(world_team, external_id, status=RunStatus.RUNNING, ended_at=None, **fields)
    node = Node.objects.get(attempt__run=run)
    store_gpu_samples(
        [GpuSample(run=run, node=node, gpu_index=g, ts=T0 + timedelta(seconds=s), utilization_gpu=utilization,
                   memory_used_bytes=40 * 10**9, memory_total_bytes=80 * 10**9)
         for g in range(8) for s in range(0, 600, 5)]
    )  # fmt: skip
    return run


def get_fleet(world: World, user):
    with time_machine.travel(NOW, tick=False):
        return world.client_for(user).get("/runs/fleet/")


def test_fleet_shows_running_gpus_of_the_users_teams_only(world: World) -> None:
    running(world.vision, "vision-train", 91.0)
    running(world.nlp, "nlp-train", 33.0, accelerator_type=AcceleratorType.B300_8)
    finished = make_run(world.vision, "vision-done")
    store_gpu_samples([GpuSample(run=finished, node=Node.objects.get(attempt__run=finished), gpu_index=0, ts=NOW)])

    alice = get_fleet(world, world.alice)
    assert alice.status_code == 200
    body = alice.content.decode()
    assert "vision-train" in body and "nlp-train" not in body and "vision-done" not in body
    assert alice.context["gpu_count"] == 8
    assert alice.context["by_team"]["data"][0]["name"] == "vision"
    assert alice.context["by_team"]["data"][0]["y"] == [91.0]

    charlie = get_fleet(world, world.charlie).content.decode()
    assert "nlp-train" in charlie and "vision-train" not in charlie

    sam = get_fleet(world, world.sam)
    assert sam.context["gpu_count"] == 16
    assert {t["name"] for t in sam.context["by_accelerator"]["data"]} == {"GPU_8xH100", "GPU_8xB300"}


def test_fleet_query_count_does_not_grow_with_runs(world: World) -> None:
    running(world.vision, "r0", 50.0)
    with CaptureQueriesContext(connection) as one:
        assert get_fleet(world, world.alice).status_code == 200
    for i in range(1, 6):
        running(world.vision, f"r{i}", 50.0)
    with CaptureQueriesContext(connection) as six:
        response = get_fleet(world, world.alice)
    assert response.context["run_count"] == 6
    assert len(six) == len(one)
