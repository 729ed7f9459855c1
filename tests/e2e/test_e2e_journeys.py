"""Issue 20's journeys in a real Chromium: is my GPU busy, who is over budget, why did it fail.

Each test walks one journey from the first page a person opens; the `browsing` fixture fails it
on any console error, uncaught exception or CSP violation. Screenshots land in
artifacts/screenshots/ (journey-*.png) for the README.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.policies import budget
from billing.templatetags.billing_tags import usd
from runs.choices import RunStatus
from runs.launch.admission import admit_yaml
from runs.models import GpuSample, MetricPoint, Node
from runs.telemetry.store import store_gpu_samples
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)
WORKLOAD = """\
experiment_name: vit-large
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 8
command: python train.py
usage_policy_name: vision-gpu-budget
"""


def live_samples(scene: Scene) -> None:
    """The running run's last minutes through the ingest path's store (which rolls minutes up)."""
    node = Node.objects.get(attempt__run=scene.running)
    now = timezone.now()
    store_gpu_samples(
        [
            GpuSample(
                run=scene.running,
                node=node,
                gpu_index=gpu,
                ts=now - timedelta(minutes=m, seconds=5),
                utilization_gpu=91.0,
            )
            for gpu in range(scene.running_gpus)
            for m in range(0, 8)
        ]
    )


def second_node_and_metrics(scene: Scene) -> None:
    """Make the running run a 2-node run whose second node lags and reports NVLink, with MLflow
    metrics: the node selector and the metrics' step / time switch then have something to show."""
    attempt = scene.running.attempts.get()
    second = Node.objects.create(attempt=attempt, index=1, host="10.0.0.9", status=RunStatus.RUNNING)
    now = timezone.now()
    store_gpu_samples(
        [
            GpuSample(
                run=scene.running, node=second, gpu_index=gpu, ts=now - timedelta(minutes=m, seconds=7),
                utilization_gpu=62.0, memory_used_bytes=58 * 10**9,
                # GPM's NVLINK_TOTAL_TX/RX_PER_SEC MiB/s x 1024, as the agent stores them.
                nvlink_tx_kbps=153_600.0 * 1024, nvlink_rx_kbps=149_000.0 * 1024,
            )
            for gpu in range(scene.running_gpus)
            for m in range(0, 8)
        ]
    )  # fmt: skip
    started = scene.running.started_at
    MetricPoint.objects.bulk_create(
        MetricPoint(run=scene.running, key=key, step=step * 100, ts=started + timedelta(seconds=30 * step + 15),
                    value=value)
        for step in range(12)
        for key, value in (("loss", 2.4 / (1 + step)), ("samples_per_second", 4_500.0 + step))
    )  # fmt: skip


def test_is_my_gpu_busy(browsing: Browsing, scene: Scene) -> None:
    live_samples(scene)
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto("/")
    row = page.locator("table.glance-table tbody tr", has_text="vision-live-1")
    expect(row.locator("svg.sparkline polyline").first).to_be_attached()
    # The last minute averages the scene's 80-83 % samples with these 91 % ones.
    expect(row.locator("td.glance")).to_contain_text(re.compile(r"\b(8[0-9]|9[01])%"))
    expect(row.locator("td.glance")).to_contain_text(re.compile(r"last sample (now|.* ago)"))
    expect(row.locator("td.num")).to_contain_text(re.compile(r"\$[\d,]+\.\d\d so far"))
    browsing.screenshot("journey-gpu-busy-overview")

    browsing.goto("/runs/")
    row = page.locator("table.runs-table tbody tr", has_text="vision-live-1")
    expect(row.locator("svg.sparkline")).to_be_visible()
    # The table scrolls inside its card, never past the window, with the run id pinned.
    sizes = page.evaluate(
        """() => { const w = document.querySelector('.runs-table').closest('.table-wrap');
                   const first = document.querySelector('.runs-table tbody td');
                   return [w.getBoundingClientRect().right, window.innerWidth, getComputedStyle(first).position,
                           getComputedStyle(w).overflowX]; }"""
    )
    assert sizes[0] <= sizes[1] and sizes[2] == "sticky" and sizes[3] == "auto", sizes
    page.evaluate("document.querySelector('.runs-table').closest('.table-wrap').scrollLeft = 10000")
    expect(row.locator("td.run-id")).to_be_in_viewport()
    browsing.screenshot("journey-gpu-busy-runs")

    # A second node joins (the run scales to 2 nodes) and MLflow has logged metrics.
    second_node_and_metrics(scene)

    # The run page: coverage stated, a range picked, one crosshair across the GPU panels.
    row.get_by_role("link", name="vision-live-1").click()
    page.wait_for_load_state("load")
    expect(page.locator("#coverage")).to_contain_text("Samples from 2 of 2 nodes")
    page.locator("#range-picker").get_by_role("link", name="15m").click()
    page.wait_for_url(re.compile(r"range=15m"))
    # Panels load as they come into view: bring the first two in, then hover one.
    page.locator("[data-figure=fig-memory]").scroll_into_view_if_needed()
    expect(page.locator("[data-figure=fig-memory] .main-svg").first).to_be_visible()
    chart = page.locator("[data-figure=fig-utilization] .nsewdrag").first
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(page.locator("[data-figure=fig-utilization] .hoverlayer > *").first).to_be_attached()
    expect(page.locator("[data-figure=fig-memory] .hoverlayer > *").first).to_be_attached()
    browsing.screenshot("journey-gpu-busy-run-page")

    # Node 1 lags the run (62 % against 80-91 %): pick it, and the panels show it alone, NVLink too.
    expect(page.locator("#node-skew")).to_contain_text("10.0.0.9")
    page.locator("#gpu-node").select_option("1")
    page.locator("#node-selector").get_by_role("button", name="Show").click()
    page.wait_for_url(re.compile(r"gpu_node=1"))
    assert "range=15m" in page.url  # the picked range stays
    expect(page.locator("#gpu-node")).to_have_value("1")
    expect(page.locator("#signals")).to_contain_text("Signals from node 1:")
    expect(page.locator("#signals")).to_contain_text("NVLink TX, NVLink RX")
    expect(page.locator("#node-skew tr.selected")).to_contain_text("10.0.0.9")
    expect(page.locator("[data-figure=fig-nvlink_tx_kbps] .main-svg").first).to_be_visible()
    page.wait_for_function("() => document.querySelector('[data-figure=fig-utilization]').layout.meta.node === 1")
    expect(page.locator("[data-figure=fig-utilization] .gtitle")).not_to_contain_text("node 0")
    browsing.screenshot("journey-gpu-busy-node", full_page=True)

    # The run's MLflow metrics by step, then by UTC time to line them up with the GPU panels.
    metrics = page.locator("[data-figure=fig-metrics]")
    expect(metrics.locator(".xtitle")).to_have_text("step")
    page.locator("#metrics-x").get_by_role("link", name="time (UTC)").click()
    page.wait_for_url(re.compile(r"x=time"))
    assert "gpu_node=1" in page.url and "range=15m" in page.url
    expect(page.locator("#metrics-x strong")).to_have_text("time (UTC)")
    expect(metrics.locator(".xtitle")).to_have_text("UTC")
    expect(page.locator("#gpu-node")).to_have_value("1")
    browsing.screenshot("journey-gpu-busy-metrics-time")
    page.locator("#metrics-x").get_by_role("link", name="step").click()
    page.wait_for_url(lambda url: "x=time" not in url)
    expect(metrics.locator(".xtitle")).to_have_text("step")


def test_who_is_over_budget(browsing: Browsing, scene: Scene) -> None:
    admit_yaml(WORKLOAD, scene.world.vision, region="us-west-2")
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto("/costs/policies/")
    page.get_by_role("link", name="vision-gpu-budget").first.click()
    page.wait_for_load_state("load")
    expect(page.locator("[data-figure=burn-down] .main-svg").first).to_be_visible()
    expect(page.locator("#spend-by-user")).to_contain_text("alice@example.com")
    # Alice's share is the whole period's spend (the scene's rollups of today and, past the 1st, yesterday).
    expect(page.locator("#spend-by-user")).to_contain_text(usd(budget.evaluate(scene.policy).spend))
    expect(page.locator("#spend-by-experiment")).to_contain_text(scene.failed.experiment_name[:40])
    expect(page.locator("#admissions")).to_contain_text("allowed")
    expect(page.locator("#admissions")).to_contain_text("vit-large")
    browsing.screenshot("journey-over-budget-policy", full_page=True)

    page.get_by_role("link", name="all its costs →").click()
    page.wait_for_url(re.compile(r"/costs/\?policy=vision-gpu-budget"))
    expect(page.locator("select[name=policy]")).to_have_value("vision-gpu-budget")
    browsing.screenshot("journey-over-budget-costs")


def test_why_did_it_fail(browsing: Browsing, scene: Scene) -> None:
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto("/runs/?status=failed")
    page.get_by_role("link", name="vision-failed-1").click()
    page.wait_for_load_state("load")
    expect(page.locator("body")).to_contain_text("CUDA out of memory")
    browsing.screenshot("journey-why-failed", full_page=True)


def test_compare_runs_picked_in_the_runs_table(browsing: Browsing, scene: Scene) -> None:
    live_samples(scene)
    page = browsing.page
    browsing.login_as(scene.world.alice)
    browsing.goto("/runs/")
    for name in ("vision-failed-1", "vision-live-1"):
        page.get_by_label(f"Compare {name}").check()
    page.get_by_role("button", name="Compare selected").click()
    page.wait_for_url(re.compile(r"/runs/compare/\?run=\d+&run=\d+"))
    expect(page.locator("#compare-runs tbody tr")).to_have_count(2)
    expect(page.locator("[data-figure=fig-compare-utilization] .main-svg").first).to_be_visible()
    page.get_by_role("link", name="differences only").click()
    page.wait_for_url(re.compile(r"diff=1"))
    expect(page.locator("#config tbody tr.differs").first).to_be_visible()
    assert page.locator("#config tbody tr:not(.differs)").count() == 0
    browsing.screenshot("journey-compare", full_page=True)
