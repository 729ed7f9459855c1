"""The node agent talks to the site over HTTP only: no module of agent/ imports Celery, kombu, Redis or Django.

A GPU node then holds no broker credentials (it could enqueue any task of the site with them),
and `requirements-agent.txt` installs neither.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import ROOT

FORBIDDEN = {"celery", "kombu", "redis", "django"}


def imported_packages(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_agent_module_imports_a_broker_client_or_django() -> None:
    offenders = {
        path.name: sorted(imported_packages(path) & FORBIDDEN) for path in sorted((ROOT / "agent").glob("*.py"))
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_running_the_agent_loads_none_of_them() -> None:
    """Imports inside functions count too: load every agent module in a fresh interpreter and look."""
    code = (
        "import sys, agent, agent.main, agent.shipper, agent.buffer, agent.nvml, agent.attribution;"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(FORBIDDEN)!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_agent_requirements_need_no_broker_client() -> None:
    lines = (ROOT / "requirements-agent.txt").read_text().splitlines()
    wanted = [line for line in lines if line.strip() and not line.startswith("#")]
    packages = {line.split("==")[0].split("[")[0].strip().lower() for line in wanted}
    assert packages == {"nvidia-ml-py"}
