"""`manage.py runall`: migrate, seed the demo (embedded default only), then run web + worker + beat together.

This is what `make run` calls. One Ctrl-C stops all three; if one of them dies, the others
are stopped too, so a half-running dashboard never lingers.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser

from dashboard.demo.constants import DEMO_USERNAME, demo_password, is_embedded_default
from dashboard.kit.env import env_int, env_str

QUEUES = "ingest,collect,billing"
# Experiments of dashboard/demo/workloads/*.yaml: their runs show the demo was launched already.
DEMO_WORKLOAD_EXPERIMENT_PREFIX = "/Workspace/Users/demo/launcher-"


def wait_until_serving(url: str, timeout: float, poll: float = 0.25, alive: Callable[[], bool] = lambda: True) -> bool:
    """Whether `url` answers an HTTP response (any status) within `timeout` seconds.

    The banner is printed once the web server answers, so the URL and the login are the last lines
    a newcomer sees, below the servers' own start-up banners, and only when the page is there.
    Gives up early once `alive()` is false (the web server exited).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (our own loopback server)
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            time.sleep(poll)
    return False


def seeds_demo(demo_flag: bool, no_seed: bool) -> bool:
    """Whether `runall` loads the demo: on the embedded default unless --no-seed, elsewhere only with --demo.

    A team deployment (`DATABASE_URL`) that ran `make run` on its empty database would
    otherwise get the demo's users, a superuser among them.
    """
    if no_seed:
        return False
    return demo_flag or is_embedded_default()


class Command(BaseCommand):
    help = "Run Airboard on this machine: web server, Celery worker and Celery beat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-seed", action="store_true", help="Do not load the demo workspace.")
        parser.add_argument(
            "--demo",
            action="store_true",
            help="Load the demo workspace even with DATABASE_URL set (by default only the embedded SQLite gets it).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host = env_str("AIRBOARD_HOST", "127.0.0.1")
        port = env_int("AIRBOARD_PORT", 8000, minimum=1)
        web_workers = env_int("AIRBOARD_WEB_WORKERS", 2, minimum=1)
        concurrency = env_int("AIRBOARD_WORKER_CONCURRENCY", 2, minimum=1)

        self.stdout.write("Migrating the database…")
        call_command("migrate", interactive=False, verbosity=0)
        commands = get_commands()
        if "load_prices" in commands:
            call_command("load_prices", "--default")
        demo = seeds_demo(demo_flag=options["demo"], no_seed=options["no_seed"])
        if not demo and not options["no_seed"]:
            self.stdout.write("DATABASE_URL is set: no demo data (pass --demo to load it anyway).")
        if demo and "seed_demo" in commands:
            call_command("seed_demo", "--if-empty")
            # Failed demo runs get their root cause now rather than when a worker is asked.
            call_command("classify_runs")
        if "refresh_costs" in commands:
            # Costs rolled up before the first page is opened, not at beat's first pass.
            call_command("refresh_costs")

        python = sys.executable
        beat_schedule = str(settings.VAR_DIR / "celerybeat-schedule")
        specs = {
            "web": [python, "-m", "gunicorn", "dashboard.wsgi", "--bind", f"{host}:{port}",
                    "--workers", str(web_workers), "--access-logfile", "-", "--timeout", "60"],
            "worker": [python, "-m", "celery", "-A", "dashboard", "worker", "-Q", QUEUES,
                       "--concurrency", str(concurrency), "-l", "INFO"],
            "beat": [python, "-m", "celery", "-A", "dashboard", "beat", "-s", beat_schedule, "-l", "INFO"],
        }  # fmt: skip
        processes = {name: subprocess.Popen(cmd, cwd=settings.BASE_DIR) for name, cmd in specs.items()}
        if demo:
            self._launch_demo_workloads(python)
        self.stdout.write("Starting the web server, the worker and beat…")
        probe_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
        if not wait_until_serving(
            f"http://{probe_host}:{port}/login/", timeout=120, alive=lambda: processes["web"].poll() is None
        ):
            self.stderr.write("The web server did not answer within 120 s; its output above says why.")
        self._banner(host, port)
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        exit_code = 0
        try:
            while not stopping:
                for name, process in processes.items():
                    if process.poll() is not None:
                        self.stderr.write(f"{name} exited with status {process.returncode}; stopping the others.")
                        exit_code = process.returncode or 1
                        stopping = True
                        break
                time.sleep(0.5)
        finally:
            self._stop_all(processes)
        if exit_code:
            sys.exit(exit_code)

    def _launch_demo_workloads(self, python: str) -> None:
        """Once per demo workspace, run the three demo workloads as real local runs.

        One succeeds, one fails with a real Python error, one hits its timeout: the newest
        logs of the demo are then real output, written while the jobs run.
        """
        from django.contrib.auth.models import User

        from dashboard.demo.constants import DEMO_USERNAME
        from runs.models import Run

        alice = User.objects.filter(username=DEMO_USERNAME).first()
        team = alice.groups.order_by("name").first() if alice else None
        already = Run.objects.filter(experiment_name__startswith=DEMO_WORKLOAD_EXPERIMENT_PREFIX).exists()
        if alice is None or team is None or already:
            return
        for name in ("succeed", "fail", "timeout"):
            workload = settings.BASE_DIR / "dashboard" / "demo" / "workloads" / f"{name}.yaml"
            cmd = [python, "manage.py", "launch", "-f", str(workload), "--team", team.name, "--user", alice.username]
            subprocess.Popen(cmd, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stdout.write(f"Launched the demo workloads (succeed, fail, timeout) as local runs of team {team.name}.")

    def _banner(self, host: str, port: int) -> None:
        from runs.models import Run

        shown_host = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host  # noqa: S104
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"Airboard is running at http://{shown_host}:{port}/"))
        if is_embedded_default() and Run.objects.filter(is_demo=True).exists():
            # The newcomer's own machine and terminal: the password seed_demo printed, now in reach.
            self.stdout.write(f"Log in as {DEMO_USERNAME} (or admin, staff) with password '{demo_password()}'")
        self.stdout.write("Press Ctrl-C to stop the web server, the worker and beat.")
        self.stdout.write("")
        self.stdout.flush()

    def _stop_all(self, processes: dict[str, subprocess.Popen]) -> None:
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 15
        for name, process in processes.items():
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in time; killing it.")
                process.kill()
                process.wait()
