"""The workload YAML that `databricks air run` submits, as pydantic models: one per mapping.

Rules are the real CLI's (experimental/air/cmd/runconfig.go and compute.go in databricks/cli at
7bbe285213), as ../shared/reference/databricks-ai-runtime.md summarises them ("The workload YAML
as the CLI parses it"): unknown keys refused at every level; `experiment_name` and
`mlflow_run_name` Jobs-task-key names; `command` at most 1,000 lines; a name in both
`env_variables` and `secrets` refused; `usage_policy_name` xor `usage_policy_id` (a UUID);
`environment.docker_image` a mapping with `url`, never beside `dependencies` or `version`;
`code_source.type: snapshot` with `snapshot.root_path`, `snapshot.git` (branch xor commit;
`remote` only `false`), `snapshot.include_paths` and `snapshot.remote_volume` under `/Volumes/`;
permissions with exactly one principal and a level.

Newer than that commit, as Databricks' workload YAML reference documents them (docs.databricks.com
.../machine-learning/ai-runtime/connecting/cli/yaml-config; the flat `code_source` needs CLI
1.20.0 or later): `code_source` may hold the snapshot's keys directly (`code_source: {root_path:
.}`), and `compute` takes `pool_id` (provisioned GPU capacity) and `priority_class` (only with
`pool_id`). The older tool's `node_pool_id` and `pool_name` stay refused. `GPU_8xB300` is
accepted beside the CLI's three types (the seeds list it in preview).

Stricter than the CLI: literal credentials in `env_variables` or `parameters` are refused, since
an accepted file is stored and shown to the team (`secrets` holds scope/key references, safe to
store). Looser: `environment.dependencies` may be a path to a YAML file of `version` +
`dependencies` (the older Python tool's form, still in real files); `version: "4"` or `version:
4`, ids as bare numbers, and `null` for an optional key meaning "not set".

How errors become sentences and cross-field `rules` run beside field errors: runs/workload/sections.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

from runs.choices import AcceleratorType, accelerator_count_problem
from runs.workload.credentials import describe_credential, known_shape
from runs.workload.loader import BROKEN, describe
from runs.workload.sections import Loc, Section, exclusive, must, present, raise_all, worded

NAME_MAX = 100
COMMAND_MAX_LINES = 1_000
# The Jobs task key's characters (ASCII only: \w would let Unicode letters through).
TASK_KEY = re.compile(r"[A-Za-z0-9_-]+")
GIT_REF = re.compile(r"[A-Za-z0-9_./-]+")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
SECRET_REFERENCE = re.compile(r"[^/\s]+/[^/\s]+")
TEMPLATE_REFERENCE = re.compile(r"\{\{\s*secrets/[^/\s]+/[^/\s]+\s*\}\}")
# `databricks_ai_v<N>` environment identifiers exist from version 5 on.
AI_ENVIRONMENT = re.compile(r"databricks_ai_v(\d+)")
PRINCIPALS = ("group_name", "user_name", "service_principal_name")


def _task_key(why: str) -> AfterValidator:
    """At most 100 ASCII letters, digits, '-' and '_' (stripped): what a Jobs task key may hold."""

    def check(value: str) -> str:
        text = value.strip()
        if len(text) > NAME_MAX:
            raise worded(f"must be at most {NAME_MAX} characters, got {len(text)}{why}")
        if not TASK_KEY.fullmatch(text):
            raise worded(f"only ASCII letters, digits, '-' and '_' are allowed (no dots or spaces){why}")
        return text

    return AfterValidator(check)


def _at_most(limit: int) -> AfterValidator:
    return must(
        lambda text: len(text.strip()) <= limit, lambda text: f"must be at most {limit} characters, got {len(text)}"
    )


def _refuse_list(value: Any) -> Any:
    if isinstance(value, list):  # the CLI decodes `command` into a string: a list is refused there too
        raise worded("must be a string; write several lines as a YAML block (`command: |`)")
    return value


def _inside_the_code_root(path: str) -> bool:
    return ".." not in re.split(r"[/\\]", path.strip())


def _relative(path: str) -> bool:
    return not path.strip().startswith(("/", "\\", "~")) and not re.match(r"[A-Za-z]:", path)


# ---- values -------------------------------------------------------------------------------------

Text = Annotated[str, Strict(), must(str.strip, "must not be empty")]
# Ids written as bare numbers (`pool_id: 1234`) are ids all the same.
Id = Annotated[Text, BeforeValidator(lambda v: str(v) if isinstance(v, int) and not isinstance(v, bool) else v)]
Positive = Annotated[int, Field(ge=1)]
Command = Annotated[
    Text,
    must(
        lambda text: text.count("\n") < COMMAND_MAX_LINES,
        lambda text: (
            f"is {text.count(chr(10)) + 1} lines long; at most {COMMAND_MAX_LINES}: "
            "move the logic into a script under code_source"
        ),
    ),
    BeforeValidator(_refuse_list),
]
WorkspacePath = Annotated[
    Text, must(lambda path: path.strip().startswith("/Workspace"), "must be a workspace path starting with /Workspace")
]
PolicyId = Annotated[
    Id,
    must(
        lambda text: UUID.fullmatch(text.strip()),
        "must be a UUID (like 12345678-90ab-cdef-1234-567890abcdef); to name a policy instead, use usage_policy_name",
    ),
    AfterValidator(str.strip),
]
TagPolicy = Annotated[
    Text, must(lambda p: p.strip().lower() in ("auto", "latest"), "must be auto or latest, got {got}")
]
Branch = Annotated[
    Text, must(GIT_REF.fullmatch, "only letters, digits, '-', '_', '.' and '/' are allowed in a branch name")
]
NoRemote = Annotated[
    Any,
    must(
        lambda remote: remote is False,
        "is no longer supported: the snapshot archives your local copy (only false is accepted); "
        "pin a revision with commit",
    ),
]
IncludePaths = Annotated[
    list[
        Annotated[
            Text,
            must(_relative, "must be relative to the code root, not absolute"),
            must(_inside_the_code_root, "must stay inside the code root (no '..')"),
        ]
    ],
    must(len, "must not be an empty list: leave it out to include everything"),
]
_TEXT, _TEXTS = TypeAdapter(Text), TypeAdapter(list[Text], config=ConfigDict(strict=True))


def _version(value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise worded(f"must be a string or an integer, got {describe(value)}")
    match = AI_ENVIRONMENT.fullmatch(value.strip()) if isinstance(value, str) else None
    if match and int(match.group(1)) < 5:
        raise worded("databricks_ai_v environments start at databricks_ai_v5")
    return _TEXT.validate_python(value) if isinstance(value, str) else value


def _dependencies(value: Any) -> str | list[str]:
    # A string is a path to a YAML file of version + dependencies (the older tool's form).
    return (_TEXT if isinstance(value, str) else _TEXTS).validate_python(value)


# ---- NAME: value mappings, credentials ---------------------------------------------------------


def _credentials_in(value: Any, loc: Loc, name: str | None) -> Iterator[tuple[Loc, str]]:
    """Literal credentials anywhere inside a value, each under the innermost key that holds it."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _credentials_in(item, (*loc, key), key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _credentials_in(item, (*loc, index), name)
    elif isinstance(value, str) and (label := describe_credential(value, name)):
        yield loc, f"looks like {label}; store it in a secret scope and reference it under `secrets` as scope/key"


def _env_value(name: str, value: Any) -> Iterator[tuple[Loc, str]]:
    if isinstance(value, str | int | float):  # bool is an int
        yield from _credentials_in(value, (name,), name)
    else:
        yield (name,), f"must be a string, number or boolean, got {describe(value)}"


def _secret_reference(name: str, value: Any) -> Iterator[tuple[Loc, str]]:
    # Never echo the value: whatever is not a reference may be the secret itself. Only the
    # distinctive key shapes here: a reference like team1/hfToken is mixed-case too.
    if label := known_shape(value, name) if isinstance(value, str) else None:
        yield (name,), f"looks like {label}: secrets must be scope/key references, never values"
    elif not isinstance(value, str) or not SECRET_REFERENCE.fullmatch(value):
        # `{{secrets/scope/key}}` is how env values point at a secret; here the bare form is wanted.
        hint = (
            " (here write just scope/key, without {{secrets/...}})" if TEMPLATE_REFERENCE.fullmatch(str(value)) else ""
        )
        yield (name,), f"secrets must be scope/key references (like ml-team/hf-token), never values{hint}"


def _each(check: Callable[[str, Any], Iterator[tuple[Loc, str]]]) -> AfterValidator:
    """Check every NAME: value of a mapping, told the name (credentials are known by it too)."""

    def run(section: dict[str, Any]) -> dict[str, Any]:
        raise_all(found for name, value in section.items() if value is not BROKEN for found in check(name, value))
        return section

    return AfterValidator(run)


# Parameters may nest anything; a credential is found at any depth, under the key that holds it.
Parameters = Annotated[dict[str, Any], _each(lambda name, value: _credentials_in(value, (name,), name))]
EnvVariables = Annotated[dict[str, Any], _each(_env_value)]
Secrets = Annotated[dict[str, Any], _each(_secret_reference)]  # NAME: scope/key
VolumePath = Annotated[
    Text, must(lambda path: path.startswith("/Volumes/"), "must be a volume path starting with /Volumes/")
]


# ---- sections ------------------------------------------------------------------------------------


class Compute(Section):
    """`compute`: the accelerator shape (matched case-sensitively, as the server looks it up) and count."""

    accelerator_type: Literal[tuple(AcceleratorType.values)]  # type: ignore[valid-type]
    num_accelerators: Positive
    pool_id: Id | None = None  # provisioned GPU capacity
    priority_class: Literal["BEST_EFFORT", "NORMAL", "CRITICAL"] | None = None

    @field_validator("num_accelerators")
    @classmethod
    def fits_the_shape(cls, count: int, info: ValidationInfo) -> int:
        accelerator = info.data.get("accelerator_type")
        if accelerator is not None and (problem := accelerator_count_problem(accelerator, count)):
            raise worded(problem)
        return count

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        if present(raw, "priority_class") and not present(raw, "pool_id"):
            yield ("priority_class",), "applies to provisioned GPU capacity only: give compute.pool_id too"


class DockerImage(Section):
    """`environment.docker_image`: an image that brings its own environment."""

    url: Text
    tag_policy: TagPolicy | None = None
    credentials_scope: Text | None = None
    credentials_key: Text | None = None

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        scope, key = present(raw, "credentials_scope"), present(raw, "credentials_key")
        if scope != key:
            yield (
                ("credentials_key",) if scope else ("credentials_scope",),
                "give credentials_scope and credentials_key together",
            )
        elif scope and str(raw.get("tag_policy") or "").strip().lower() != "latest":
            yield (
                ("credentials_scope",),
                "applies only with tag_policy: latest (the image is otherwise used as registered)",
            )


class Environment(Section):
    """`environment`: pip `dependencies` (a list, or a path to a YAML file of them) on a `version`, or an image."""

    version: Annotated[str | int, PlainValidator(_version)] | None = None
    dependencies: Annotated[str | list[str], PlainValidator(_dependencies)] | None = None
    docker_image: DockerImage | None = None

    @field_validator("docker_image", mode="before")
    @classmethod
    def image_is_a_mapping(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise worded(f"must be a mapping with url (like `docker_image: {{url: {value}}}`)")
        return value

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        if present(raw, "docker_image"):
            for key in ("dependencies", "version"):
                if present(raw, key):
                    yield (key,), "cannot be given with docker_image: the image brings its own environment"
        elif present(raw, "version") and not present(raw, "dependencies"):
            yield ("version",), "needs dependencies: the version pins the image the packages go on"


class Git(Section):
    """`snapshot.git`: the revision to archive, a branch or a commit (quoted: `0123456` is an octal number)."""

    remote: NoRemote | None = None
    branch: Branch | None = None
    commit: Text | None = None

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        if not present(raw, "branch") and not present(raw, "commit"):
            yield ("branch",), "give a branch or a commit"
        yield from exclusive(raw, "branch", "commit", ": give a branch or a commit, not both")


class Snapshot(Section):
    """`code_source.snapshot` (or, flat, `code_source`): a local directory to archive."""

    root_path: Text
    remote_volume: VolumePath | None = None
    git: Git | None = None
    include_paths: IncludePaths | None = None


class SnapshotSource(Section):
    """`code_source` in full: `type: snapshot` (the only type) and the `snapshot`."""

    type: Annotated[Text, must(lambda kind: kind == "snapshot", "must be snapshot (the only type), got {got}")]
    snapshot: Snapshot


def _code_source(value: Any) -> Snapshot | SnapshotSource:
    """The flat form (the snapshot's keys straight under code_source) has neither `type` nor `snapshot`."""
    flat = isinstance(value, dict) and value and not {"type", "snapshot"} & value.keys()
    return (Snapshot if flat else SnapshotSource).model_validate(value)


class Permission(Section):
    """One grant: exactly one principal and a `level` (CAN_VIEW, CAN_MANAGE...)."""

    group_name: Text | None = None
    user_name: Text | None = None
    service_principal_name: Text | None = None
    level: Text

    @classmethod
    def not_a_mapping(cls, value: Any) -> str:
        if value is None:
            return "must be a mapping with one of group_name, user_name or service_principal_name, and level"
        return super().not_a_mapping(value)

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        given = [key for key in PRINCIPALS if present(raw, key)]
        if not given:
            yield (), "needs one of group_name, user_name or service_principal_name"
        elif len(given) > 1:
            yield (given[1],), f"cannot be given with {given[0]}: one principal per entry"


class WorkloadFile(Section):
    """The whole file. Fields are in the order their problems are told (required keys first)."""

    experiment_name: Annotated[Text, _task_key(": it becomes the Jobs task key")]
    command: Command
    compute: Compute
    environment: Environment | None = None
    code_source: Annotated[Snapshot | SnapshotSource, PlainValidator(_code_source)] | None = None
    parameters: Parameters | None = None
    env_variables: EnvVariables | None = None
    secrets: Secrets | None = None
    timeout_minutes: Positive | None = None
    permissions: list[Permission] | None = Field(None, description="a list of permissions")
    max_retries: Annotated[int, Field(ge=0)] | None = None
    mlflow_run_name: Annotated[Text, _task_key("")] | None = None
    idempotency_token: Annotated[Id, _at_most(64)] | None = None
    mlflow_experiment_directory: WorkspacePath | None = None
    usage_policy_name: Annotated[Text, _at_most(127), AfterValidator(str.strip)] | None = None
    usage_policy_id: PolicyId | None = None

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        plain, secret = (raw.get(k) for k in ("env_variables", "secrets"))
        both = set(plain) & set(secret) if isinstance(plain, dict) and isinstance(secret, dict) else set()
        for name in sorted(both):
            yield ("env_variables", name), "is also set in secrets; remove it from one"
        yield from exclusive(raw, "usage_policy_name", "usage_policy_id", ": give one usage policy, by name or id")
