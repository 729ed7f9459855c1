"""The workload YAML that `databricks air run` submits: parse it, check it, report every problem.

`parse_workload(text)` returns a `Workload` or raises `WorkloadError` carrying every `Problem`
found in one pass, each with the dotted path (`compute.num_accelerators`, `secrets.HF_TOKEN`)
and the 1-based line of the offending key, so a user fixes the file in one go.

Rules follow DESIGN.md ("Domain rules") and the public workload YAML reference: we refuse what
the CLI refuses (unknown keys at every level, bad accelerator counts), plus two things it lets
through and we do not:
- duplicate keys (YAML silently keeps the last one; the earlier value is almost always a typo);
- literal credentials in `env_variables` or `parameters`, because an accepted file is stored
  and shown to the team. Secrets go under `secrets` as scope/key references, which are safe to
  store, so the file as submitted can be kept verbatim once it passes.

Where real files are loose we are too: `version: "4"` or `version: 4`, `command` as a string or a
list of strings, ids written as bare numbers, `null` for an optional key meaning "not set".
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from runs.choices import GPUS_PER_NODE, AcceleratorType, accelerator_count_problem
from runs.credentials import describe_credential, known_shape

PRIORITY_CLASSES = ("BEST_EFFORT", "NORMAL", "CRITICAL")
CODE_SOURCE_TYPES = ("snapshot", "remote_volume", "git")

# fmt: off
TOP_KEYS = (
    "experiment_name", "compute", "command", "environment", "code_source", "parameters", "env_variables",
    "secrets", "max_retries", "timeout_minutes", "idempotency_token", "mlflow_run_name",
    "mlflow_experiment_directory", "mlflow_artifact_location", "usage_policy_name", "usage_policy_id", "permissions",
)
# fmt: on
COMPUTE_KEYS = ("accelerator_type", "num_accelerators", "pool_id", "priority_class")
ENVIRONMENT_KEYS = ("version", "dependencies", "docker_image", "unity_catalog_image")
# `root_path` directly under code_source is the newer CLI's shorthand for a snapshot.
CODE_SOURCE_KEYS = ("type", "root_path", "snapshot", "remote_volume", "git", "include_paths")
GIT_KEYS = ("remote", "branch", "commit")
PERMISSION_KEYS = ("group_name", "user_name", "level")

SECRET_REFERENCE = re.compile(r"[^/\s]+/[^/\s]+")
_TEMPLATE_REF = re.compile(r"\{\{\s*secrets/[^/\s]+/[^/\s]+\s*\}\}")
# `databricks_ai_v<N>` environment identifiers exist from version 5 on.
AI_ENVIRONMENT = re.compile(r"databricks_ai_v(\d+)")

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


class WorkloadError(ValueError):
    """A workload file was refused; `.problems` lists every reason, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: p.line or 0)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A validated workload file: the fields the dashboard uses, plus the parsed mapping as `raw`."""

    experiment_name: str
    accelerator_type: str
    num_accelerators: int
    gpus_per_node: int
    nodes: int
    # A list of commands in the file is joined with newlines: the CLI runs them as one script.
    command: str
    environment: dict[str, Any] = field(default_factory=dict)
    code_source: dict[str, Any] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    env_variables: dict[str, str | int | float | bool] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)  # name -> "scope/key"
    max_retries: int = 0
    timeout_minutes: int | None = None
    usage_policy_name: str | None = None
    usage_policy_id: str | None = None
    pool_id: str | None = None
    priority_class: str | None = None
    idempotency_token: str | None = None
    mlflow_run_name: str | None = None
    mlflow_experiment_directory: str | None = None
    mlflow_artifact_location: str | None = None
    permissions: list[dict[str, str]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def run_fields(self) -> dict[str, Any]:
        """The fields of a Run this workload decides (upserts and the local launcher fill runs from it)."""
        return {
            "experiment_name": self.experiment_name,
            "accelerator_type": self.accelerator_type,
            "num_accelerators": self.num_accelerators,
            "gpus_per_node": self.gpus_per_node,
            "timeout_minutes": self.timeout_minutes,
            "max_retries": self.max_retries,
            "usage_policy_name": self.usage_policy_name,
            "parameters": self.parameters,
        }

    def summary(self) -> dict[str, Any]:
        """The JSON-safe headline fields (what `check_workload --json` prints)."""
        return {
            "experiment_name": self.experiment_name,
            "accelerator_type": self.accelerator_type,
            "num_accelerators": self.num_accelerators,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "max_retries": self.max_retries,
            "timeout_minutes": self.timeout_minutes,
            "usage_policy_name": self.usage_policy_name,
            "usage_policy_id": self.usage_policy_id,
            "pool_id": self.pool_id,
            "priority_class": self.priority_class,
            "secrets": dict(self.secrets),
            "env_variables": sorted(self.env_variables),
            "parameters": sorted(self.parameters),
        }


def parse_workload(text: str) -> Workload:
    """Parse and validate a workload file; raise `WorkloadError` listing every problem found."""
    loaded = _Loaded(text)
    if loaded.root is None:
        raise WorkloadError(loaded.problems)
    checker = _Checker(loaded.lines, loaded.problems)
    fields = checker.workload(loaded.root)
    if checker.problems or fields is None:
        raise WorkloadError(checker.problems)
    return Workload(**fields, raw=loaded.root)


def dotted(path: Path) -> str:
    """`("permissions", 0, "level")` -> `"permissions[0].level"`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(value: object) -> str:
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


class _Broken:
    """Stands in for a value YAML could not build; its problem is already reported."""


_BROKEN = _Broken()


class _Loaded:
    """Steps: 1. compose the YAML into nodes (marks give lines), 2. build plain Python values
    ourselves so duplicate keys, odd keys and bad scalars become located problems, not crashes."""

    def __init__(self, text: str) -> None:
        self.problems: list[Problem] = []
        self.lines: dict[Path, int] = {}
        self.root: dict[str, Any] | None = None
        self._budget = MAX_NODES
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
        elif value is not _BROKEN:
            self._add((), node.start_mark.line + 1, f"the top level must be a mapping of keys, got {_describe(value)}")

    def _add(self, path: Path, line: int | None, message: str) -> None:
        self.problems.append(Problem(dotted(path), line, message))

    def _build(self, node: Node, loader: yaml.SafeLoader, path: Path, active: set[int]) -> Any:
        # Problems point at the key (or list item) holding the value: an alias's own node
        # starts where its anchor was defined, which is not where the mistake is.
        line = self.lines.get(path, node.start_mark.line + 1)
        self._budget -= 1
        if self._budget < 0 or len(path) > MAX_DEPTH:
            if self._budget == -1 or len(path) > MAX_DEPTH:
                self._add(path, line, "too large or too deeply nested for a workload file")
            return _BROKEN
        if isinstance(node, ScalarNode):
            try:
                return loader.construct_object(node, deep=True)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
                # PyYAML raises ValueError for dates like 2024-13-45 that match its date pattern.
                why = "it looks like a date but is not one (quote it)" if node.tag.endswith(":timestamp") else None
                self._add(path, line, f"cannot read this value: {why or _error_text(exc)}")
                return _BROKEN
        if id(node) in active:
            self._add(path, line, "a YAML alias refers to itself")
            return _BROKEN
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            self._add(path, line, f"unsupported YAML tag {node.tag!r}")
            return _BROKEN
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

    def _pairs(self, node: MappingNode, active: set[int]) -> list[tuple[Node, Node, bool]]:
        """The mapping's pairs with `<<` merges expanded first, so explicit keys win (YAML 1.1)."""
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
                merged.extend((k, v, False) for k, v, _ in self._pairs(source, active | {id(source)}))
                if len(merged) > MAX_NODES:
                    raise yaml.constructor.ConstructorError(None, None, "merges expand too far", source.start_mark)
        return merged + explicit

    def _key(self, key_node: Node, loader: yaml.SafeLoader, path: Path, line: int) -> str | None:
        key: Any = _BROKEN
        if isinstance(key_node, ScalarNode):
            try:
                key = loader.construct_object(key_node, deep=True)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError):
                key = _BROKEN
        if isinstance(key, str):
            return key
        shown = "a key YAML cannot read as text" if key is _BROKEN else _describe(key)
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


class _Checker:
    """Walks the parsed mapping section by section, collecting problems instead of stopping."""

    def __init__(self, lines: dict[Path, int], problems: list[Problem]) -> None:
        self.lines = lines
        self.problems = list(problems)

    def add(self, path: Path, message: str) -> None:
        probe = path
        while probe and probe not in self.lines:
            probe = probe[:-1]
        self.problems.append(Problem(dotted(path), self.lines.get(probe) if probe else None, message))

    # ---- generic shapes -------------------------------------------------------------------

    def mapping(self, value: Any, path: Path, allowed: tuple[str, ...] | None = None) -> dict[str, Any] | None:
        if value is None or value is _BROKEN:
            return None
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, got {_describe(value)}")
            return None
        for key in value if allowed is not None else ():
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.add((*path, key), f"unknown key {key!r}{hint}")
        return value

    def required(self, section: dict[str, Any], key: str, path: Path) -> Any:
        value = section.get(key)
        if value is None:
            self.add((*path, key), "is required")
        return value

    def string(self, value: Any, path: Path, *, numbers_ok: bool = False) -> str | None:
        if value is None or value is _BROKEN:
            return None
        if isinstance(value, str):
            if value.strip():
                return value
            self.add(path, "must not be empty")
            return None
        if numbers_ok and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        hint = " (quote it)" if isinstance(value, int | float | bool | date) else ""
        self.add(path, f"must be a string, got {_describe(value)}{hint}")
        return None

    def integer(self, value: Any, path: Path, minimum: int) -> int | None:
        if value is None or value is _BROKEN:
            return None
        # bool is an int in Python, but `num_accelerators: yes` is a mistake, not a 1.
        if not isinstance(value, int) or isinstance(value, bool):
            self.add(path, f"must be an integer, got {_describe(value)}")
            return None
        if value < minimum:
            self.add(path, f"must be at least {minimum}, got {value}")
            return None
        return value

    def string_list(self, value: Any, path: Path) -> list[str] | None:
        if value is None or value is _BROKEN:
            return None
        if not isinstance(value, list):
            self.add(path, f"must be a list of strings, got {_describe(value)}")
            return None
        items = [self.string(item, (*path, i)) for i, item in enumerate(value)]
        return [item for item in items if item is not None]

    def one_of(self, value: Any, path: Path, choices: tuple[str, ...]) -> str | None:
        text = self.string(value, path)
        if text is not None and text not in choices:
            self.add(path, f"must be one of {', '.join(choices)}, got {_describe(text)}")
            return None
        return text

    def at_most_one(self, section: dict[str, Any], keys: tuple[str, str], path: Path, why: str = "") -> None:
        if all(section.get(k) is not None for k in keys):
            self.add((*path, keys[1]), f"cannot be given with {keys[0]}{why}")

    # ---- sections -------------------------------------------------------------------------

    def workload(self, root: dict[str, Any]) -> dict[str, Any] | None:
        self.mapping(root, (), TOP_KEYS)
        fields: dict[str, Any] = {
            "experiment_name": self.string(self.required(root, "experiment_name", ()), ("experiment_name",)),
            "command": self.command(self.required(root, "command", ()), ("command",)),
            **self.compute(self.mapping(self.required(root, "compute", ()), ("compute",), COMPUTE_KEYS)),
            "environment": self.environment(root.get("environment")),
            "code_source": self.code_source(root.get("code_source")),
            "parameters": self.parameters(root.get("parameters")),
            "env_variables": self.env_variables(root.get("env_variables")),
            "secrets": self.secrets(root.get("secrets")),
            "max_retries": self.integer(root.get("max_retries"), ("max_retries",), 0) or 0,
            "timeout_minutes": self.integer(root.get("timeout_minutes"), ("timeout_minutes",), 1),
            "permissions": self.permissions(root.get("permissions")),
        }
        for key in ("mlflow_run_name", "mlflow_artifact_location", "usage_policy_name"):
            fields[key] = self.string(root.get(key), (key,))
        for key in ("idempotency_token", "usage_policy_id"):
            fields[key] = self.string(root.get(key), (key,), numbers_ok=True)
        directory = self.string(root.get("mlflow_experiment_directory"), ("mlflow_experiment_directory",))
        if directory is not None and not (directory == "/Workspace" or directory.startswith("/Workspace/")):
            self.add(("mlflow_experiment_directory",), "must be a workspace path starting with /Workspace")
        fields["mlflow_experiment_directory"] = directory
        self.at_most_one(root, ("usage_policy_name", "usage_policy_id"), (), ": give one usage policy, by name or id")
        if self.problems:
            return None
        return fields

    def command(self, value: Any, path: Path) -> str | None:
        if isinstance(value, list):
            if not value:
                self.add(path, "must not be empty")
            commands = self.string_list(value, path)
            return "\n".join(commands) if commands else None
        return self.string(value, path)

    def compute(self, section: dict[str, Any] | None) -> dict[str, Any]:
        path: Path = ("compute",)
        if section is None:
            return {}
        accelerator = self.one_of(
            self.required(section, "accelerator_type", path), (*path, "accelerator_type"), tuple(AcceleratorType.values)
        )
        count = self.integer(self.required(section, "num_accelerators", path), (*path, "num_accelerators"), 1)
        pool_id = self.string(section.get("pool_id"), (*path, "pool_id"), numbers_ok=True)
        priority = self.one_of(section.get("priority_class"), (*path, "priority_class"), PRIORITY_CLASSES)
        if section.get("priority_class") is not None and section.get("pool_id") is None:
            self.add((*path, "priority_class"), "needs compute.pool_id: priority applies to provisioned capacity")
        if accelerator is None or count is None:
            return {}
        per_node = GPUS_PER_NODE[AcceleratorType(accelerator)]
        problem = accelerator_count_problem(accelerator, count)
        if problem:
            self.add((*path, "num_accelerators"), problem)
        return {
            "accelerator_type": accelerator,
            "num_accelerators": count,
            "gpus_per_node": per_node,
            "nodes": -(-count // per_node),
            "pool_id": pool_id,
            "priority_class": priority,
        }

    def environment(self, value: Any) -> dict[str, Any]:
        path: Path = ("environment",)
        section = self.mapping(value, path, ENVIRONMENT_KEYS)
        if section is None:
            return {}
        version = section.get("version")
        if isinstance(version, str):
            match = AI_ENVIRONMENT.fullmatch(version.strip())
            if match and int(match.group(1)) < 5:
                self.add((*path, "version"), "databricks_ai_v environments start at databricks_ai_v5")
            self.string(version, (*path, "version"))
        elif version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            self.add((*path, "version"), f"must be a string or an integer, got {_describe(version)}")
        dependencies = section.get("dependencies")
        if isinstance(dependencies, str):
            # The older CLI took a path to a requirements file here; real files still do.
            self.string(dependencies, (*path, "dependencies"))
        else:
            self.string_list(dependencies, (*path, "dependencies"))
        for key in ("docker_image", "unity_catalog_image"):
            self.string(section.get(key), (*path, key))
        self.at_most_one(section, ("docker_image", "unity_catalog_image"), path)
        image = next((k for k in ("docker_image", "unity_catalog_image") if section.get(k) is not None), None)
        managed = next((k for k in ("version", "dependencies") if section.get(k) is not None), None)
        if image and managed:
            self.add((*path, image), f"cannot be given with {managed}: an image brings its own environment")
        return section

    def code_source(self, value: Any) -> dict[str, Any] | None:
        path: Path = ("code_source",)
        section = self.mapping(value, path, CODE_SOURCE_KEYS)
        if section is None:
            return None
        # Which kind of source each present key asks for; `root_path` is the snapshot shorthand.
        present = {k: k for k in CODE_SOURCE_TYPES if section.get(k) is not None}
        if section.get("root_path") is not None:
            self.string(section["root_path"], (*path, "root_path"))
            self.at_most_one(section, ("root_path", "snapshot"), path, ": use code_source.snapshot.root_path")
            present.setdefault("snapshot", "root_path")
        kind = self.one_of(section.get("type"), (*path, "type"), CODE_SOURCE_TYPES)
        if section.get("type") is None:
            if len(present) != 1:
                self.add((*path, "type"), f"is required: one of {', '.join(CODE_SOURCE_TYPES)}")
            kind = next(iter(present)) if len(present) == 1 else None
        elif kind is not None and kind not in present:
            self.add((*path, kind), f"is required when type is {kind}")
        for other, key in present.items():
            if kind is not None and other != kind:
                self.add((*path, key), f"cannot be given when type is {kind}")
        if section.get("snapshot") is not None:
            snapshot = self.mapping(section["snapshot"], (*path, "snapshot"), ("root_path",))
            if snapshot is not None:
                self.string(self.required(snapshot, "root_path", (*path, "snapshot")), (*path, "snapshot", "root_path"))
        volume = section.get("remote_volume")
        if isinstance(volume, dict):
            volume_path = self.mapping(volume, (*path, "remote_volume"), ("path",))
            if volume_path is not None:
                self.string(
                    self.required(volume_path, "path", (*path, "remote_volume")), (*path, "remote_volume", "path")
                )
        else:
            self.string(volume, (*path, "remote_volume"))
        self.git(section.get("git"), (*path, "git"))
        self.include_paths(section.get("include_paths"), (*path, "include_paths"))
        return section

    def git(self, value: Any, path: Path) -> None:
        section = self.mapping(value, path, GIT_KEYS)
        if section is None:
            return
        self.string(self.required(section, "remote", path), (*path, "remote"))
        for key in ("branch", "commit"):
            # A commit like 0123456 would be read as an octal number: make people quote it.
            self.string(section.get(key), (*path, key))
        if section.get("branch") is None and section.get("commit") is None:
            self.add((*path, "branch"), "give a branch or a commit")
        self.at_most_one(section, ("branch", "commit"), path, ": give a branch or a commit, not both")

    def include_paths(self, value: Any, path: Path) -> None:
        for index, item in enumerate(self.string_list(value, path) or []):
            parts = re.split(r"[/\\]", item)
            if item.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", item):
                self.add((*path, index), "must be relative to the code root, not absolute")
            elif ".." in parts:
                self.add((*path, index), "must stay inside the code root (no '..')")

    def parameters(self, value: Any) -> dict[str, Any]:
        section = self.mapping(value, ("parameters",))
        if section is None:
            return {}
        self.scan(section, ("parameters",), None)
        return section

    def scan(self, value: Any, path: Path, name: str | None) -> None:
        """Refuse literal credentials anywhere inside a parameter value."""
        if isinstance(value, dict):
            for key, item in value.items():
                self.scan(item, (*path, key), key)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                self.scan(item, (*path, index), name)
        elif isinstance(value, str):
            self.credential(value, path, name)

    def credential(self, value: str, path: Path, name: str | None) -> None:
        label = describe_credential(value, name)
        if label:
            self.add(
                path, f"looks like {label}; store it in a secret scope and reference it under `secrets` as scope/key"
            )

    def env_variables(self, value: Any) -> dict[str, Any]:
        section = self.mapping(value, ("env_variables",))
        if section is None:
            return {}
        for name, item in section.items():
            path: Path = ("env_variables", name)
            if item is _BROKEN:
                continue
            if not isinstance(item, str | int | float):
                self.add(path, f"must be a string, number or boolean, got {_describe(item)}")
            elif isinstance(item, str):
                self.credential(item, path, name)
        return section

    def secrets(self, value: Any) -> dict[str, str]:
        section = self.mapping(value, ("secrets",))
        if section is None:
            return {}
        refs: dict[str, str] = {}
        for name, item in section.items():
            path: Path = ("secrets", name)
            if item is _BROKEN:
                continue
            # Never echo the value: whatever is not a reference may be the secret itself.
            # Only the distinctive key shapes here: a reference like team1/hfToken is mixed too.
            label = known_shape(item, name) if isinstance(item, str) else None
            if label:
                self.add(path, f"looks like {label}: secrets must be scope/key references, never values")
            elif not isinstance(item, str) or not SECRET_REFERENCE.fullmatch(item):
                # `{{secrets/scope/key}}` is how env values point at a secret; here the bare form is wanted.
                hint = (
                    " (here write just scope/key, without {{secrets/...}})"
                    if _TEMPLATE_REF.fullmatch(str(item))
                    else ""
                )
                self.add(path, f"secrets must be scope/key references (like ml-team/hf-token), never values{hint}")
            else:
                refs[name] = item
        return refs

    def permissions(self, value: Any) -> list[dict[str, str]]:
        path: Path = ("permissions",)
        if value is None or value is _BROKEN:
            return []
        if not isinstance(value, list):
            self.add(path, f"must be a list of permissions, got {_describe(value)}")
            return []
        for index, item in enumerate(value):
            entry = self.mapping(item, (*path, index), PERMISSION_KEYS)
            if entry is None:
                if item is None:
                    self.add((*path, index), "must be a mapping with group_name or user_name, and level")
                continue
            principals = [k for k in ("group_name", "user_name") if entry.get(k) is not None]
            for key in principals:
                self.string(entry[key], (*path, index, key))
            if not principals:
                self.add((*path, index), "needs group_name or user_name")
            self.at_most_one(entry, ("group_name", "user_name"), (*path, index), ": one principal per entry")
            self.string(self.required(entry, "level", (*path, index)), (*path, index, "level"))
        return value
