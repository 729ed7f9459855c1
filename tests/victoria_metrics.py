"""A real VictoriaMetrics for tests: Debian's `victoria-metrics`, a temp data dir, loopback, a free port.

Import the fixture into a test module (`from tests.victoria_metrics import victoria_metrics`).
Pages are loaded through the engine's own import path, `/api/v1/import/prometheus` (the
Prometheus text format, with `timestamp=` for lines that carry none, `extra_label=` for the
`instance` label a scrape would add), then `/internal/force_flush` makes them searchable at once.
The server requires basic auth (`-httpAuth.*`), so the collector's credentials are exercised.
`.ci/run` installs the package when it is missing; without the binary the tests skip, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.mlflow_server import free_port, stop_process, wait_until_healthy

START_TIMEOUT_SECONDS = 30
USERNAME = "airboard"
PASSWORD = "vm-test-password-7c1e"


def binary() -> str | None:
    return os.environ.get("AIRBOARD_VICTORIA_METRICS") or shutil.which("victoria-metrics")


@dataclass
class VictoriaMetrics:
    """A running single-node VictoriaMetrics: its URL, process and log."""

    url: str
    process: subprocess.Popen
    log_path: Path

    @property
    def auth(self) -> tuple[str, str]:
        return (USERNAME, PASSWORD)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def load(self, page: str, *, timestamp_ms: int | None = None, instance: str = "") -> None:
        """Import one exporter page (Prometheus text) and make it searchable."""
        params: dict[str, str] = {}
        if timestamp_ms is not None:
            params["timestamp"] = str(timestamp_ms)
        if instance:
            params["extra_label"] = f"instance={instance}"
        response = requests.post(
            f"{self.url}/api/v1/import/prometheus", params=params, data=page.encode(), auth=self.auth, timeout=10
        )
        response.raise_for_status()
        requests.get(f"{self.url}/internal/force_flush", auth=self.auth, timeout=10).raise_for_status()


def start_victoria_metrics(tmp_dir: Path, path: str) -> VictoriaMetrics:
    port = free_port()
    log_path = tmp_dir / "victoria-metrics.log"
    command = [
        path,
        f"-storageDataPath={tmp_dir / 'data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",  # fixtures carry their scrape times, years back
        "-search.disableCache",  # an answer reflects every import before it
        f"-httpAuth.username={USERNAME}",
        f"-httpAuth.password={PASSWORD}",
    ]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=tmp_dir, stdout=log, stderr=subprocess.STDOUT)
    server = VictoriaMetrics(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    wait_until_healthy(process, f"{server.url}/health", "victoria-metrics", server.log, START_TIMEOUT_SECONDS,
                       auth=server.auth)  # fmt: skip
    return server


def stop_victoria_metrics(server: VictoriaMetrics) -> None:
    stop_process(server.process)


@pytest.fixture(scope="module")
def victoria_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetrics]:
    """One real VictoriaMetrics for the test module; tests keep apart by host names and times."""
    path = binary()
    if path is None:
        pytest.skip("victoria-metrics is not installed (Debian package `victoria-metrics`; .ci/run installs it)")
    server = start_victoria_metrics(tmp_path_factory.mktemp("victoria-metrics"), path)
    yield server
    stop_victoria_metrics(server)
