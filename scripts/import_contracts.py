"""Two import-linter contracts the built-in ones don't cover, run by `lint-imports` (make lint).

- `acyclic_modules`: no import cycle between modules of the root packages, counting imports
  inside functions (grimp records those too). A cycle hidden in a function body is still a
  knot: each module needs the other to be importable, and neither can move alone.
- `no_private_imports`: no name starting with one underscore is imported from another module
  of the root packages (or of `extra_packages`). What two modules share is public.

Loaded from pyproject.toml's `[tool.importlinter] contract_types`; lint-imports runs from the
repository root, so this module is importable as `scripts.import_contracts`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def find_cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            for j in range(i, len(edges[node])):
                nxt = edges[node][j]
                if nxt not in index:
                    work.append((node, j + 1))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


class AcyclicModulesContract(Contract):
    """No cycle among the modules of `packages` (each a root package of the graph)."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        prefixes = tuple(self.packages)  # type: ignore[arg-type]
        modules = {m for m in graph.modules if m.split(".")[0] in prefixes}
        cycles = find_cycles(graph, modules)
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"These modules import each other (directly or through the others): {', '.join(cycle)}")
            output.new_line()


def _source_files(package: str, root: Path) -> list[tuple[str, Path]]:
    out = []
    for path in sorted((root / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((".".join(parts), path))
    return out


def private_imports(packages: list[str], root: Path | None = None) -> list[str]:
    """`module:line imports _name from other` for every private name imported across modules."""
    found = []
    for package in packages:
        for module, path in _source_files(package, root or Path.cwd()):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or node.level != 0 or not node.module:
                    continue
                if node.module == module:
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{module}:{node.lineno} imports {alias.name} from {node.module}")
    return found


class NoPrivateImportsContract(Contract):
    """No `_name` imported from another module of `packages`."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        found = private_imports(list(self.packages))  # type: ignore[arg-type]
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["found"]:
            output.print_error(line)
            output.new_line()
        output.print("Make the name public where it is defined, or move it to the module that needs it.")
