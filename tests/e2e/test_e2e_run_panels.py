"""The run page's GPU panels in Chromium: data per panel, linked zoom, switches without a page load.

A two-node, 8-GPU run with two days of minute rollups (stored as ingest writes them,
through store.refresh_minutes' own tables, then folded across GPUs as the ingest path folds them)
and one GPU's one-minute spike on the second day.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs.choices import RunStatus
from runs.models import GpuHour, GpuMinute
from runs.telemetry import envelope_store, gpu_life
from tests.conftest import make_run
from tests.e2e.conftest import Browsing, Scene

pytestmark = pytest.mark.django_db(transaction=True)

DAYS = 2
SPIKE_AT = timedelta(days=1, hours=7, minutes=13)


@pytest.fixture
def big_run(scene: Scene):
    start = (timezone.now() - timedelta(days=DAYS)).replace(second=0, microsecond=0)
    run = make_run(scene.world.vision, "vision-big-1", status=RunStatus.SUCCEEDED, started_at=start,
                   ended_at=start + timedelta(days=DAYS), num_accelerators=8, gpus_per_node=4)  # fmt: skip
    attempt = run.attempts.get()
    nodes = [attempt.nodes.get(), attempt.nodes.create(index=1, host="10.0.0.2")]
    minutes, hours = [], []
    for node in nodes:
        for gpu in range(4):
            for m in range(DAYS * 1440):
                at = start + timedelta(minutes=m)
                peak = 100.0 if (node.index, gpu) == (1, 2) and at - start == SPIKE_AT else 70.0
                minutes.append(GpuMinute(run=run, node=node, gpu_index=gpu, minute=at, samples=60,
                                         utilization_gpu_min=60.0, utilization_gpu_avg=65.0, utilization_gpu_max=peak,
                                         memory_used_bytes_min=5e10, memory_used_bytes_avg=5e10,
                                         memory_used_bytes_max=5e10, temperature_c_min=60.0, temperature_c_avg=60.0,
                                         temperature_c_max=61.0))  # fmt: skip
            for h in range(DAYS * 24):
                hours.append(GpuHour(run=run, node=node, gpu_index=gpu, hour=start + timedelta(hours=h), samples=3600,
                                     utilization_gpu_max=70.0, utilization_gpu_avg=65.0, memory_used_bytes_max=5e10,
                                     temperature_c_max=61.0))  # fmt: skip
    GpuMinute.objects.bulk_create(minutes, batch_size=5000)
    GpuHour.objects.bulk_create(hours)
    envelope_store.rebuild([run.pk])
    gpu_life.rebuild([run.pk])  # hours written here, not by the ingest path
    return run


def panel_max(page, figure: str) -> float:
    return page.evaluate(
        f"Math.max(...document.querySelector('[data-figure={figure}]').data[1].y.filter(v => v !== null))"
    )


def test_the_spike_of_one_minute_of_one_gpu_shows_in_the_envelope_at_all(browsing: Browsing, big_run) -> None:
    page = browsing.page
    browsing.login_as(big_run.team.user_set.get(username="alice"))
    browsing.goto(f"/runs/{big_run.pk}/#gpus")
    util = page.locator("[data-figure=fig-utilization]")
    expect(util.locator(".main-svg").first).to_be_visible()
    # 2,880 minutes of 8 GPUs in at most one bucket a pixel; the band's top still reaches the spike.
    points = page.evaluate("document.querySelector('[data-figure=fig-utilization]').data[2].x.length")
    width = page.evaluate("document.querySelector('[data-figure=fig-utilization]').clientWidth")
    assert points <= width
    assert panel_max(page, "fig-utilization") == 100.0
    expect(util.locator(".gtitle")).to_contain_text("mean of 8 GPUs")


def test_zooming_one_panel_zooms_every_panel_and_rereads_them(browsing: Browsing, big_run) -> None:
    page = browsing.page
    browsing.login_as(big_run.team.user_set.get(username="alice"))
    browsing.goto(f"/runs/{big_run.pk}/#gpus")
    expect(page.locator("[data-figure=fig-utilization] .main-svg").first).to_be_visible()
    expect(page.locator("[data-figure=fig-memory] .main-svg").first).to_be_visible()
    page.evaluate("window.__sameDocument = true")
    before = page.evaluate("Number(document.getElementById('gpu-panels').dataset.requests)")
    # Drag across the middle of the utilization panel: a box zoom.
    drag = page.locator("[data-figure=fig-utilization] .nsewdrag").first
    box = drag.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.45, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.50, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.55, y, steps=5)
    page.mouse.up()
    ranges = """() => ['fig-utilization', 'fig-memory'].map(id => {
        const gd = document.querySelector(`[data-figure=${id}]`); return gd._fullLayout.xaxis.range.join(' '); })"""
    page.wait_for_function(f"() => {{ const r = ({ranges})(); return r[0] === r[1]; }}")
    # Each panel was asked again for the window alone, at its resolution: its points lie in the window,
    # one a minute (a tenth of the run was one bucket in ~20 before).
    page.wait_for_function(f"() => Number(document.getElementById('gpu-panels').dataset.requests) > {before}")
    zoomed = page.evaluate(ranges)
    assert zoomed[0] == zoomed[1]
    for figure in ("fig-utilization", "fig-memory"):
        page.wait_for_function(
            f"""() => {{ const gd = document.querySelector('[data-figure={figure}]');
                const [a, b] = gd._fullLayout.xaxis.range.map(v => Date.parse(v.replace(' ', 'T') + 'Z'));
                const xs = gd.data[2].x.filter(x => x !== null);
                return xs[0] >= a - 120000 && xs[xs.length - 1] <= b + 120000 && xs.length > 30; }}"""
        )
    assert page.evaluate("window.__sameDocument") is True


def test_a_node_switch_and_the_back_button_without_a_page_load(browsing: Browsing, big_run) -> None:
    page = browsing.page
    browsing.login_as(big_run.team.user_set.get(username="alice"))
    browsing.goto(f"/runs/{big_run.pk}/?range=24h#gpus")
    util = page.locator("[data-figure=fig-utilization]")
    expect(util.locator(".main-svg").first).to_be_visible()
    page.evaluate("window.__sameDocument = true")
    page.locator("#gpu-node").select_option("1")
    page.wait_for_url(re.compile(r"gpu_node=1"))
    assert "range=24h" in page.url
    page.wait_for_function("() => document.querySelector('[data-figure=fig-utilization]').layout.meta.node === 1")
    expect(util.locator(".gtitle")).to_contain_text("mean of 4 GPUs")
    expect(page.locator("#signals")).to_contain_text("Signals from node 1:")
    assert panel_max(page, "fig-utilization") == 100.0  # node 1 holds the spike
    page.locator("#range-picker").get_by_role("link", name="all").click()
    page.wait_for_url(re.compile(r"^(?!.*range=)"))
    page.go_back()
    page.wait_for_url(re.compile(r"range=24h"))
    page.go_back()
    page.wait_for_url(re.compile(r"^(?!.*gpu_node=)"))
    page.wait_for_function(
        "() => document.querySelector('[data-figure=fig-utilization]').layout.meta.node === undefined"
    )
    expect(page.locator("#gpu-node")).to_have_value("all")
    expect(util.locator(".gtitle")).to_contain_text("mean of 8 GPUs")
    assert page.evaluate("window.__sameDocument") is True, "the page reloaded"
