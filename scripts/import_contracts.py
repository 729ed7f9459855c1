"""Two import-linter contracts the built-in ones don't cover, run by `lint-imports` (make lint).

- `acyclic_modules`: no import cycle between modules of the root packages, counting imports
  inside functions (grimp records those too). A cycle hidden in a function body is still a
  knot: each module needs the other to be importable, and neither can move alone.
- `no_private_imports`: no name starting with one underscore is imported from another module
  of `packages` (relative imports too), nor read as an attribute of another project module
  (`from runs import ingest; ingest._ts`). What two modules share is public.

Loaded from pyproject.toml's `[tool.importlinter] contract_types`; lint-imports runs from the
repository root, so this module is importable as `scripts.import_contracts`.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import cast

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
        prefixes = tuple(cast(list[str], self.packages))  # the field holds the parsed list
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


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module an ImportFrom names, relative imports (`from .x import y`) resolved."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"], or None when the chain does not start at a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_imports(packages: list[str], root: Path | None = None) -> list[str]:
    """`module:line imports _name from other` for every private name imported across modules,
    relative imports included, and `module:line reads other._name` for a private name reached
    as an attribute of another project module (`from pkg import mod; mod._name`)."""
    root = root or Path.cwd()
    modules = {name for package in packages for name, _ in _source_files(package, root)}
    found = []
    for package in packages:
        for module, path in _source_files(package, root):
            tree = ast.parse(path.read_text(), filename=str(path))
            bound: dict[str, str] = {}  # local name -> the project module it is bound to
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    source = _absolute(module, path, node)
                    for alias in node.names:
                        if source != module and _is_private(alias.name):
                            found.append(f"{module}:{node.lineno} imports {alias.name} from {source}")
                        if f"{source}.{alias.name}" in modules:
                            bound[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname and alias.name in modules:
                            bound[alias.asname] = alias.name
                        elif not alias.asname and alias.name.split(".")[0] in packages:
                            bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
            for node in ast.walk(tree):
                if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                    continue
                chain = _dotted(node.value)
                if chain is None or chain[0] not in bound:
                    continue
                target = ".".join([bound[chain[0]], *chain[1:]])
                if target in modules and target != module:
                    found.append(f"{module}:{node.lineno} reads {node.attr} of {target}")
    return found


class NoPrivateImportsContract(Contract):
    """No `_name` imported from another module of `packages`."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        found = private_imports(list(cast(list[str], self.packages)))
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["found"]:
            output.print_error(line)
            output.new_line()
        output.print("Make the name public where it is defined, or move it to the module that needs it.")
