"""The under-use flag in Chromium: a running run with one idle GPU, on its page and in Active now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs.choices import RunStatus
from runs.models import GpuSample, Node
from runs.telemetry.store import store_gpu_samples
from tests.conftest import World, make_run
from tests.e2e.conftest import Browsing

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_with_one_idle_gpu_is_flagged(browsing: Browsing, world: World) -> None:
    now = timezone.now().replace(microsecond=0)
    run = make_run(
        world.vision, "vision-one-idle", status=RunStatus.RUNNING, submitted_at=now - timedelta(minutes=22),
        started_at=now - timedelta(minutes=20), ended_at=None,
    )  # fmt: skip
    node = Node.objects.get(attempt__run=run)

    # Fifteen minutes through the ingest store path (the minute rollups the flag reads come with it).
    def sample(gpu: int, seconds: int) -> GpuSample:
        idle = gpu == 3
        return GpuSample(
            run=run, node=node, gpu_index=gpu, ts=now - timedelta(seconds=seconds), processes=[{"pid": 40 + gpu}],
            utilization_gpu=2.0 if idle else 85.0, sm_active=1.0 if idle else 70.0,
        )  # fmt: skip

    store_gpu_samples([sample(gpu, s) for gpu in range(8) for s in range(900, 0, -15)])
    page = browsing.page
    browsing.login_as(world.alice)
    browsing.goto(f"/runs/{run.pk}/")
    flag = page.locator("#underuse")
    expect(flag).to_be_visible()
    expect(flag).to_contain_text("GPU 3 on node 0 averaged 2% while the other 7 averaged 85%")
    expect(flag).not_to_contain_text("Under-used:")  # the run as a whole is busy
    browsing.screenshot("run-underuse")
    browsing.goto("/")
    badge = page.locator("[data-underuse]")
    expect(badge).to_have_text("1 GPU lagging")
    assert "GPU 3 on node 0 averaged 2%" in badge.get_attribute("title")
