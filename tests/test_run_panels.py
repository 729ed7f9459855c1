"""The run page's GPU panels: one per signal in the rollups, power against its limit, gaps kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from runs.choices import RunEventKind
from runs.models import GpuSample, RunEvent
from runs.telemetry import charts
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def store(run, seconds) -> None:
    node = run.attempts.get().nodes.get()
    store_gpu_samples(
        [
            GpuSample(
                run=run,
                node=node,
                gpu_index=0,
                ts=T0 + timedelta(seconds=s),
                utilization_gpu=90.0,
                power_watts=650.0,
                power_limit_watts=700.0,
                temperature_c=71.0,
                sm_clock_mhz=1980.0,
                utilization_memory=40.0,
            )
            for s in seconds
        ]
    )


def test_a_silence_is_a_gap_not_a_line() -> None:
    x, (y, avg) = charts.with_gaps([0.0, 1.0, 2.0, 60.0, 61.0], [[1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 4, 5]], 10.0)
    assert x == [0.0, 1.0, 2.0, 31.0, 60.0, 61.0] and y == [1.0, 2.0, 3.0, None, 4.0, 5.0]
    assert avg == [1, 2, 3, None, 4, 5]
    assert charts.with_gaps([0.0, 1.0], [[1.0, 2.0]], 10.0) == ([0.0, 1.0], [[1.0, 2.0]])
    # Every 15 s is that series' pace, not a gap each time; a minute's silence in it is one.
    x, (y,) = charts.with_gaps([0.0, 15.0, 30.0, 45.0, 105.0], [[1, 2, 3, 4, 5]], 10.0)
    assert y == [1, 2, 3, 4, None, 5]


def test_run_page_draws_a_panel_per_signal_with_the_gap_and_the_power_limit(world: World) -> None:
    run = make_run(world.vision)
    store(run, [*range(0, 300), *range(900, 1200)])  # ten silent minutes in the middle
    panels = dict(charts.panel_figures(run))
    assert set(panels) == set(charts.PANEL_FIELDS) and all(panels.values())
    power = panels["power_watts"]
    assert power["layout"]["shapes"][0]["y0"] == 700.0
    assert None in power["data"][0]["y"]  # the silence is drawn as a gap
    html = world.client_for(world.alice).get(reverse("run_detail", args=[run.pk])).content.decode()
    for field in charts.PANEL_FIELDS:
        assert f'data-figure="fig-{field}"' in html
    assert None in charts.gpu_series(run, "utilization_gpu")[0].y


def test_range_picker_narrows_every_panel_and_nodes_show_their_skew(world: World) -> None:
    run = make_run(world.vision)
    store(run, range(0, 3600, 5))  # an hour, one GPU on node 0 at 90 %
    second = run.attempts.get().nodes.create(index=1, host="10.0.0.2")
    store_gpu_samples(
        [
            GpuSample(run=run, node=second, gpu_index=0, ts=T0 + timedelta(seconds=s), utilization_gpu=70.0)
            for s in range(0, 3600, 5)
        ]
    )
    client = world.client_for(world.alice)
    whole = client.get(reverse("run_detail", args=[run.pk]))
    last15 = client.get(reverse("run_detail", args=[run.pk]), {"range": "15m"})
    first_x = lambda r: min(t["x"][0] for t in r.context["utilization"]["data"])  # noqa: E731
    assert first_x(whole).startswith("2026-11-02 09:00")
    assert first_x(last15) >= "2026-11-02 09:44"  # the run's last 15 minutes of telemetry
    assert dict(last15.context["panels"])["power_watts"]["data"][0]["x"][0] >= "2026-11-02 09:44"
    assert client.get(reverse("run_detail", args=[run.pk]), {"range": "bogus"}).context["range"] == "all"
    skew = {n.index: round(n.skew, 1) for n in whole.context["node_skew"]}
    assert skew == {0: 10.0, 1: -10.0}
    assert 'id="node-skew"' in whole.content.decode()


def test_xid_events_are_marked_on_every_gpu_panel(world: World) -> None:
    run = make_run(world.vision)
    store(run, range(0, 600, 5))
    node = run.attempts.get().nodes.get()
    # The agent's event shape (runs/agent_ingest.py): kind xid, the Xid number in details.
    RunEvent.objects.create(run=run, node=node, gpu_index=3, ts=T0 + timedelta(minutes=5), kind=RunEventKind.XID,
                            message="Xid 79: GPU has fallen off the bus", details={"xid": 79})  # fmt: skip
    response = world.client_for(world.alice).get(reverse("run_detail", args=[run.pk]))
    marked = [response.context["utilization"], *(f for _, f in response.context["panels"])]
    for figure in marked:
        notes = [a["text"] for a in figure["layout"].get("annotations", [])]
        assert "Xid 79 · GPU 3" in notes
        assert any(s["x0"] == "2026-11-02 09:05:00" and s["yref"] == "paper" for s in figure["layout"]["shapes"])
