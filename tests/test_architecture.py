"""The house's rules: rooms a newcomer can read, and contracts that can fail.

`make lint` runs `lint-imports` with the contracts in pyproject.toml. These tests keep those
contracts honest: the forbidden lists name every room (a new one cannot slip past them), the
two home-made contracts find what they are for, and runs/ keeps few modules at its top.
"""

from __future__ import annotations

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


def test_the_project_has_no_private_import_and_no_cycle() -> None:
    assert private_imports(["runs", "billing", "dashboard", "tests", "bench"], ROOT) == []
    graph = grimp.build_graph("runs", "billing", "dashboard", cache_dir=None)
    assert find_cycles(graph, set(graph.modules)) == []
