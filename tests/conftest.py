"""Shared fixtures: the personas and a real Celery worker.

Personas: alice and bob are members of team "vision"; charlie is in team "nlp" and must never
see vision's data; sam is staff and sees everything.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from django.test import Client

from dashboard.models import ApiKey, ApiKeyRole
from runs.choices import AcceleratorType, RunSource, RunStatus
from runs.models import Attempt, Node, Run
from tests.mlflow_server import stop_process

# The tests folder (fixtures in data/, stand-in commands in bin/) and the repository root.
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Stand-in commands for systems we cannot reach here (tests/bin): each answers with real shapes.
BIN = TESTS / "bin"
DATABRICKS = shlex.quote(str(BIN / "databricks"))
PASSWORD = "correct horse battery staple"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@dataclass
class World:
    vision: Group
    nlp: Group
    alice: User
    bob: User
    charlie: User
    sam: User

    def client_for(self, user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    def key(self, team: Group, role: str = ApiKeyRole.INGEST, source: str = RunSource.LOCAL) -> str:
        return ApiKey.issue(team, role, name="test", source=source)[1]

    def api(self, team: Group, role: str = ApiKeyRole.INGEST, source: str = RunSource.LOCAL) -> Client:
        """A client with a new key of `team`; its rows name runs of `source` unless they say otherwise."""
        return Client(headers={"authorization": f"Bearer {self.key(team, role, source)}"})


def serverless_api(world: World, team: Group | None = None) -> Client:
    """An ingest key's client whose rows name serverless runs (make_run's) without saying so."""
    return world.api(team or world.vision, source=RunSource.SERVERLESS)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Rate-limit and lockout counters live in the cache: no test inherits another's."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _plain_csrf_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every page carries a 64-character random CSRF token, so a test asserting that a short name ("n1")
    is absent from a page failed about once in sixty runs on the token alone. Here the secret and its mask
    are all "a" (the masked token is "a" * 64); tests that check CSRF post without a token and still get 403.
    """
    monkeypatch.setattr("django.middleware.csrf._get_new_csrf_string", lambda: "a" * 32)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    """Argon2 is deliberately slow; tests hash many passwords and prove nothing about its cost."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db: None) -> World:
    vision = Group.objects.create(name="vision")
    nlp = Group.objects.create(name="nlp")

    def user(name: str, team: Group | None, **extra: object) -> User:
        u = User.objects.create_user(name, f"{name}@example.com", PASSWORD, **extra)
        if team is not None:
            u.groups.add(team)
        return u

    return World(
        vision=vision,
        nlp=nlp,
        alice=user("alice", vision),
        bob=user("bob", vision),
        charlie=user("charlie", nlp),
        sam=user("sam", None, is_staff=True),
    )


def make_run(team: Group, external_id: str = "run-1", **fields: object) -> Run:
    """A serverless 8xH100 run with one attempt and one node, started at T0 and finished."""
    defaults: dict[str, object] = {
        "experiment_name": "/Workspace/Users/alice/llama-ft",
        "accelerator_type": AcceleratorType.H100_8,
        "num_accelerators": 8,
        "gpus_per_node": 8,
        "region": "us-west-2",
        "home_region": "us-west-2",
        "status": RunStatus.SUCCEEDED,
        "submitted_at": T0 - timedelta(minutes=2),
        "started_at": T0,
        "ended_at": T0 + timedelta(hours=1),
        "creator": "alice@example.com",
    }
    defaults.update(fields)
    run = Run.objects.create(team=team, external_id=external_id, **defaults)
    attempt = Attempt.objects.create(
        run=run, number=1, status=run.status, started_at=run.started_at, ended_at=run.ended_at
    )
    Node.objects.create(attempt=attempt, index=0, host="10.0.0.1", status=run.status)
    return run


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def database_url_for_test_db() -> str:
    """The test database as a DATABASE_URL, for processes the tests start (a worker, a web server)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    auth = f"{user}@" if user else ""
    return f"postgres://{auth}{host}:{port}/{db['NAME']}"


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_worker(
    tmp_dir: Path, queues: str = "ingest,collect,billing", extra_env: dict[str, str] | None = None
) -> WorkerProcess:
    """Start `celery worker` as its own process on the test database and the configured broker.

    `extra_env` sets variables for this worker only (a collector's source, say).
    """
    env = dict(os.environ, **(extra_env or {}))
    env["DATABASE_URL"] = database_url_for_test_db()
    env["AIRBOARD_BROKER_DIR"] = str(settings.CELERY_BROKER_DIR)
    env["PYTHONUNBUFFERED"] = "1"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    log_path = tmp_dir / "worker.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "dashboard", "worker", "-Q", queues, "--pool=solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = WorkerProcess(process, log_path)
    if not wait_for(lambda: "ready." in worker.log() or process.poll() is not None, timeout=60):
        process.kill()
        raise RuntimeError(f"Celery worker did not start:\n{worker.log()}")
    if process.poll() is not None:
        raise RuntimeError(f"Celery worker exited:\n{worker.log()}")
    return worker


def stop_worker(worker: WorkerProcess) -> None:
    stop_process(worker.process, timeout=20)


# A task's lines in the worker's INFO log: one "received", then one of the endings.
TASK_RECEIVED = re.compile(r"Task [\w.]+\[([0-9a-f-]+)\] received")
TASK_ENDED = re.compile(r"Task [\w.]+\[([0-9a-f-]+)\] (?:succeeded|raised|retry|ignored|rejected)")
WORKER_QUEUES = ("ingest", "collect", "billing")


def worker_is_idle(worker: WorkerProcess) -> bool:
    """Nothing waits in the broker's queues and every task the worker received has ended."""
    from dashboard.celery import app

    with app.connection_for_read() as conn:
        for name in WORKER_QUEUES:
            try:
                if conn.default_channel.queue_declare(queue=name, passive=True).message_count:
                    return False
            except conn.channel_errors:  # no such queue yet: nothing was ever sent to it
                continue
    log = worker.log()
    return sorted(TASK_RECEIVED.findall(log)) == sorted(TASK_ENDED.findall(log))


# The session's worker, once a test has started it.
SESSION_WORKERS: list[WorkerProcess] = []


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: None, django_db_blocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One real worker process for the session, consuming from the real broker."""
    with django_db_blocker.unblock():
        worker = start_worker(tmp_path_factory.mktemp("worker"))
    SESSION_WORKERS.append(worker)
    yield worker
    SESSION_WORKERS.remove(worker)
    stop_worker(worker)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Before a test's database is flushed, let the session's worker finish what the test queued.

    A test that posts through the live site queues batches even when it does not wait for them;
    the session's worker (started by an earlier test) picks them up. Its writes racing the
    flush's TRUNCATE deadlock on PostgreSQL, the flush fails, and the next test starts on the
    last one's rows. Only transactional tests commit, so only they can have queued anything.
    """
    transactional = any(
        name in item.fixturenames for name in ("transactional_db", "live_server", "celery_worker")
    ) or any(m.kwargs.get("transaction") for m in item.iter_markers("django_db"))
    if transactional and SESSION_WORKERS and SESSION_WORKERS[0].process.poll() is None:
        wait_for(lambda: worker_settled(SESSION_WORKERS[0]), timeout=60, interval=0.05)
    yield


def worker_settled(worker: WorkerProcess, gap: float = 0.1) -> bool:
    """Idle now and still idle `gap` seconds later.

    A task the worker has taken from the broker but not yet logged as received reads as idle
    for that moment (the queue no longer holds it, the log does not show it yet): a flush then
    raced the batch's store path and deadlocked on PostgreSQL once in CI. Two readings apart
    close that window.
    """
    if not worker_is_idle(worker):
        return False
    time.sleep(gap)
    return worker_is_idle(worker)


# --- A stand-in Databricks workspace and a log directory (collector tests) -----------------


class StandInWorkspace:
    """tests/bin/databricks as a workspace: its phase file flips runs from RUNNING to TERMINATED."""

    def __init__(self, tmp_path: Path) -> None:
        self.state_file = tmp_path / "databricks-state"
        self.calls_file = tmp_path / "databricks-calls"
        self.state_file.write_text("running")

    def finish(self) -> None:
        self.state_file.write_text("finished")

    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []


@pytest.fixture
def workspace(settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandInWorkspace:
    """The stand-in workspace with its runs still running, the run source's list and cluster commands
    pointed at it; creators without a team land in vision (1001 is alice's)."""
    fake = StandInWorkspace(tmp_path)
    monkeypatch.setenv("FAKE_DATABRICKS_STATE", str(fake.state_file))
    monkeypatch.setenv("FAKE_DATABRICKS_CALLS", str(fake.calls_file))
    settings.AIRBOARD_RUN_SOURCE_COMMAND = f"{DATABRICKS} jobs list-runs -o json"
    settings.AIRBOARD_CLUSTER_SOURCE_COMMAND = f"{DATABRICKS} clusters list -o json"
    settings.AIRBOARD_RUN_SOURCE_TEAM = "vision"
    return fake


def collect_runs() -> str:
    """One pass of the run source, as `manage.py collect runs --once` prints it."""
    out = StringIO()
    call_command("collect", "runs", "--once", stdout=out)
    return out.getvalue()


@pytest.fixture
def logs(settings, tmp_path: Path) -> Path:
    """A log directory the log collector reads (and no log command)."""
    root = tmp_path / "logs"
    root.mkdir()
    settings.AIRBOARD_LOG_SOURCE_DIR = str(root)
    settings.AIRBOARD_LOG_SOURCE_COMMAND = ""
    return root
