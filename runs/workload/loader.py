"""Reading workload YAML into plain values, keeping the line of every key (runs/workload/schema.py checks them).

`Loaded(text)` composes the YAML into nodes (their marks give lines) and builds the Python values
itself, so what PyYAML would crash on or silently drop becomes a located `Problem`: duplicate
keys (YAML keeps the last; the earlier one is almost always a typo), keys that are not strings,
unreadable scalars, unknown tags, aliases into themselves. Its cost is linear in the file
whatever its aliases and merges (issue 33): MAX_NODES bounds the values built and the pairs
merges copy, MAX_DEPTH the nesting.

`Loaded.lines` maps each path (`("compute", "num_accelerators")`, `("permissions", 0)`) to the
1-based line of its key or list item; `Loaded.problem` places a problem on the nearest of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from runs.workload.credentials import describe_credential

# Real workloads have a few dozen nodes. These bounds stop alias bombs (`&a [*a, *a, ...]`
# nested ten deep expands to billions of nodes) and deep nesting from exhausting the process.
MAX_NODES = 20_000
MAX_DEPTH = 64

_EMPTY = "the file is empty; a workload needs experiment_name, compute and command"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a workload file, located by dotted path and 1-based line."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = [f"line {self.line}"] if self.line is not None else []
        return ": ".join([*where, *([self.path] if self.path else []), self.message])


def dotted(path: Path) -> str:
    """`("permissions", 0, "level")` -> `"permissions[0].level"`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(value: object) -> str:
    """A value for a "got ..." message. Strings that look like credentials are not repeated."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if describe_credential(value):
            return "a string"
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


class Broken:
    """Stands in for a value YAML could not build; its problem is already reported."""


BROKEN = Broken()


class Loaded:
    """Steps: 1. compose the YAML into nodes (marks give lines), 2. build plain Python values
    ourselves so duplicate keys, odd keys and bad scalars become located problems, not crashes."""

    def __init__(self, text: str) -> None:
        self.problems: list[Problem] = []
        self._reported: set[Problem] = set()
        self.lines: dict[Path, int] = {}
        self.root: dict[str, Any] | None = None
        self._budget = MAX_NODES
        self._merge_allowance = MAX_NODES
        self._expansions: dict[int, list[tuple[Node, Node, bool]]] = {}
        loader: yaml.SafeLoader | None = None
        try:
            loader = yaml.SafeLoader(text)  # checks every character up front: may raise ReaderError
            node = loader.get_single_node()
            if node is None:
                self._add((), None, _EMPTY)
                return
            value = self._build(node, loader, (), set())
        except yaml.YAMLError as exc:
            self._add((), _error_line(exc, text), f"invalid YAML: {_error_text(exc)}")
            return
        except RecursionError:
            self._add((), None, "invalid YAML: nested too deeply")
            return
        finally:
            if loader is not None:
                loader.dispose()
        if value is None:  # `---` alone, or a document holding only `~`
            self._add((), None, _EMPTY)
        elif isinstance(value, dict):
            self.root = value
        elif value is not BROKEN:
            self._add((), node.start_mark.line + 1, f"the top level must be a mapping of keys, got {describe(value)}")

    def problem(self, path: Path, message: str) -> Problem:
        """A problem at `path`, on the line of its key, or of the nearest enclosing key the file has."""
        probe = path
        while probe and probe not in self.lines:
            probe = probe[:-1]
        return Problem(dotted(path), self.lines.get(probe) if probe else None, message)

    def _add(self, path: Path, line: int | None, message: str) -> None:
        problem = Problem(dotted(path), line, message)
        if problem not in self._reported:  # one node reached through many aliases is one mistake
            self._reported.add(problem)
            self.problems.append(problem)

    def _build(self, node: Node, loader: yaml.SafeLoader, path: Path, active: set[int]) -> Any:
        # Problems point at the key (or list item) holding the value: an alias's own node
        # starts where its anchor was defined, which is not where the mistake is.
        line = self.lines.get(path, node.start_mark.line + 1)
        if not self._spend(path, line):
            return BROKEN
        if len(path) > MAX_DEPTH:
            self._add(path, line, "too large or too deeply nested for a workload file")
            return BROKEN
        if isinstance(node, ScalarNode):
            try:
                return loader.construct_object(node, deep=True)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
                # PyYAML raises ValueError for dates like 2024-13-45 that match its date pattern.
                why = "it looks like a date but is not one (quote it)" if node.tag.endswith(":timestamp") else None
                self._add(path, line, f"cannot read this value: {why or _error_text(exc)}")
                return BROKEN
        if id(node) in active:
            self._add(path, line, "a YAML alias refers to itself")
            return BROKEN
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            self._add(path, line, f"unsupported YAML tag {node.tag!r}")
            return BROKEN
        active = active | {id(node)}
        if isinstance(node, SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                self.lines.setdefault((*path, index), item.start_mark.line + 1)
                items.append(self._build(item, loader, (*path, index), active))
            return items
        assert isinstance(node, MappingNode)
        result: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node, explicit in self._pairs(node, active):
            key_line = key_node.start_mark.line + 1
            # Every key is charged, read or refused: a merged mapping of unreadable keys built
            # through many aliases once cost minutes and a problem per key per alias.
            if not self._spend(path, key_line):
                return BROKEN
            key = self._key(key_node, loader, path, key_line)
            if key is None:
                continue
            if explicit and key in seen:
                self._add((*path, key), key_line, f"duplicate key {key!r} (first given on line {seen[key]})")
                continue
            if explicit:
                seen[key] = key_line
            self.lines[(*path, key)] = key_line
            result[key] = self._build(value_node, loader, (*path, key), active)
        return result

    def _spend(self, path: Path, line: int | None) -> bool:
        """Take one unit of the node budget; False (and one problem, the first time) once it is spent."""
        self._budget -= 1
        if self._budget == -1:
            self._add(path, line, "too large or too deeply nested for a workload file")
        return self._budget >= 0

    def _pairs(self, node: MappingNode, active: set[int]) -> list[tuple[Node, Node, bool]]:
        """The mapping's pairs with `<<` merges expanded first, so explicit keys win (YAML 1.1).

        Linear in the file, whatever its aliases: 1. each mapping's expansion is computed once
        and reused (nested merges of merges repeat the same sources), 2. every pair an expansion
        copies is counted before it is copied, against one MAX_NODES allowance for the file.
        """
        known = self._expansions.get(id(node))
        if known is not None:
            return known
        merged: list[tuple[Node, Node, bool]] = []
        explicit: list[tuple[Node, Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                explicit.append((key_node, value_node, True))
                continue
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in reversed(sources):
                if not isinstance(source, MappingNode) or id(source) in active:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a `<<` merge needs a mapping (or a list of them)", source.start_mark
                    )
                pairs = self._pairs(source, active | {id(source)})
                self._merge_allowance -= len(pairs)
                if self._merge_allowance < 0:
                    raise yaml.constructor.ConstructorError(None, None, "merges expand too far", source.start_mark)
                merged.extend((k, v, False) for k, v, _ in pairs)
        self._expansions[id(node)] = merged + explicit
        return self._expansions[id(node)]

    def _key(self, key_node: Node, loader: yaml.SafeLoader, path: Path, line: int) -> str | None:
        key: Any = BROKEN
        if isinstance(key_node, ScalarNode):
            try:
                key = loader.construct_object(key_node, deep=True)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError):
                key = BROKEN
        if isinstance(key, str):
            return key
        shown = "a key YAML cannot read as text" if key is BROKEN else describe(key)
        self._add(path, line, f"keys must be strings, got {shown} (quote it)")
        return None


def _error_line(exc: yaml.YAMLError, text: str) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return mark.line + 1
    position = getattr(exc, "position", None)  # ReaderError: an unreadable character
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else None


def _error_text(exc: Exception) -> str:
    # Only PyYAML's short description: str(exc) quotes the offending line, which may hold a key.
    if isinstance(exc, yaml.MarkedYAMLError):
        return ": ".join(part for part in (exc.context, exc.problem) if part) or "unreadable"
    if isinstance(exc, yaml.reader.ReaderError):
        return "the file contains a character YAML does not allow"
    return exc.__class__.__name__
