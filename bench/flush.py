"""What a transactional test's flush costs: `manage.py flush`, post_migrate and its receivers.

    .venv/bin/python bench/flush.py [--flushes 30]

pytest-django flushes the database after every transactional test (`transactional_db`,
`live_server`, a real worker), and Django's flush sends `post_migrate`, so every receiver of it
runs once per such test: the auth app's permissions, the content types and, where the tree has
it, billing's cost figure triggers (billing.costs.figure_triggers.install). Migrates a fresh
SQLite database in a temporary AIRBOARD_VAR_DIR (the suite's defaults), then prints the median
wall and CPU (this process) milliseconds of one flush, and of `install` alone when the tree has
it. CPU times stand still when a shared machine is busy, where wall times do not. Runs in any
commit's tree (it imports nothing of the project's before Django is set up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(action: Callable[[], object], times: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `action`."""
    walls, cpus = [], []
    for _ in range(times):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flushes", type=int, default=30)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ["AIRBOARD_VAR_DIR"] = tempfile.mkdtemp(prefix="airboard-bench-flush-")
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)  # warm: caches, first statements
    wall, cpu = timed(lambda: call_command("flush", interactive=False, verbosity=0), args.flushes)
    print(f"flush (with post_migrate): {wall:.1f} ms wall, {cpu:.1f} ms CPU (median of {args.flushes})")
    try:
        from billing.costs import figure_triggers
    except ImportError:
        print("billing.costs.figure_triggers: not in this tree")
        return
    wall, cpu = timed(lambda: figure_triggers.install(connection), args.flushes)
    print(f"figure_triggers.install alone: {wall:.1f} ms wall, {cpu:.1f} ms CPU (median of {args.flushes})")


if __name__ == "__main__":
    main()
