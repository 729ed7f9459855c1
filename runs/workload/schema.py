"""The workload YAML that `databricks air run` submits: parse it, check it, report every problem.

`parse_workload(text)` returns a `Workload` or raises `WorkloadError` carrying every `Problem`
found in one pass, each with the dotted path (`compute.num_accelerators`, `secrets.HF_TOKEN`)
and the 1-based line of the offending key, so a user fixes the file in one go.

Rules are the real CLI's (`databricks air run`, experimental/air/cmd/runconfig.go and
compute.go in databricks/cli at 7bbe285213; summarised in ../shared/reference/
databricks-ai-runtime.md): unknown keys refused at every level; `experiment_name` and
`mlflow_run_name` at most 100 ASCII letters, digits, `-` and `_` (the experiment name becomes
the Jobs task key); `command` at most 1,000 lines; a name in both `env_variables` and
`secrets` refused; `max_retries` defaults to 3 (DEFAULT_MAX_RETRIES: `check_workload`,
admission and the launcher all read `Workload.max_retries`); `usage_policy_name` xor
`usage_policy_id` (a UUID); `environment.docker_image` a mapping with `url`, never beside
`dependencies` or `version`; `code_source.type: snapshot` with `snapshot.root_path`,
`snapshot.git` (branch xor commit; `remote` only `false`), `snapshot.include_paths` and
`snapshot.remote_volume` under `/Volumes/`; permissions with exactly one principal and a level.

Newer than that commit, as Databricks' workload YAML reference documents them (docs.databricks.com
.../machine-learning/ai-runtime/connecting/cli/yaml-config; the flat `code_source` needs CLI
1.20.0 or later): `code_source` may hold the snapshot's keys directly (`code_source: {root_path:
.}`), and `compute` takes `pool_id` (provisioned GPU capacity) and `priority_class` (BEST_EFFORT,
NORMAL or CRITICAL, only with `pool_id`). The older tool's `node_pool_id` and `pool_name` stay refused.
`GPU_8xB300` is accepted beside the CLI's three types (the seeds list it in preview).

Two things the CLI lets through and we do not:
- duplicate keys (YAML silently keeps the last one; the earlier value is almost always a typo);
- literal credentials in `env_variables` or `parameters`, because an accepted file is stored
  and shown to the team. Secrets go under `secrets` as scope/key references, which are safe to
  store, so the file as submitted can be kept verbatim once it passes.

One thing the current CLI refuses and we accept: `environment.dependencies` as a path to a
YAML file of `version` + `dependencies` (the older Python tool's form, still in real files;
the Go CLI at 7bbe285213 asks for the list inline).

Where real files are loose we are too: `version: "4"` or `version: 4`, ids written as bare
numbers, `null` for an optional key meaning "not set".
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
from runs.workload.credentials import describe_credential, known_shape

# `max_retries` when the file does not set it, as the CLI submits it.
DEFAULT_MAX_RETRIES = 3

# fmt: off
TOP_KEYS = (
    "experiment_name", "compute", "environment", "command", "env_variables", "secrets", "code_source",
    "max_retries", "timeout_minutes", "idempotency_token", "parameters", "mlflow_run_name",
    "mlflow_experiment_directory", "permissions", "usage_policy_name", "usage_policy_id",
)
# fmt: on
COMPUTE_KEYS = ("accelerator_type", "num_accelerators", "pool_id", "priority_class")
PRIORITY_CLASSES = ("BEST_EFFORT", "NORMAL", "CRITICAL")
ENVIRONMENT_KEYS = ("dependencies", "version", "docker_image")
DOCKER_IMAGE_KEYS = ("url", "tag_policy", "credentials_scope", "credentials_key")
TAG_POLICIES = ("auto", "latest")
CODE_SOURCE_KEYS = ("type", "snapshot")
SNAPSHOT_KEYS = ("root_path", "remote_volume", "git", "include_paths")
GIT_KEYS = ("branch", "commit", "remote")
PRINCIPALS = ("group_name", "user_name", "service_principal_name")
PERMISSION_KEYS = (*PRINCIPALS, "level")

# The Jobs task key's characters (ASCII only: \w would let Unicode letters through).
TASK_KEY = re.compile(r"[A-Za-z0-9_-]+")
NAME_MAX = 100
COMMAND_MAX_LINES = 1_000
IDEMPOTENCY_TOKEN_MAX = 64
USAGE_POLICY_NAME_MAX = 127
GIT_REF = re.compile(r"[A-Za-z0-9_./-]+")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

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
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_minutes: int | None = None
    usage_policy_name: str | None = None
    usage_policy_id: str | None = None
    idempotency_token: str | None = None
    mlflow_run_name: str | None = None
    mlflow_experiment_directory: str | None = None
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
        elif value is not _BROKEN:
            self._add((), node.start_mark.line + 1, f"the top level must be a mapping of keys, got {_describe(value)}")

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
            return _BROKEN
        if len(path) > MAX_DEPTH:
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
            # Every key is charged, read or refused: a merged mapping of unreadable keys built
            # through many aliases once cost minutes and a problem per key per alias.
            if not self._spend(path, key_line):
                return _BROKEN
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

    def name(self, value: Any, path: Path, what: str) -> str | None:
        """A Jobs-task-key-like name: at most 100 ASCII letters, digits, '-' and '_'."""
        text = self.string(value, path)
        if text is None:
            return None
        text = text.strip()
        if len(text) > NAME_MAX:
            self.add(path, f"must be at most {NAME_MAX} characters, got {len(text)}{what}")
        elif not TASK_KEY.fullmatch(text):
            self.add(path, f"only ASCII letters, digits, '-' and '_' are allowed (no dots or spaces){what}")
        return text

    def workload(self, root: dict[str, Any]) -> dict[str, Any] | None:
        self.mapping(root, (), TOP_KEYS)
        experiment = self.name(
            self.required(root, "experiment_name", ()), ("experiment_name",), ": it becomes the Jobs task key"
        )
        fields: dict[str, Any] = {
            "experiment_name": experiment,
            "command": self.command(self.required(root, "command", ()), ("command",)),
            **self.compute(self.mapping(self.required(root, "compute", ()), ("compute",), COMPUTE_KEYS)),
            "environment": self.environment(root.get("environment")),
            "code_source": self.code_source(root.get("code_source")),
            "parameters": self.parameters(root.get("parameters")),
            "env_variables": self.env_variables(root.get("env_variables")),
            "secrets": self.secrets(root.get("secrets")),
            "timeout_minutes": self.integer(root.get("timeout_minutes"), ("timeout_minutes",), 1),
            "permissions": self.permissions(root.get("permissions")),
        }
        retries = self.integer(root.get("max_retries"), ("max_retries",), 0)
        fields["max_retries"] = DEFAULT_MAX_RETRIES if retries is None else retries
        plain, secret = (root.get(k) if isinstance(root.get(k), dict) else {} for k in ("env_variables", "secrets"))
        for name in sorted(set(plain) & set(secret)):
            self.add(("env_variables", name), "is also set in secrets; remove it from one")
        if root.get("mlflow_run_name") is not None:
            fields["mlflow_run_name"] = self.name(root["mlflow_run_name"], ("mlflow_run_name",), "")
        token = self.string(root.get("idempotency_token"), ("idempotency_token",), numbers_ok=True)
        if token is not None and len(token.strip()) > IDEMPOTENCY_TOKEN_MAX:
            self.add(("idempotency_token",), f"must be at most {IDEMPOTENCY_TOKEN_MAX} characters, got {len(token)}")
        fields["idempotency_token"] = token
        directory = self.string(root.get("mlflow_experiment_directory"), ("mlflow_experiment_directory",))
        if directory is not None and not directory.strip().startswith("/Workspace"):
            self.add(("mlflow_experiment_directory",), "must be a workspace path starting with /Workspace")
        fields["mlflow_experiment_directory"] = directory
        fields["usage_policy_name"] = self.usage_policy_name(root.get("usage_policy_name"))
        fields["usage_policy_id"] = self.usage_policy_id(root.get("usage_policy_id"))
        self.at_most_one(root, ("usage_policy_name", "usage_policy_id"), (), ": give one usage policy, by name or id")
        if self.problems:
            return None
        return fields

    def usage_policy_name(self, value: Any) -> str | None:
        text = self.string(value, ("usage_policy_name",))
        if text is not None and len(text.strip()) > USAGE_POLICY_NAME_MAX:
            self.add(("usage_policy_name",), f"must be at most {USAGE_POLICY_NAME_MAX} characters, got {len(text)}")
        return text.strip() if text is not None else None

    def usage_policy_id(self, value: Any) -> str | None:
        text = self.string(value, ("usage_policy_id",), numbers_ok=True)
        if text is not None and not UUID.fullmatch(text.strip()):
            self.add(
                ("usage_policy_id",),
                "must be a UUID (like 12345678-90ab-cdef-1234-567890abcdef); "
                "to name a policy instead, use usage_policy_name",
            )
        return text.strip() if text is not None else None

    def command(self, value: Any, path: Path) -> str | None:
        if isinstance(value, list):
            # The CLI decodes `command` into a string: a list is refused there, so here too.
            self.add(path, "must be a string; write several lines as a YAML block (`command: |`)")
            return None
        text = self.string(value, path)
        if text is not None and text.count("\n") + 1 > COMMAND_MAX_LINES:
            self.add(
                path,
                f"is {text.count(chr(10)) + 1} lines long; at most {COMMAND_MAX_LINES}: "
                "move the logic into a script under code_source",
            )
        return text

    def compute(self, section: dict[str, Any] | None) -> dict[str, Any]:
        path: Path = ("compute",)
        if section is None:
            return {}
        # Matched case-sensitively, as the server looks the type up.
        accelerator = self.one_of(
            self.required(section, "accelerator_type", path), (*path, "accelerator_type"), tuple(AcceleratorType.values)
        )
        count = self.integer(self.required(section, "num_accelerators", path), (*path, "num_accelerators"), 1)
        self.string(section.get("pool_id"), (*path, "pool_id"), numbers_ok=True)
        priority = self.one_of(section.get("priority_class"), (*path, "priority_class"), PRIORITY_CLASSES)
        if priority is not None and section.get("pool_id") is None:
            self.add((*path, "priority_class"), "applies to provisioned GPU capacity only: give compute.pool_id too")
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
            # A path to a YAML file of version + dependencies (the older tool's form).
            self.string(dependencies, (*path, "dependencies"))
        else:
            self.string_list(dependencies, (*path, "dependencies"))
        if section.get("docker_image") is not None:
            for key in ("dependencies", "version"):
                if section.get(key) is not None:
                    self.add((*path, key), "cannot be given with docker_image: the image brings its own environment")
            self.docker_image(section["docker_image"], (*path, "docker_image"))
        elif version is not None and dependencies is None:
            self.add((*path, "version"), "needs dependencies: the version pins the image the packages go on")
        return section

    def docker_image(self, value: Any, path: Path) -> None:
        if isinstance(value, str):
            self.add(path, f"must be a mapping with url (like `docker_image: {{url: {value}}}`)")
            return
        image = self.mapping(value, path, DOCKER_IMAGE_KEYS)
        if image is None:
            return
        self.string(self.required(image, "url", path), (*path, "url"))
        policy = self.string(image.get("tag_policy"), (*path, "tag_policy"))
        if policy is not None and policy.strip().lower() not in TAG_POLICIES:
            self.add((*path, "tag_policy"), f"must be auto or latest, got {_describe(policy)}")
        scope, key = (self.string(image.get(k), (*path, k)) for k in ("credentials_scope", "credentials_key"))
        if (scope is None) != (key is None):
            self.add(
                (*path, "credentials_key" if key is None else "credentials_scope"),
                "give credentials_scope and credentials_key together",
            )
        elif scope is not None and (policy or "").strip().lower() != "latest":
            self.add(
                (*path, "credentials_scope"),
                "applies only with tag_policy: latest (the image is otherwise used as registered)",
            )

    def code_source(self, value: Any) -> dict[str, Any] | None:
        path: Path = ("code_source",)
        if isinstance(value, dict) and value and not {"type", "snapshot"} & value.keys():
            # The flat form: the snapshot's keys straight under code_source.
            flat = self.mapping(value, path, SNAPSHOT_KEYS)
            if flat is not None:
                self.snapshot(flat, path)
            return flat
        section = self.mapping(value, path, CODE_SOURCE_KEYS)
        if section is None:
            return None
        kind = self.string(self.required(section, "type", path), (*path, "type"))
        if kind is not None and kind != "snapshot":
            self.add((*path, "type"), f"must be snapshot (the only type), got {_describe(kind)}")
        snapshot_path: Path = (*path, "snapshot")
        snapshot = self.mapping(self.required(section, "snapshot", path), snapshot_path, SNAPSHOT_KEYS)
        if snapshot is not None:
            self.snapshot(snapshot, snapshot_path)
        return section

    def snapshot(self, snapshot: dict[str, Any], snapshot_path: Path) -> None:
        """A local directory to archive: `root_path`, and optionally a volume, a git revision and paths."""
        self.string(self.required(snapshot, "root_path", snapshot_path), (*snapshot_path, "root_path"))
        volume = self.string(snapshot.get("remote_volume"), (*snapshot_path, "remote_volume"))
        if volume is not None and not volume.startswith("/Volumes/"):
            self.add((*snapshot_path, "remote_volume"), "must be a volume path starting with /Volumes/")
        self.git(snapshot.get("git"), (*snapshot_path, "git"))
        self.include_paths(snapshot.get("include_paths"), (*snapshot_path, "include_paths"))

    def git(self, value: Any, path: Path) -> None:
        section = self.mapping(value, path, GIT_KEYS)
        if section is None:
            return
        remote = section.get("remote")
        if remote is not None and remote is not False:
            self.add(
                (*path, "remote"),
                "is no longer supported: the snapshot archives your local copy (only false is accepted); "
                "pin a revision with commit",
            )
        # A commit like 0123456 would be read as an octal number: make people quote it.
        branch = self.string(section.get("branch"), (*path, "branch"))
        self.string(section.get("commit"), (*path, "commit"))
        if branch is not None and not GIT_REF.fullmatch(branch):
            self.add((*path, "branch"), "only letters, digits, '-', '_', '.' and '/' are allowed in a branch name")
        if section.get("branch") is None and section.get("commit") is None:
            self.add((*path, "branch"), "give a branch or a commit")
        self.at_most_one(section, ("branch", "commit"), path, ": give a branch or a commit, not both")

    def include_paths(self, value: Any, path: Path) -> None:
        if value == []:
            self.add(path, "must not be an empty list: leave it out to include everything")
        for index, item in enumerate(self.string_list(value, path) or []):
            parts = re.split(r"[/\\]", item.strip())
            if item.strip().startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", item):
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
                    self.add((*path, index), "must be a mapping with one of group_name, user_name or "
                             "service_principal_name, and level")  # fmt: skip
                continue
            principals = [k for k in PRINCIPALS if entry.get(k) is not None]
            for key in principals:
                self.string(entry[key], (*path, index, key))
            if not principals:
                self.add((*path, index), "needs one of group_name, user_name or service_principal_name")
            elif len(principals) > 1:
                self.add(
                    (*path, index, principals[1]), f"cannot be given with {principals[0]}: one principal per entry"
                )
            self.string(self.required(entry, "level", (*path, index)), (*path, index, "level"))
        return value
