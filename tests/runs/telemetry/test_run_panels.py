"""The run page's GPU panels: one per signal in the rollups, power against its limit, gaps kept."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from runs.choices import RunEventKind
from runs.models import GpuMinute, GpuSample, MetricPoint, RunEvent
from runs.telemetry import charts, tier_reads
from runs.telemetry.store import store_gpu_samples
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def store(run, seconds, node=None, **extra) -> None:
    node = node or run.attempts.get().nodes.get()
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
                **extra,
            )
            for s in seconds
        ]
    )


# What an H100's agent adds (GPM) and what NVML's PCIe counter reads, in KB/s; NVLink is GPM's
# MiB/s over all links x 1024 (an all-reduce moving ~180 GB/s each way on an SXM H100).
HOPPER = {
    "sm_active": 78.5, "tensor_active": 41.0, "pcie_tx_kbps": 6849 * 1024.0, "pcie_rx_kbps": 21846 * 1024.0,
    "nvlink_tx_kbps": 184_320.0 * 1024, "nvlink_rx_kbps": 179_200.0 * 1024,
}  # fmt: skip


def test_a_silence_is_a_gap_not_a_line() -> None:
    x, (y, avg) = tier_reads.with_gaps([0.0, 1.0, 2.0, 60.0, 61.0], [[1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 4, 5]], 10.0)
    assert x == [0.0, 1.0, 2.0, 31.0, 60.0, 61.0] and y == [1.0, 2.0, 3.0, None, 4.0, 5.0]
    assert avg == [1, 2, 3, None, 4, 5]
    assert tier_reads.with_gaps([0.0, 1.0], [[1.0, 2.0]], 10.0) == ([0.0, 1.0], [[1.0, 2.0]])
    # Every 15 s is that series' pace, not a gap each time; a minute's silence in it is one.
    x, (y,) = tier_reads.with_gaps([0.0, 15.0, 30.0, 45.0, 105.0], [[1, 2, 3, 4, 5]], 10.0)
    assert y == [1, 2, 3, 4, None, 5]


def page_panels(client, run, view: str = "gpus", **params: str) -> dict:
    """What the run page draws, as charts.js gets it: the frame's panels, then their data from telemetry.json."""
    html = client.get(reverse("run_detail", args=[run.pk]), params).content.decode()
    fields = re.findall(r'data-field="([a-z_]+)"', html)
    if not fields:
        return {}
    asked = {
        "fields": ",".join(fields),
        "view": view,
        **{k: v for k, v in params.items() if k in ("range", "gpu_node")},
    }
    body = client.get(reverse("run_telemetry", args=[run.pk]), asked).json()
    return {panel["field"]: panel["figure"] for panel in body["panels"]}


def test_run_page_draws_a_panel_per_signal_with_the_gap_and_the_power_limit(world: World) -> None:
    run = make_run(world.vision)
    store(run, [*range(0, 300), *range(900, 1200)], **HOPPER)  # ten silent minutes in the middle
    panels = page_panels(world.client_for(world.alice), run)
    assert set(charts.PANEL_FIELDS) <= set(panels) and all(panels.values())
    # PCIe in MB/s as nvidia-smi dmon prints it (rxpci 21846), SM activity on a 0-100 axis.
    assert panels["pcie_rx_kbps"]["data"][0]["y"][0] == 21846.0
    assert panels["sm_active"]["layout"]["yaxis"]["range"] == [0, 105]
    # NVLink in GB/s (184,320 MiB/s is 180 GiB/s), titled so.
    assert panels["nvlink_tx_kbps"]["data"][0]["y"][0] == 180.0
    assert panels["nvlink_rx_kbps"]["data"][0]["y"][0] == 175.0
    assert "GB/s" in panels["nvlink_tx_kbps"]["layout"]["yaxis"]["title"]["text"]
    power = panels["power_watts"]
    assert power["layout"]["shapes"][0]["y0"] == 700.0
    assert None in power["data"][0]["y"]  # the silence is drawn as a gap
    # The default view, the envelope, breaks its line at the silence too and keeps the limit.
    band = page_panels(world.client_for(world.alice), run, view="envelope")["power_watts"]
    assert band["layout"]["shapes"][0]["y0"] == 700.0
    assert all(None in trace["y"] for trace in band["data"])
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
    whole, last15 = page_panels(client, run), page_panels(client, run, range="15m")
    first_x = lambda figure: min(t["x"][0] for t in figure["data"])  # noqa: E731
    assert first_x(whole["utilization_gpu"]).startswith("2026-11-02 09:00")
    assert first_x(last15["utilization_gpu"]) >= "2026-11-02 09:44"  # the run's last 15 minutes of telemetry
    assert last15["power_watts"]["data"][0]["x"][0] >= "2026-11-02 09:44"
    envelope_15 = page_panels(client, run, view="envelope", range="15m")["utilization_gpu"]
    assert min(envelope_15["data"][0]["x"]) >= (T0 + timedelta(minutes=44)).timestamp() * 1000
    response = client.get(reverse("run_detail", args=[run.pk]))
    assert client.get(reverse("run_detail", args=[run.pk]), {"range": "bogus"}).context["range"] == "all"
    skew = {n.index: round(n.skew, 1) for n in response.context["node_skew"]}
    assert skew == {0: 10.0, 1: -10.0}
    assert 'id="node-skew"' in response.content.decode()


def test_xid_events_are_marked_on_every_gpu_panel(world: World) -> None:
    run = make_run(world.vision)
    store(run, range(0, 600, 5))
    node = run.attempts.get().nodes.get()
    # The agent's event shape (runs/collectors/agent.py): kind xid, the Xid number in details.
    RunEvent.objects.create(run=run, node=node, gpu_index=3, ts=T0 + timedelta(minutes=5), kind=RunEventKind.XID,
                            message="Xid 79: GPU has fallen off the bus", details={"xid": 79})  # fmt: skip
    for view in ("gpus", "envelope"):
        marked = list(page_panels(world.client_for(world.alice), run, view=view).values())
        assert len(marked) == 5  # utilization and the four signals this GPU reported
        for figure in marked:
            notes = [a["text"] for a in figure["layout"].get("annotations", [])]
            assert "Xid 79 · GPU 3" in notes
            assert any(s["x0"] == "2026-11-02 09:05:00" and s["yref"] == "paper" for s in figure["layout"]["shapes"])


def test_a_signal_the_gpus_never_reported_gets_no_panel_and_the_coverage_line_says_so(world: World) -> None:
    run = make_run(world.vision)
    store(run, range(0, 600, 5))  # an A100 without GPM under MIG: no SM, tensor or PCIe values
    response = world.client_for(world.alice).get(reverse("run_detail", args=[run.pk]))
    html = response.content.decode()
    panels = page_panels(world.client_for(world.alice), run)
    assert {field for field, figure in panels.items() if figure} == {
        "utilization_gpu", "power_watts", "temperature_c", "sm_clock_mhz", "utilization_memory"
    }  # fmt: skip
    for field in ("sm_active", "tensor_active", "pcie_tx_kbps", "pcie_rx_kbps", "nvlink_tx_kbps", "nvlink_rx_kbps"):
        assert f'data-figure="fig-{field}"' not in html
    signals = response.context["signals"]
    # This fixture's agent sent no memory either: said, not drawn as an empty panel.
    missing = ["memory", "SM activity", "tensor activity", "PCIe TX", "PCIe RX", "NVLink TX", "NVLink RX"]
    assert signals.not_reported == missing
    assert f"Not reported by these GPUs: {', '.join(missing)}" in html
    assert "NVLink traffic needs NVLink GPUs with GPM, or DCGM profiling" in html
    assert signals.reported[0] == "utilization"


def test_signals_come_from_rollups_or_raw_rows_in_one_query(world: World, django_assert_num_queries) -> None:
    run = make_run(world.vision)
    store(run, range(0, 120), **HOPPER)
    with django_assert_num_queries(1):  # the hour rollup answers
        found = charts.signals_present(run)
    assert {"sm_active", "tensor_active", "pcie_tx_kbps", "pcie_rx_kbps", "utilization_gpu"} <= found
    assert "memory_used_bytes" not in found
    # Minutes written without hours (a bulk load), then raw rows not rolled up yet.
    minutes_only = make_run(world.vision, "minutes-only")
    node = minutes_only.attempts.get().nodes.get()
    GpuMinute.objects.create(run=minutes_only, node=node, gpu_index=0, minute=T0, samples=60, sm_active_max=80.0)
    assert charts.signals_present(minutes_only) == {"sm_active"}
    raw_only = make_run(world.vision, "raw-only")
    node = raw_only.attempts.get().nodes.get()
    GpuSample.objects.create(run=raw_only, node=node, gpu_index=0, ts=T0, pcie_rx_kbps=1024.0)
    assert charts.signals_present(raw_only) == {"pcie_rx_kbps"}
    assert charts.signals_present(raw_only, node_ids=[]) == frozenset()


def _two_nodes(world: World):
    run = make_run(world.vision)
    store(run, range(0, 600, 5), **HOPPER)
    second = run.attempts.get().nodes.create(index=1, host="10.0.0.2")
    store(run, range(0, 600, 5), node=second)  # node 1: an older GPU, no GPM
    return run, second


def test_node_selector_filters_every_panel_and_is_linkable(world: World) -> None:
    run, _ = _two_nodes(world)
    client = world.client_for(world.alice)
    url = reverse("run_detail", args=[run.pk])
    names = lambda figure: {t["name"] for t in figure["data"]}  # noqa: E731
    assert names(page_panels(client, run)["utilization_gpu"]) == {"node 0 · GPU 0", "node 1 · GPU 0"}
    assert 'id="node-selector"' in client.get(url).content.decode()
    one = client.get(url, {"gpu_node": "1"})
    assert one.context["gpu_node"] == 1
    panels = page_panels(client, run, gpu_node="1")
    assert names(panels["utilization_gpu"]) == {"node 1 · GPU 0"}
    assert names(panels["power_watts"]) == {"node 1 · GPU 0"}
    assert "sm_active" not in panels  # node 1 has no GPM: no panel, though node 0 has one
    assert panels["utilization_gpu"]["layout"]["meta"]["node"] == 1  # zoom asks for node 1 again
    html = one.content.decode()
    assert '<option value="1" selected>' in html and "Signals from node 1:" in html
    assert 'data-gpu-node="1"' in html  # charts.js asks for node 1's data
    silent = run.attempts.get().nodes.create(index=2, host="10.0.0.3")  # sent nothing
    quiet = client.get(url, {"gpu_node": str(silent.index)})
    assert page_panels(client, run, gpu_node=str(silent.index)) == {}
    assert "No GPU utilization samples from this node" in quiet.content.decode()
    zero = page_panels(client, run, gpu_node="0", range="15m")
    assert names(zero["sm_active"]) == {"node 0 · GPU 0"}


def test_an_unknown_node_falls_back_to_all_nodes_visibly_and_the_json_refuses_it(world: World) -> None:
    run, _ = _two_nodes(world)
    client = world.client_for(world.alice)
    url = reverse("run_detail", args=[run.pk])
    for bad in ("7", "-1", "x", "1.5", "9" * 40):
        response = client.get(url, {"gpu_node": bad})
        assert response.status_code == 200 and response.context["gpu_node"] is None
        assert 'data-gpu-node="all"' in response.content.decode()
        assert 'id="node-error"' in response.content.decode()
    assert 'id="node-error"' not in client.get(url, {"gpu_node": "all"}).content.decode()
    telemetry = reverse("run_telemetry", args=[run.pk])
    for bad in ("7", "x", "-1", "9" * 40):
        refused = client.get(telemetry, {"field": "sm_active", "gpu_node": bad})
        assert refused.status_code == 400 and "gpu_node" in refused.json()["error"]
    answer = client.get(telemetry, {"field": "utilization_gpu", "gpu_node": "1"}).json()
    assert [t["name"] for t in answer["figure"]["data"]] == ["node 1 · GPU 0"]
    assert answer["figure"]["layout"]["meta"]["node"] == 1
    assert len(client.get(telemetry, {"field": "utilization_gpu"}).json()["figure"]["data"]) == 2


def test_metrics_switch_between_step_and_utc_time_with_the_compare_figure(world: World) -> None:
    run = make_run(world.vision)
    for step in range(3):
        ts = T0 + timedelta(minutes=step)
        MetricPoint.objects.create(run=run, key="loss", step=step * 100, ts=ts, value=2.0 - step)
    client = world.client_for(world.alice)
    url = reverse("run_detail", args=[run.pk])
    by_step = client.get(url).context["metrics"]
    assert by_step["data"][0]["x"] == [0, 100, 200] and by_step["data"][0]["name"] == "loss"
    assert by_step["layout"]["xaxis"]["title"]["text"] == "step"
    by_time = client.get(url, {"x": "time"})
    figure = by_time.context["metrics"]
    # UTC, as the GPU panels above: a loss spike lines up with the telemetry.
    assert figure["data"][0]["x"] == ["2026-11-02 09:00:00", "2026-11-02 09:01:00", "2026-11-02 09:02:00"]
    assert figure["layout"]["xaxis"]["type"] == "date"
    assert "<strong>time (UTC)</strong>" in by_time.content.decode()
    assert client.get(url, {"x": "bogus"}).context["x_axis"] == "step"
