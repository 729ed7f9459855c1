"""The GPU node agent: NVML sampling (through tests/fake_pynvml.py), attribution, the disk buffer,
shipping through a real broker, and the server task that stores what it ships.

Only `pynvml` is replaced, through `agent.nvml.load_pynvml`; brokers, workers and /proc are real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent import nvml as agent_nvml
from agent.attribution import Attributor
from agent.buffer import DiskBuffer
from agent.main import main
from agent.nvml import NvmlSampler
from agent.shipper import HttpSender, Shipper, site_url
from runs.choices import RunEventKind, RunSource, TelemetrySource
from runs.models import GpuSample, IngestBatch, RunEvent
from tests import fake_pynvml
from tests.conftest import ROOT, World, make_run, wait_for
from tests.fake_pynvml import GIB, FakeGpu
from tests.mlflow_server import free_port

NOW = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake driver with one default GPU; tests call fake.configure(...) for more."""
    fake_pynvml.configure()
    monkeypatch.setattr(agent_nvml, "load_pynvml", lambda: fake_pynvml)
    # A key the agent sends with each batch; tests that store batches set a real one of vision.
    monkeypatch.setenv("AIRBOARD_AGENT_KEY", "ab_not-a-real-key")
    yield fake_pynvml


def closed_url() -> str:
    """A site URL on loopback where nothing listens: every send is refused at once, and buffered."""
    return f"http://127.0.0.1:{free_port()}"


def buffered_payloads(buffer_dir: Path) -> list[dict[str, Any]]:
    """The batches waiting in the agent's disk buffer, oldest first."""
    return [json.loads(path.read_text()) for path in DiskBuffer(buffer_dir).files()]


def run_agent(tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    """main() in-process with the fake driver and no site to reach; returns (code, the batches it buffered)."""
    code = main(
        ["--host", "gpu-node-1", "--interval", "0.01", "--buffer-dir", str(tmp_path / "buffer"), "--url", closed_url(),
         *args],
    )  # fmt: skip
    return code, buffered_payloads(tmp_path / "buffer")


# --- sampling -----------------------------------------------------------------------------


def test_a_tick_reads_every_field_in_storage_units(fake: Any) -> None:
    fake.configure([FakeGpu(processes=[(4242, 3 * GIB)]), FakeGpu()])
    with NvmlSampler() as sampler:
        samples = sampler.sample_all(NOW)
    assert [s["gpu"] for s in samples] == [0, 1]
    s = samples[0]
    assert s["gpu_uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert s["ts"] == NOW.isoformat()
    assert (s["utilization_gpu"], s["utilization_memory"]) == (97.0, 41.0)
    assert (s["memory_used_bytes"], s["memory_total_bytes"]) == (60 * GIB, 80 * GIB)
    assert (s["power_watts"], s["power_limit_watts"]) == (650.5, 700.0)  # NVML's mW as W
    assert (s["temperature_c"], s["sm_clock_mhz"], s["mem_clock_mhz"]) == (71.0, 1980.0, 2619.0)
    assert s["throttle_reasons"] == 0x4
    assert (s["ecc_corrected"], s["ecc_uncorrected"]) == (3, 0)
    assert (s["pcie_tx_kbps"], s["pcie_rx_kbps"]) == (12_000.0, 34_000.0)  # KB/s as reported
    assert s["processes"] == [{"pid": 4242, "used_memory_bytes": 3 * GIB}]
    assert (s["sm_active"], s["tensor_active"]) == (None, None)  # no GPM on this GPU
    assert (s["nvlink_tx_kbps"], s["nvlink_rx_kbps"]) == (None, None)  # NVLink rates come from GPM only


def test_fields_the_gpu_does_not_report_are_none_not_zero(fake: Any) -> None:
    fake.configure([FakeGpu(
        not_supported={"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetPowerUsage",
                       "nvmlDeviceGetComputeRunningProcesses"},
        # An older driver: the newer clocks-event name is missing, the throttle name answers.
        not_found={"nvmlDeviceGetCurrentClocksEventReasons"}, clocks_event_reasons=0x8,
    )])  # fmt: skip
    with NvmlSampler() as sampler:
        (s,) = sampler.sample_all(NOW)
    for name in ("ecc_corrected", "ecc_uncorrected", "pcie_tx_kbps", "pcie_rx_kbps", "power_watts", "processes"):
        assert s[name] is None, name
    assert s["power_limit_watts"] == 700.0
    assert s["throttle_reasons"] == 0x8
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.state().calls


def test_gpm_activity_where_supported_from_the_second_tick(fake: Any) -> None:
    fake.configure([FakeGpu(gpm_supported=True, over_time={"gpm_sm_util": [10.0, 55.5, 100.0004]}), FakeGpu()])
    with NvmlSampler() as sampler:
        ticks = [sampler.sample_all(NOW + timedelta(seconds=i)) for i in range(3)]
    assert [t[0]["sm_active"] for t in ticks] == [None, 55.5, 100.0]  # a rate needs two samples; clamped
    assert [t[0]["tensor_active"] for t in ticks] == [None, 61.25, 61.25]
    assert {t[1]["sm_active"] for t in ticks} == {None}  # GPM not supported: missing, never 0
    assert not fake.state().gpm_samples  # freed on close


def test_nvlink_throughput_from_gpm_in_kb_per_second(fake: Any) -> None:
    # An SXM H100 with NVLink, and a Hopper PCIe card whose GPM has no NVLink metric.
    fake.configure([
        FakeGpu(gpm_supported=True, over_time={"gpm_nvlink_tx_mibps": [0.0, 180_000.0, 1.2345678]}),
        FakeGpu(gpm_supported=True, gpm_nvlink_tx_mibps=None, gpm_nvlink_rx_mibps=None),
    ])  # fmt: skip
    with NvmlSampler() as sampler:
        ticks = [sampler.sample_all(NOW + timedelta(seconds=i)) for i in range(3)]
    # MiB/s as GPM reports it, times 1024: KB/s, the unit PCIe throughput is stored in.
    # Whole KB/s: 1.2345678 MiB/s is 1264.197... KB/s, kept as 1264 (the noise bits cost the blocks ~13 B a sample).
    assert [t[0]["nvlink_tx_kbps"] for t in ticks] == [None, 180_000.0 * 1024, 1264.0]
    assert [t[0]["nvlink_rx_kbps"] for t in ticks] == [None, 175_500.5 * 1024, 175_500.5 * 1024]
    assert [t[0]["sm_active"] for t in ticks] == [None, 88.5, 88.5]  # the same GPM request still reads activity
    # No NVLink: missing, never 0, and SM activity is still there.
    assert [(t[1]["nvlink_tx_kbps"], t[1]["nvlink_rx_kbps"]) for t in ticks] == [(None, None)] * 3
    assert ticks[2][1]["sm_active"] == 88.5


def test_a_lost_gpu_yields_one_event_and_is_skipped_later(fake: Any) -> None:
    fake.configure([FakeGpu(), FakeGpu(lost_from_tick=1), FakeGpu(xids={2: [79, 48]})])
    with NvmlSampler() as sampler:
        ticks = [sampler.sample_all(NOW + timedelta(seconds=i)) for i in range(4)]
        events = sampler.take_events()
        calls_after_loss = fake.state().calls.count("nvmlDeviceGetMemoryInfo")
    assert [[s["gpu"] for s in t] for t in ticks] == [[0, 1, 2], [0, 2], [0, 2], [0, 2]]
    assert calls_after_loss == 3 + 2 * 3  # GPU 1 was not read again after it was lost
    assert [(e["kind"], e["gpu"]) for e in events] == [("gpu_lost", 1), ("xid", 2), ("xid", 2)]
    assert [e["details"].get("xid") for e in events[1:]] == [79, 48]
    assert events[1]["ts"] != events[2]["ts"]  # two Xids of one tick stay distinct events


def test_without_a_driver_the_agent_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """The real pynvml on this GPU-less machine raises NVMLError_LibraryNotFound at nvmlInit."""
    pytest.importorskip("pynvml")
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    done = subprocess.run(
        [sys.executable, "-m", "agent", "--once", "--run-id", "r1", "--buffer-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "AIRBOARD_URL": closed_url()},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "airboard agent: no NVIDIA driver found (NVMLError_LibraryNotFound): nothing to sample"
    ]


def test_the_management_command_without_a_driver_fails_cleanly(fake: Any, tmp_path: Path) -> None:
    fake.configure(init_error=fake.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(CommandError) as caught:
        call_command("gpu_agent", "--run-id", "r1", "--ticks", "1", "--buffer-dir", str(tmp_path))
    assert caught.value.returncode == 2


# --- attribution --------------------------------------------------------------------------


def test_a_process_with_airboard_run_id_claims_its_gpu(fake: Any, tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={**os.environ, "AIRBOARD_RUN_ID": "run-from-env", "AIRBOARD_RUN_SOURCE": "classic"},
    )
    try:
        fake.configure([FakeGpu(processes=[(os.getpid(), GIB), (child.pid, 2 * GIB)]), FakeGpu()])
        mapping = tmp_path / "gpus.json"
        mapping.write_text(json.dumps({"GPU-00000000-0000-0000-0000-000000000001": "run-mapped", "0": "ignored"}))
        code, payloads = run_agent(tmp_path, "--once", "--mapping", str(mapping))
    finally:
        child.kill()
        child.wait()
    assert code == 0
    (payload,) = payloads
    first, second = payload["samples"]
    assert (first["run"], first["run_source"]) == ("run-from-env", "classic")  # the process wins the mapping
    assert {p["pid"]: p["run"] for p in first["processes"]} == {child.pid: "run-from-env", os.getpid(): ""}
    assert (second["run"], second["run_source"]) == ("run-mapped", "serverless")  # by UUID


def test_the_command_line_run_id_and_the_mapping_by_index(fake: Any, tmp_path: Path) -> None:
    fake.configure([FakeGpu(), FakeGpu(), FakeGpu()])
    code, payloads = run_agent(tmp_path / "a", "--once", "--run-id", "run-cli", "--node", "3")
    assert code == 0
    assert {s["run"] for s in payloads[0]["samples"]} == {"run-cli"}
    assert {(s["node"], s["attempt"], s["host"]) for s in payloads[0]["samples"]} == {(3, None, "gpu-node-1")}

    fake.configure([FakeGpu(), FakeGpu(), FakeGpu()])
    mapping = tmp_path / "gpus.json"
    mapping.write_text(json.dumps({"0": "run-a", "2": {"run": "run-b", "source": "local"}}))
    code, payloads = run_agent(tmp_path / "b", "--once", "--mapping", str(mapping))
    # GPU 1 belongs to no run: not shipped, since the server could not store it.
    assert [(s["gpu"], s["run"], s["run_source"]) for s in payloads[0]["samples"]] == [
        (0, "run-a", "serverless"), (2, "run-b", "local"),
    ]  # fmt: skip


def test_batches_wait_for_500_samples_and_events_go_at_once(fake: Any, tmp_path: Path) -> None:
    # 8 GPUs: 500 samples are due after 63 ticks (504); 130 ticks ship 504, 504, then the 32 left at exit.
    fake.configure([FakeGpu() for _ in range(8)])
    code, payloads = run_agent(tmp_path / "a", "--ticks", "130", "--run-id", "run-big")
    assert code == 0
    assert [len(p["samples"]) for p in payloads] == [504, 504, 32]
    # An Xid on tick 3 does not wait for the 500: it leaves with the 4 ticks' samples so far.
    fake.configure([FakeGpu(xids={3: [79]}), FakeGpu()])
    code, payloads = run_agent(tmp_path / "b", "--ticks", "10", "--run-id", "run-small")
    assert [(len(p["samples"]), [e["kind"] for e in p["events"]]) for p in payloads] == [(8, ["xid"]), (12, [])]


def test_unreadable_environ_is_ignored(tmp_path: Path) -> None:
    attributor = Attributor(run_id=None, proc_root=tmp_path)  # no /proc/<pid> there at all
    sample = {"gpu": 0, "gpu_uuid": "GPU-x", "processes": [{"pid": 1, "used_memory_bytes": 5}]}
    assert attributor.attribute([sample]) == []
    assert sample["processes"][0]["run"] == ""


# --- buffer and shipping, against the real site (Django's live server) and a real worker ----------


def _payload(i: int, samples: int = 100) -> dict[str, Any]:
    return {"version": 1, "source": "nvml", "host": f"batch-{i}", "dropped_samples": 0,
            "samples": [{"run": "run-buf", "gpu": 0, "ts": f"2026-11-02T09:{i:02d}:{j % 60:02d}+00:00",
                         "host": "gpu-node-1", "node": 0, "utilization_gpu": 50.0}
                        for j in range(samples)], "events": []}  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_site_down_buffers_to_the_bound_then_drains_in_order(
    world: World, live_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_run(world.vision, "run-buf")
    key = world.key(world.vision, source=RunSource.SERVERLESS)  # the rows name no run_source: the key's
    # Room for the last four batches (3 to 6 samples) only.
    sizes = [len(json.dumps(_payload(i, samples=i + 1), separators=(",", ":"))) for i in range(6)]
    buffer = DiskBuffer(tmp_path / "buffer", max_bytes=sum(sizes[2:]) + 10)
    down = Shipper(HttpSender(closed_url(), key), buffer)
    for i in range(6):
        assert down.ship(_payload(i, samples=i + 1)) is False
    assert len(buffer) == 4  # the bound: the two oldest batches (1 and 2 samples) were dropped
    assert buffer.dropped_samples == 3

    back = Shipper(HttpSender(live_server.url, key), buffer)
    with caplog.at_level("WARNING", logger="runs.collectors.agent"):
        assert back.ship(_payload(6, samples=7)) is True
    # Batches arrive oldest first: their sizes say which is which.
    assert list(IngestBatch.objects.order_by("pk").values_list("row_count", flat=True)) == [3, 4, 5, 6, 7]
    assert len(buffer) == 0 and buffer.dropped_samples == 0 and back.sent == 5
    assert "dropped 3 sample(s) while the site was away" in caplog.text  # reported once, with the next batch


@pytest.mark.django_db(transaction=True)
def test_a_batch_the_site_refuses_for_good_is_dropped_not_retried(
    world: World, live_server: Any, tmp_path: Path
) -> None:
    buffer = DiskBuffer(tmp_path / "buffer")
    shipper = Shipper(HttpSender(live_server.url, world.key(world.vision)), buffer)
    assert shipper.ship({"source": "not-a-source", "samples": [{"run": "x"}]}) is True  # 422: nothing to retry
    assert (shipper.refused, shipper.sent, len(buffer)) == (1, 0, 0)
    # A wrong key is "not now" (a key being rotated): buffered for the next try.
    stale = Shipper(HttpSender(live_server.url, "ab_not-a-real-key"), buffer)
    assert stale.ship(_payload(0, samples=1)) is False
    assert len(buffer) == 1
    # So is a wrong site URL: a path that is not the API (404), or one the site redirects (to its
    # login page): never followed, since urllib would resend the POST as a bodiless GET.
    for wrong in (f"{live_server.url}/nowhere", f"{live_server.url}/admin"):
        assert Shipper(HttpSender(wrong, world.key(world.vision)), buffer).ship(_payload(0, samples=1)) is False
    assert len(buffer) == 3 and not IngestBatch.objects.exists()


def test_a_site_url_is_http_without_credentials() -> None:
    assert site_url("https://airboard.example.com/ ") == "https://airboard.example.com"
    for bad in ("", "airboard.example.com", "ftp://airboard.example.com", "https://user:pw@airboard.example.com"):
        with pytest.raises(ValueError):
            site_url(bad)


def test_without_a_site_url_the_agent_says_so_and_exits_4(fake: Any, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AIRBOARD_URL", raising=False)
    assert main(["--once", "--run-id", "r1", "--buffer-dir", str(tmp_path)]) == 4


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_agent_ticks_reach_the_site_and_a_worker_stores_samples_and_events(
    world: World, fake: Any, celery_worker: Any, live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one door: the agent posts to the live site with its key; the real worker writes the batches."""
    run = make_run(world.vision, "run-1")
    key = world.key(world.vision)
    monkeypatch.setenv("AIRBOARD_AGENT_KEY", key)
    monkeypatch.setenv("AIRBOARD_URL", live_server.url)
    fake.configure([FakeGpu(), FakeGpu(lost_from_tick=2), FakeGpu(xids={1: [79]})])
    code = main(["--ticks", "4", "--interval", "0.01", "--run-id", "run-1", "--host", "gpu-node-1",
                 "--buffer-dir", str(tmp_path / "b")])  # fmt: skip
    assert code == 0
    assert wait_for(lambda: GpuSample.objects.filter(run=run).count() == 4 + 2 + 4, timeout=60), celery_worker.log()
    assert set(GpuSample.objects.filter(run=run).values_list("source", flat=True)) == {TelemetrySource.NVML}
    assert GpuSample.objects.filter(run=run, gpu_index=1).count() == 2  # lost at its third tick
    events = {(e.kind, e.gpu_index): e for e in RunEvent.objects.filter(run=run)}
    assert set(events) == {(RunEventKind.GPU_LOST, 1), (RunEventKind.XID, 2)}
    assert events[(RunEventKind.XID, 2)].details["xid"] == 79
    assert "fell off the bus" in events[(RunEventKind.GPU_LOST, 1)].message
    assert events[(RunEventKind.XID, 2)].node.host == "10.0.0.1"  # the run source's node, joined by index

    # The same batch posted twice (a buffered resend after a lost answer) is stored once.
    fake.configure([FakeGpu(), FakeGpu()])
    with NvmlSampler() as sampler:
        samples = Attributor("run-1").attribute(sampler.sample_all(datetime.now(UTC)))
    payload = {"source": "nvml", "samples": [{**s, "node": 0, "host": "gpu-node-1"} for s in samples], "events": []}
    shipper = Shipper(HttpSender(live_server.url, key), DiskBuffer(tmp_path / "b2"))
    assert shipper.ship(json.loads(json.dumps(payload))) and shipper.ship(json.loads(json.dumps(payload)))
    assert wait_for(lambda: GpuSample.objects.filter(run=run).count() == 10 + 2, timeout=60), celery_worker.log()
    time.sleep(1)  # give a second write time to (not) happen
    assert GpuSample.objects.filter(run=run).count() == 12
