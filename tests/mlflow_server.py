"""A real `mlflow server` for tests: SQLite backend in a temp dir, loopback, a free port.

Import the fixture into a test module (`from tests.mlflow_server import mlflow_server`); it is
module-scoped because the server takes about ten seconds to start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

START_TIMEOUT_SECONDS = 60


@dataclass
class MlflowServer:
    """A running tracking server: its URI, process and log file."""

    uri: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    """A port nobody listens on now (the OS picks it; a race with another process is unlikely)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_mlflow_server(tmp_dir: Path) -> MlflowServer:
    """Start `mlflow server` and wait until /health answers."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = tmp_dir / "mlflow-server.log"
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    command = [
        str(mlflow_bin),
        "server",
        "--backend-store-uri", f"sqlite:///{tmp_dir / 'mlflow.db'}",
        "--default-artifact-root", str(tmp_dir / "artifacts"),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "1",
    ]  # fmt: skip
    # The server must not inherit a tracking URI or auth settings from the developer's shell.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=tmp_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = MlflowServer(uri=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    wait_until_healthy(process, f"{server.uri}/health", "mlflow server", server.log, START_TIMEOUT_SECONDS, poll=0.25)
    return server


def wait_until_healthy(
    process: subprocess.Popen,
    url: str,
    what: str,
    log: Callable[[], str],
    timeout: float,
    poll: float = 0.1,
    auth: tuple[str, str] | None = None,
) -> None:
    """Wait until a server we started answers `url` with 2xx; stop it and raise, with its log, if it
    exits first or does not answer within `timeout` seconds. Shared by the loopback test servers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited:\n{log()}")
        try:
            if requests.get(url, auth=auth, timeout=1).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(poll)
    stop_process(process)
    raise RuntimeError(f"{what} did not answer {url} within {timeout}s:\n{log()}")


def stop_process(process: subprocess.Popen, timeout: float = 15) -> None:
    """Terminate a server we started (its children too, where it stops them on SIGTERM); kill it if it hangs."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_mlflow_server(server: MlflowServer) -> None:
    """Stop the server (it runs uvicorn workers as children; terminate lets it stop them)."""
    stop_process(server.process)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One real MLflow tracking server for the test module."""
    server = start_mlflow_server(tmp_path_factory.mktemp("mlflow"))
    yield server
    stop_mlflow_server(server)
