"""`manage.py collect prometheus --once` against a real VictoriaMetrics loaded with real dcgm-exporter pages.

The pages (tests/data/telemetry/SOURCES.md) go in through VictoriaMetrics' own Prometheus-text
import, at the scrape times each test chooses; the collector reads them back with query_range
as it reads any Prometheus-compatible server.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from runs.choices import RunEventKind, RunStatus, TelemetrySource
from runs.collectors import prometheus
from runs.models import CollectorState, GpuSample, Node, Run, RunEvent
from runs.telemetry.importers.common import MIB
from runs.telemetry.labels import mig_gpu_index
from tests.conftest import TESTS, World, make_run
from tests.victoria_metrics import PASSWORD, VictoriaMetrics, victoria_metrics  # noqa: F401 (fixture)

STEP = 30
PAGES = TESTS / "data" / "telemetry"


@pytest.fixture
def vm(settings, victoria_metrics: VictoriaMetrics) -> VictoriaMetrics:  # noqa: F811
    settings.AIRBOARD_PROMETHEUS_URL = victoria_metrics.url
    settings.AIRBOARD_PROMETHEUS_USERNAME, settings.AIRBOARD_PROMETHEUS_PASSWORD = victoria_metrics.auth
    settings.AIRBOARD_PROMETHEUS_STEP_SECONDS = STEP
    settings.AIRBOARD_PROMETHEUS_NAMESPACE = ""
    return victoria_metrics


def collect() -> str:
    out = StringIO()
    call_command("collect", "prometheus", "--once", stdout=out)
    return out.getvalue()


def running_run(world: World, external_id: str, host: str, started: datetime) -> Run:
    run = make_run(world.vision, external_id, status=RunStatus.RUNNING, started_at=started, ended_at=None)
    Node.objects.filter(attempt__run=run).update(host=host)
    return run


def grid_time(at: datetime) -> int:
    """A scrape time (ms) on the collector's step grid, so a stored instant is the scrape's own."""
    return math.floor(at.timestamp() / STEP) * STEP * 1000


def samples(run: Run, gpu: int) -> list[GpuSample]:
    return list(GpuSample.objects.filter(run=run, gpu_index=gpu).order_by("ts"))


def test_a_runs_series_are_stored_with_the_pages_values_and_a_second_pass_stores_nothing(
    world: World, vm: VictoriaMetrics
) -> None:
    """The V100 page (no Hostname label: matched by the `instance` a scrape adds) at three scrapes, one missed."""
    now = timezone.now()
    run = running_run(world, "prom-v100", "gpu-v100-1", now - timedelta(minutes=20))
    first = grid_time(now - timedelta(minutes=10))
    page = (PAGES / "dcgm_v100_clocks.prom").read_text()
    for offset in (0, STEP, 3 * STEP):  # the scrape at 2 * STEP never happened
        vm.load(page, timestamp_ms=first + offset * 1000, instance="gpu-v100-1:9400")

    out = collect()

    gpu1 = samples(run, 1)
    expected_times = [datetime.fromtimestamp(first / 1000 + offset, tz=UTC) for offset in (0, STEP, 3 * STEP)]
    assert [s.ts for s in gpu1] == expected_times  # the missed scrape is a gap, not a repeated value
    for sample in gpu1:
        assert (sample.sm_clock_mhz, sample.mem_clock_mhz, sample.temperature_c) == (1380, 877, 56)
        assert sample.power_watts == pytest.approx(167.362)
        assert sample.source == TelemetrySource.PROMETHEUS
        assert sample.node.host == "gpu-v100-1"
    gpu0 = samples(run, 0)  # GPU 0's lines are DCGM_FI_PROF_*: DRAM active stands in for memory utilisation
    assert [(s.ts, s.pcie_tx_kbps, s.pcie_rx_kbps, s.utilization_memory) for s in gpu0] == [
        (ts, 0, 0, 0) for ts in expected_times
    ]
    assert "6 sample(s) read, 6 new" in out

    again = collect()

    assert "0 new" in again
    assert GpuSample.objects.filter(run=run).count() == 6


def test_kubernetes_pods_are_matched_by_the_pod_label_within_the_namespace(
    world: World, vm: VictoriaMetrics, settings
) -> None:
    """The H100 MIG page: instance 9 is the tts pod's; instance 7 another pod's; instance 8 no pod's."""
    settings.AIRBOARD_PROMETHEUS_NAMESPACE = "model-playground-stg"
    now = timezone.now()
    pod = "tts-predictor-00011-deployment-5554f75554-8j8pl"
    run = running_run(world, "prom-mig", pod, now - timedelta(minutes=20))
    at = grid_time(now - timedelta(minutes=5))
    vm.load((PAGES / "dcgm_h100_mig_prof.prom").read_text(), timestamp_ms=at)

    collect()

    stored = list(GpuSample.objects.filter(run=run).values_list("gpu_index", "utilization_gpu", "ts"))
    assert stored == [(mig_gpu_index(0, 9), 0.0, datetime.fromtimestamp(at / 1000, tz=UTC))]

    settings.AIRBOARD_PROMETHEUS_NAMESPACE = "another-namespace"
    later = running_run(world, "prom-mig-later", pod, now - timedelta(minutes=20))
    collect()
    assert not GpuSample.objects.filter(run=later).exists()


def test_a_bad_series_is_skipped_and_counted_and_the_rest_of_the_pass_is_stored(
    world: World, vm: VictoriaMetrics, settings
) -> None:
    """dcgm_scrapes.prom: GPU 1 reads 250 % utilisation (skipped, counted); blank sentinels are missing values."""
    settings.AIRBOARD_PROMETHEUS_STEP_SECONDS = 15
    scraped = datetime.fromtimestamp(1705314225, tz=UTC)
    run = make_run(world.vision, "prom-scrapes", started_at=scraped - timedelta(minutes=1),
                   ended_at=scraped + timedelta(minutes=1))  # fmt: skip
    Node.objects.filter(attempt__run=run).update(host="node-1")
    vm.load((PAGES / "dcgm_scrapes.prom").read_text())  # its lines carry their scrape times

    result = prometheus.collect_once(now=scraped + timedelta(minutes=30))

    gpu0 = samples(run, 0)
    assert [(s.ts, s.utilization_gpu) for s in gpu0] == [(scraped, 87), (scraped + timedelta(seconds=15), 91)]
    assert gpu0[0].memory_used_bytes == 4567 * MIB and gpu0[0].sm_clock_mhz == 1980
    assert gpu0[1].power_watts is None  # the `garbage` line never reached the engine
    gpu1 = samples(run, 1)
    assert [(s.utilization_gpu, s.temperature_c, s.power_watts, s.sm_clock_mhz) for s in gpu1] == [
        (None, None, None, 1755)
    ]  # 250 % refused; the INT32 and FP64 blanks are missing
    assert samples(run, mig_gpu_index(0, 13))[0].memory_used_bytes == 1024 * MIB
    state = CollectorState.objects.get(name="prometheus")
    assert state.refused_total == 1
    assert "DCGM_FI_DEV_GPU_UTIL" in state.last_refusal and "above 100%" in state.last_refusal
    assert "1 series or queries refused" in result.lines[0]


def test_a_new_xid_becomes_one_run_event(world: World, vm: VictoriaMetrics) -> None:
    """DCGM_FI_DEV_XID_ERRORS holds the last XID: an event when it changes to a new value, not at every scrape."""
    now = timezone.now()
    run = running_run(world, "prom-xid", "gpu-xid-1", now - timedelta(minutes=20))
    first = grid_time(now - timedelta(minutes=10))
    # The all-zero page's XID line, its value set to what a GPU that fell off the bus reports.
    page = (PAGES / "dcgm_all_zero.prom").read_text().splitlines()
    line = next(text for text in page if text.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    for i, xid in enumerate((0, 79, 79, 79)):
        vm.load(line.removesuffix(" 0") + f" {xid}\n", timestamp_ms=first + i * STEP * 1000, instance="gpu-xid-1:9400")

    collect()
    collect()

    events = list(RunEvent.objects.filter(run=run, kind=RunEventKind.XID).values_list("gpu_index", "details", "ts"))
    assert events == [(0, {"xid": 79, "source": "prometheus"}, datetime.fromtimestamp(first / 1000 + STEP, tz=UTC))]


def test_wrong_credentials_fail_the_pass_without_showing_them(world: World, vm: VictoriaMetrics, settings) -> None:
    settings.AIRBOARD_PROMETHEUS_PASSWORD = "not-the-password-4b2"
    running_run(world, "prom-auth", "gpu-auth-1", timezone.now() - timedelta(minutes=5))

    with pytest.raises(CommandError, match="refused the credentials"):
        collect()

    state = CollectorState.objects.get(name="prometheus")
    assert "401" in state.last_error
    assert "not-the-password-4b2" not in state.last_error and PASSWORD not in state.last_error


def test_without_a_url_the_collector_says_so_and_returns(settings) -> None:
    settings.AIRBOARD_PROMETHEUS_URL = ""
    assert prometheus.NOT_CONFIGURED in collect()


def test_a_long_window_is_read_in_bounded_chunks_over_passes(
    world: World, vm: VictoriaMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query never spans more than MAX_STEPS_PER_QUERY steps; a backlog drains over passes, from the cursor."""
    monkeypatch.setattr(prometheus, "MAX_STEPS_PER_QUERY", 3)
    monkeypatch.setattr(prometheus, "MAX_CHUNKS_PER_PASS", 2)
    asked: list[tuple[int, int]] = []
    original = prometheus.PrometheusSource.query_range

    def spy(self: Any, query: str, start: int, end: int, step: int) -> Any:
        asked.append((start, end))
        return original(self, query, start, end, step)

    monkeypatch.setattr(prometheus.PrometheusSource, "query_range", spy)
    now = timezone.now()
    first = grid_time(now - timedelta(minutes=10))
    run = running_run(world, "prom-chunks", "gpu-chunks-1", datetime.fromtimestamp(first / 1000, tz=UTC))
    page = (PAGES / "dcgm_v100_clocks.prom").read_text()
    for i in range(10):  # ten scrapes, one a step
        vm.load(page, timestamp_ms=first + i * STEP * 1000, instance="gpu-chunks-1:9400")

    collect()

    assert max((end - start) // STEP + 1 for start, end in asked) == 3
    assert len(samples(run, 1)) == 6  # two chunks of three steps this pass
    until = CollectorState.objects.get(name="prometheus").cursor["attempts"][str(run.attempts.get().pk)]["until"]
    assert until == first / 1000 + 5 * STEP

    collect()  # starts five minutes (ten steps) before its cursor: the window's start here, read again
    collect()

    assert [s.ts for s in samples(run, 1)] == [
        datetime.fromtimestamp(first / 1000 + i * STEP, tz=UTC) for i in range(10)
    ]
