"""`make run` prints the URL last, once the web server answers (dashboard/management/commands/runall.py)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from dashboard.management.commands.runall import wait_until_serving


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(302 if self.path == "/" else 200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_answers_is_serving(server: str) -> None:
    assert wait_until_serving(f"{server}/login/", timeout=5) is True


def test_an_http_error_status_still_means_the_server_answers(server: str) -> None:
    assert wait_until_serving(f"{server}/", timeout=5) is True


def test_nothing_listening_is_not_serving_and_gives_up_at_the_timeout() -> None:
    started = time.monotonic()
    assert wait_until_serving(f"http://127.0.0.1:{_free_port()}/", timeout=0.6, poll=0.1) is False
    assert 0.5 <= time.monotonic() - started < 3


def test_a_dead_web_server_stops_the_wait_at_once() -> None:
    started = time.monotonic()
    assert wait_until_serving(f"http://127.0.0.1:{_free_port()}/", timeout=60, alive=lambda: False) is False
    assert time.monotonic() - started < 1
