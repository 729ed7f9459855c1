"""End-to-end fixtures: Debian's Chromium driven by Playwright against pytest-django's live server.

Nothing here downloads a browser: it launches /usr/bin/chromium (AIRBOARD_CHROMIUM overrides).
A machine without it skips every e2e test with the reason, so the suite still runs there;
`.ci/run` installs Chromium first so that CI does run them.

The live server is a real threaded WSGI server in this process on the test database (a file
for SQLite, a real database for PostgreSQL), so every test here is transactional.

Every page a test opens is watched: a console error, an uncaught exception or a Content
Security Policy violation fails the test at teardown, with the messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from billing.costs import rollups
from billing.models import CostDaily, UsagePolicy
from billing.policies.versions import record_version
from runs.choices import RunStatus
from runs.models import Attempt, GpuSample, LogChunk, Node, Run
from tests.conftest import ROOT, World, make_run

# Playwright's sync API runs an event loop in the test's thread, and Django then refuses ORM
# calls from it ("You cannot call this from an async context"). The tests are synchronous, so
# the guard protects nothing here; the usual pytest-playwright + Django workaround. It must be
# set before the session's database fixtures run, so it stays for the session: tests that
# start a deployment check in a subprocess leave it out of that process's environment.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("AIRBOARD_CHROMIUM", "/usr/bin/chromium")
# The same flags as scripts/screenshots.py: no sandbox (CI runs as root), and nothing that
# reaches the network on its own (component updates, sync, QUIC probes).
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
# Each wait in a test is bounded by this; a page that does not come in 10 s is broken.
TIMEOUT_MS = 10_000
# The viewer's time zone: not UTC, so that localtime.js visibly rewrites the server's UTC times.
VIEWER_TZ = "America/New_York"

# Reports every CSP violation through an exposed function that survives navigations.
CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__airboardCsp(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`);
});
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e as `e2e`, so `-m "not e2e"` leaves them out."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One Chromium for the session; the e2e tests skip, saying why, when there is none."""
    if not Path(CHROMIUM).is_file() or not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM}: install it (apt-get install chromium) or set AIRBOARD_CHROMIUM")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@dataclass
class Problems:
    """What the browser complained about while a test ran."""

    console: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    csp: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.console or self.exceptions or self.csp)


@dataclass
class Browsing:
    """A page in its own browser context, the live server's URL, and what went wrong."""

    page: object
    base: str
    problems: Problems

    def url(self, path: str) -> str:
        return self.base + path

    def goto(self, path: str) -> object:
        response = self.page.goto(self.url(path))
        self.page.wait_for_load_state("load")
        return response

    def login_as(self, user: User) -> None:
        """Sign in without the form (one test covers the form): copy a session cookie into the browser."""
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        self.page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": self.base}])

    def screenshot(self, name: str, full_page: bool = False) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


def _context(browser: object, **options: object) -> object:
    context = browser.new_context(
        viewport={"width": 1400, "height": 1000}, timezone_id=VIEWER_TZ, locale="en-US", accept_downloads=True,
        **options,
    )  # fmt: skip
    context.set_default_timeout(TIMEOUT_MS)
    return context


@pytest.fixture
def browsing(browser: object, live_server: object) -> Iterator[Browsing]:
    """A fresh browser context per test (no shared cookies), checked for errors at the end."""
    yield from _browsing(browser, live_server.url)


@pytest.fixture
def dark_browsing(browser: object, live_server: object) -> Iterator[Browsing]:
    """As `browsing`, with the system asking for the dark colour scheme."""
    yield from _browsing(browser, live_server.url, color_scheme="dark")


def _console(problems: Problems, message: object) -> None:
    # Every failed load counts, /favicon.ico too (the site redirects it to its icon).
    if message.type == "error":
        problems.console.append(f"{message.text} ({message.location.get('url', '')})")


def _browsing(browser: object, base: str, **options: object) -> Iterator[Browsing]:
    context = _context(browser, **options)
    problems = Problems()
    context.expose_function("__airboardCsp", lambda report: problems.csp.append(report))
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    page.on("console", lambda message: _console(problems, message))
    page.on("pageerror", lambda e: problems.exceptions.append(str(e)))
    try:
        yield Browsing(page, base, problems)
    finally:
        # Let a CSP report still in flight arrive before judging (the event is async).
        page.evaluate("() => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)))")
        context.close()
    assert not problems, f"the browser reported problems: {problems}"


def path_of(url: str) -> str:
    """The path and query of an absolute URL (what a test compares after a redirect)."""
    return re.sub(r"^https?://[^/]+", "", url)


@dataclass
class Scene:
    """Vision's runs as the e2e tests see them: one failed with retries, one done, one running."""

    world: World
    failed: Run
    succeeded: Run
    running: Run
    policy: UsagePolicy
    running_gpus: int


def _log(node: Node, text: str) -> None:
    LogChunk.objects.create(node=node, seq=0, text=text, line_count=text.count("\n"))


@pytest.fixture
def scene(world: World) -> Scene:
    now = timezone.now()
    failed = make_run(
        world.vision, "vision-failed-1", status=RunStatus.FAILED, submitted_at=now - timedelta(hours=3),
        started_at=now - timedelta(hours=3), ended_at=now - timedelta(hours=2), state_message="CUDA out of memory",
    )  # fmt: skip
    first = failed.attempts.get()
    Node.objects.create(attempt=first, index=1, host="10.0.0.2", status=RunStatus.FAILED)
    second = Attempt.objects.create(
        run=failed, number=2, status=RunStatus.FAILED, started_at=now - timedelta(hours=2, minutes=30),
        ended_at=now - timedelta(hours=2),
    )  # fmt: skip
    for index in (0, 1):
        Node.objects.create(attempt=second, index=index, host=f"10.0.1.{index + 1}", status=RunStatus.FAILED)
    for node in Node.objects.filter(attempt__run=failed):
        lines = [f"attempt {node.attempt.number} node {node.index} step {s} loss 2.{s}" for s in range(20)]
        if (node.attempt.number, node.index) == (2, 1):
            lines[12] = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
            lines.append("torch.OutOfMemoryError: CUDA out of memory (retry)")
        _log(node, "\n".join(lines) + "\n")
    succeeded = make_run(
        world.vision, "vision-ok-1", submitted_at=now - timedelta(hours=5), started_at=now - timedelta(hours=5),
        ended_at=now - timedelta(hours=4),
    )  # fmt: skip
    gpus = 4
    running = make_run(
        world.vision, "vision-live-1", status=RunStatus.RUNNING, submitted_at=now - timedelta(minutes=12),
        started_at=now - timedelta(minutes=10), ended_at=None, num_accelerators=gpus, gpus_per_node=gpus,
        mlflow_run_id="0123456789abcdef0123456789abcdef",
        run_page_url="https://adb-1234.cloud.databricks.com/jobs/runs/812736451",
    )  # fmt: skip
    node = Node.objects.get(attempt__run=running)
    GpuSample.objects.bulk_create(
        GpuSample(run=running, node=node, gpu_index=gpu, ts=now - timedelta(seconds=s),
                  utilization_gpu=80.0 + gpu, memory_used_bytes=60 * 10**9 + gpu)
        for gpu in range(gpus) for s in range(10, 300, 10)
    )  # fmt: skip
    make_run(world.nlp, "nlp-secret-1", status=RunStatus.FAILED)
    policy = UsagePolicy.objects.create(name="vision-gpu-budget", budget_usd=Decimal("1000"))
    policy.teams.add(world.vision)
    record_version(policy, world.sam, note="created")
    today = now.date()
    for day, usd in ((today, "12.50"), (today - timedelta(days=1), "30.25")):
        CostDaily.objects.create(
            day=day, team=world.vision, experiment_name=failed.experiment_name, creator="alice@example.com",
            usage_policy_name=policy.name, accelerator_type="GPU_8xH100", region="us-west-2",
            compute_usd=Decimal(usd), gpu_hours=Decimal("1.5"), runs=1,
        )  # fmt: skip
    rollups.summarize_days([today, today - timedelta(days=1)])
    return Scene(world, failed, succeeded, running, policy, gpus)
