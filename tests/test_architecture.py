"""The house's rules: rooms a newcomer can read, and contracts that can fail.

`make lint` runs `lint-imports` with the contracts in pyproject.toml. These tests keep those
contracts honest: the forbidden lists name every room (a new one cannot slip past them), the
two home-made contracts find what they are for, and runs/ keeps few modules at its top.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import grimp
import pytest

from scripts.import_contracts import find_cycles, private_imports
from tests.conftest import TESTS

ROOT = TESTS.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
# Rooms a contract may leave out on purpose, and why.
ALLOWED_FOR_BILLING = {"runs.models", "runs.choices", "runs.cancel", "runs.migrations", "runs.apps"}
ALLOWED_FOR_MODELS = {
    *("runs.models", "runs.choices", "runs.migrations", "runs.apps"),
    *("billing.models", "billing.choices", "billing.fields", "billing.migrations", "billing.apps"),
}


def contract(name_start: str) -> dict:
    return next(c for c in CONFIG["contracts"] if c["name"].startswith(name_start))


def children(package: str) -> set[str]:
    """The modules and packages directly inside `package` (no __init__)."""
    folder = ROOT / package
    found = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    found |= {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    found |= {p.name for p in folder.iterdir() if p.is_dir() and p.name in {"management", "templatetags"}}
    return {f"{package}.{name}" for name in found}


def test_runs_keeps_at_most_fifteen_modules_at_its_top() -> None:
    top = sorted(p.name for p in (ROOT / "runs").glob("*.py"))
    assert len(top) <= 15, top
    rooms = {p.name for p in (ROOT / "runs").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"telemetry", "failures", "clusters", "collectors", "launch", "workload", "models"} <= rooms


def test_billing_reads_every_room_of_runs_but_its_models_through_nothing() -> None:
    forbidden = set(contract("Billing reads runs only")["forbidden_modules"])
    assert children("runs") - ALLOWED_FOR_BILLING == forbidden


def test_models_and_choices_are_forbidden_every_room_above_them() -> None:
    forbidden = set(contract("Models and choices")["forbidden_modules"])
    for app in ("runs", "billing"):
        assert children(app) - ALLOWED_FOR_MODELS <= forbidden | {f"{app}.admin"}, app


def test_acyclic_modules_finds_a_cycle_hidden_in_a_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "knot"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from knot import b\n")
    (package / "b.py").write_text(
        textwrap.dedent("""
        def later():
            from knot import a  # inside a function: still a cycle
            return a
    """)
    )
    (package / "c.py").write_text("from knot import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("knot", cache_dir=None)
    assert find_cycles(graph, set(graph.modules)) == [["knot.a", "knot.b"]]
    sys.modules.pop("knot", None)


def test_private_imports_are_found_across_modules_only(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "one.py").write_text("_secret = 1\n__version__ = '1'\n")
    (package / "two.py").write_text("from pkg.inner.one import _secret, __version__\n")
    assert private_imports(["pkg"], tmp_path) == ["pkg.two:1 imports _secret from pkg.inner.one"]


def test_private_names_are_found_through_relative_imports_and_attributes(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("from .one import _secret\n")
    (package / "inner" / "one.py").write_text("_secret = 1\n\ndef own():\n    return _secret\n")
    (package / "two.py").write_text(
        textwrap.dedent("""
        import pkg.inner.one
        import pkg.inner.one as alias
        from pkg.inner import one

        def peek(obj):
            return one._secret, alias._secret, pkg.inner.one._secret, obj._private, one.__name__
    """)
    )
    assert private_imports(["pkg"], tmp_path) == [
        "pkg.inner:1 imports _secret from pkg.inner.one",
        "pkg.two:7 reads _secret of pkg.inner.one",
        "pkg.two:7 reads _secret of pkg.inner.one",
        "pkg.two:7 reads _secret of pkg.inner.one",
    ]


def test_the_project_has_no_private_import_and_no_cycle() -> None:
    assert private_imports(["runs", "billing", "dashboard", "tests", "bench", "agent", "scripts"], ROOT) == []
    graph = grimp.build_graph("runs", "billing", "dashboard", cache_dir=None)
    assert find_cycles(graph, set(graph.modules)) == []


KIT_MODULES = (
    *("access", "commands", "csv_export", "env", "fields", "figures", "lookups", "outbound", "pg", "progress"),
    *("queue", "ratelimit", "redaction", "regions", "schemas", "security"),
)
# Modules the house moved (issues 18 and 36), as code and prose named them before: a docstring, comment,
# template or README that still names one sends a newcomer to a file that is not there.
MOVED = {
    "billing.alerts": "billing.policies.alerts",
    "billing.egress": "billing.costs.egress",
    "billing.history": "billing.prices.history",
    "billing.money": "billing.prices.money",
    "billing.policy_split": "billing.policies.split",
    "billing.reports": "billing.costs.reports",
    "billing.rollups": "billing.costs.rollups",
    "billing.run_costs": "billing.costs.run_costs",
    "billing.spend": "billing.costs.spend",
    "billing.pricebook": "billing.prices.pricebook",
    "billing.usage_source": "billing.reconcile.usage_source",
    "runs.advice": "runs.clusters.advice",
    "runs.agent_ingest": "runs.collectors.agent",
    "runs.blocks": "runs.telemetry.blocks",
    "runs.charts": "runs.telemetry.charts",
    "runs.classify": "runs.failures.classify",
    "runs.classify_rules": "runs.failures.rules",
    "runs.credentials": "runs.workload.credentials",
    "runs.demo": "dashboard.demo.seed",
    "runs.demo_live": "dashboard.demo.live",
    "runs.demo_write": "dashboard.demo.write",
    "runs.downsample": "runs.telemetry.downsample",
    "runs.failure_stats": "runs.failures.stats",
    "runs.fleet": "runs.telemetry.fleet",
    "runs.importers": "runs.telemetry.importers",
    "runs.launcher": "runs.launch.launcher",
    "runs.partitions": "runs.telemetry.partitions",
    "runs.postmortem": "runs.failures.postmortem",
    "runs.retention": "runs.telemetry.retention",
    "runs.stalls": "runs.telemetry.stalls",
    "runs.uptime": "runs.models.uptime",
    "runs/demo_workloads": "dashboard/demo/workloads",
    # Issue 36: the kit both apps import moved into dashboard/kit/, the API's pieces into dashboard/api/.
    **{f"dashboard{sep}{name}": f"dashboard{sep}kit{sep}{name}" for name in KIT_MODULES for sep in "./"},
    "dashboard.fair_ingest": "dashboard.api.fair_ingest",
    "dashboard/fair_ingest": "dashboard/api/fair_ingest",
    "dashboard/api.py": "dashboard/api/core.py",
}
# A model field's help_text is migration state: renaming it there costs a migration of its own.
MOVED_NAME_KEPT = {("runs/models/telemetry.py", "runs.blocks")}
TEXT_SUFFIXES = {".py", ".md", ".html", ".yaml", ".toml", ".txt", ".js", ".css", ""}


def test_no_file_names_a_module_by_its_old_place() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(old) for old in MOVED) + r")(?![\w/])")
    found = []
    for name in files:
        if "/migrations/" in name or name.startswith("static/vendor/") or name == "tests/test_architecture.py":
            continue
        path = ROOT / name
        if path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in pattern.finditer(line):
                if (name, match.group(1)) not in MOVED_NAME_KEPT:
                    found.append(f"{name}:{number} {match.group(1)} (now {MOVED[match.group(1)]})")
    assert found == []


# --- Tasks by name -----------------------------------------------------------------------------

TASK_MODULES = {"runs.tasks", "billing.tasks", "dashboard.tasks"}


def enqueued_names() -> dict[str, str]:
    """Task names domain code sends by name (`enqueue_on_commit("runs.x", ...)`, or a name it
    picks from literals first), with where: every string literal shaped like a task name in a
    module that calls `enqueue_on_commit`."""
    found: dict[str, str] = {}
    for package in ("runs", "billing", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts or path.name == "queue.py":
                continue
            text = path.read_text()
            if "enqueue_on_commit(" not in text:
                continue
            for node in ast.walk(ast.parse(text)):
                is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
                if is_text and re.fullmatch(r"(runs|billing)\.[a-z_]+", node.value):
                    found[node.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_task_sent_by_name_exists_and_has_a_worker_queue() -> None:
    from dashboard.celery import app
    from dashboard.management.commands.runall import QUEUES
    from dashboard.schedule import BEAT_SCHEDULE

    app.loader.import_default_modules()
    sent = enqueued_names()
    assert {"runs.classify_run", "runs.ingest_gpu_samples", "billing.derive_egress"} <= set(sent)
    sent |= {entry["task"]: f"beat {key}" for key, entry in BEAT_SCHEDULE.items()}
    missing = {name: where for name, where in sent.items() if name not in app.tasks}
    assert missing == {}
    workers = set(QUEUES.split(","))
    for name in sent:
        queue = app.amqp.router.route({}, name, (), {}).get("queue")
        assert queue is not None and queue.name in workers, (name, queue)


def test_no_domain_module_imports_a_tasks_module() -> None:
    graph = grimp.build_graph("runs", "billing", "dashboard", cache_dir=None)
    for tasks in TASK_MODULES:
        importers = graph.find_modules_that_directly_import(tasks)
        assert importers <= TASK_MODULES, (tasks, importers - TASK_MODULES)


# dashboard/ rooms the apps may import besides the kit: the API's shared pieces (dashboard/api/),
# API keys, the app config, and the Celery app (dashboard.kit.queue sends through it).
SHARED_WITH_THE_APPS = {
    "dashboard.api",
    "dashboard.models",
    "dashboard.apps",
    "dashboard.celery",
    "dashboard.migrations",
}
# The kit is a folder; Django finds template tag libraries only in the app's own templatetags/.
KIT = {"dashboard.kit", "dashboard.templatetags"}


def test_every_dashboard_module_is_kit_wiring_or_named_as_shared() -> None:
    kit = set(contract("The shared kit")["source_modules"])
    wiring = set(contract("Only the project package")["forbidden_modules"])
    assert kit == KIT
    assert not kit & wiring and not (kit | wiring) & SHARED_WITH_THE_APPS
    assert children("dashboard") == kit | wiring | SHARED_WITH_THE_APPS


def test_the_kit_contract_names_folders_so_a_new_kit_module_needs_no_edit() -> None:
    for room in contract("The shared kit")["source_modules"]:
        assert (ROOT.joinpath(*room.split(".")) / "__init__.py").is_file(), room
    assert {f"dashboard.kit.{name}" for name in KIT_MODULES} <= {
        f"dashboard.kit.{p.stem}" for p in (ROOT / "dashboard" / "kit").glob("*.py")
    }


def test_models_may_not_import_the_wiring_the_api_or_the_queue() -> None:
    wiring_contract = contract("Only the project package")
    sources = set(contract("Models and choices")["source_modules"])
    # The wiring contract forbids it to every module of both apps, the models included.
    assert all(source.split(".")[0] in wiring_contract["source_modules"] for source in sources)
    assert {"runs", "billing"} <= set(wiring_contract["source_modules"])
    forbidden = set(contract("Models and choices")["forbidden_modules"])
    assert {"dashboard.api", "dashboard.kit.queue", "dashboard.celery"} <= forbidden


def test_tests_mirror_the_rooms() -> None:
    """Each room of runs/ and billing/ (and the demo) has its tests in the same place under tests/."""
    not_rooms = {"models", "management", "migrations", "templatetags"}
    for app in ("runs", "billing", "dashboard"):
        for room in (ROOT / app).iterdir():
            if room.is_dir() and (room / "__init__.py").exists() and room.name not in not_rooms:
                tests = TESTS / app / room.name
                assert tests.is_dir() and any(tests.glob("test_*.py")), tests


def test_test_files_have_unique_names_across_the_mirrored_folders() -> None:
    """tests/ has no __init__.py and pytest imports test files by their name (prepend mode)."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_worker_queue_has_a_route() -> None:
    """A queue no task is routed to is a worker listening for nothing (the old `alerts` queue)."""
    from django.conf import settings

    from dashboard.management.commands.runall import QUEUES

    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    assert set(QUEUES.split(",")) == routed | {settings.CELERY_TASK_DEFAULT_QUEUE}
