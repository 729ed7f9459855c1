"""The workload YAML that `databricks air run` submits, as pydantic models: one per mapping.

Shapes and rules are the real CLI's (experimental/air/cmd/runconfig.go and compute.go in
databricks/cli at 7bbe285213), as ../shared/reference/databricks-ai-runtime.md summarises them
("The workload YAML as the CLI parses it"): unknown keys refused at every level; names the
Jobs task key takes; `command` at most 1,000 lines; a name in both `env_variables` and
`secrets` refused; `usage_policy_name` xor `usage_policy_id` (a UUID); `environment.docker_image`
a mapping with `url`, never beside `dependencies` or `version`; `code_source.type: snapshot`
with `snapshot.root_path`, `snapshot.git` (branch xor commit; `remote` only `false`),
`snapshot.include_paths` and `snapshot.remote_volume` under `/Volumes/`; permissions with
exactly one principal and a level.

Newer than that commit, as Databricks' workload YAML reference documents them (docs.databricks.com
.../machine-learning/ai-runtime/connecting/cli/yaml-config; the flat `code_source` needs CLI
1.20.0 or later): `code_source` may hold the snapshot's keys directly (`code_source: {root_path:
.}`), and `compute` takes `pool_id` (provisioned GPU capacity) and `priority_class` (only with
`pool_id`). The older tool's `node_pool_id` and `pool_name` stay refused. `GPU_8xB300` is
accepted beside the CLI's three types (the seeds list it in preview).

Stricter than the CLI: literal credentials in `env_variables` or `parameters` are refused, since
an accepted file is stored and shown to the team (`secrets` holds scope/key references instead).
Looser: `environment.dependencies` may be a path to a YAML file of `version` + `dependencies`
(the older Python tool's form, still in real files); `version: "4"` or `version: 4`, ids as bare
numbers, and `null` for an optional key meaning "not set".

How one pass reports every problem: `Section`'s wrap validator words pydantic's errors the way
the file's author reads them ("must be an integer, got '8'", "unknown key 'num_accelerator'
(did you mean 'num_accelerators'?)") and adds the model's cross-field `rules` (exclusive and
dependent keys), read from the raw mapping so they are found even where a field failed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import date
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from runs.choices import AcceleratorType, accelerator_count_problem
from runs.workload.credentials import describe_credential, known_shape
from runs.workload.loader import BROKEN, describe

Loc = tuple[str | int, ...]
# The one error type the models raise: its message is final, worded for the file's author.
WORDED = "workload"
# The message of an error about a value the YAML loader could not build: it told the user already.
SAID = ""

NAME_MAX = 100
COMMAND_MAX_LINES = 1_000
IDEMPOTENCY_TOKEN_MAX = 64
USAGE_POLICY_NAME_MAX = 127
# The Jobs task key's characters (ASCII only: \w would let Unicode letters through).
TASK_KEY = re.compile(r"[A-Za-z0-9_-]+")
GIT_REF = re.compile(r"[A-Za-z0-9_./-]+")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
SECRET_REFERENCE = re.compile(r"[^/\s]+/[^/\s]+")
_TEMPLATE_REF = re.compile(r"\{\{\s*secrets/[^/\s]+/[^/\s]+\s*\}\}")
# `databricks_ai_v<N>` environment identifiers exist from version 5 on.
AI_ENVIRONMENT = re.compile(r"databricks_ai_v(\d+)")
PRINCIPALS = ("group_name", "user_name", "service_principal_name")

# What a value of the wrong type must be, by pydantic's error type.
_NOUNS = {
    "string_type": "a string",
    "literal_error": "a string",
    "int_type": "an integer",
    "list_type": "a list of strings",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def worded(message: str) -> PydanticCustomError:
    # The message goes in as context, never as the template: it may hold braces (`{url: ...}`).
    return PydanticCustomError(WORDED, "{message}", {"message": message})


def raise_all(problems: Iterable[tuple[Loc, str]], title: str = "workload") -> None:
    """Raise every (location, message) at once, or nothing when there are none."""
    details = [InitErrorDetails(type=worded(message), loc=loc, input=None) for loc, message in problems]
    if details:
        raise ValidationError.from_exception_data(title, details)


def must(test: Callable[[Any], object], message: str | Callable[[Any], str]) -> AfterValidator:
    """A rule on a value that has its type already: `message` (a "{got}" in it is the value) when `test` fails."""

    def check(value: Any) -> Any:
        if not test(value):
            raise worded(message(value) if callable(message) else message.replace("{got}", describe(value)))
        return value

    return AfterValidator(check)


def present(raw: dict[str, Any], key: str) -> bool:
    return raw.get(key) is not None


def exclusive(raw: dict[str, Any], first: str, second: str, why: str = "") -> Iterator[tuple[Loc, str]]:
    if present(raw, first) and present(raw, second):
        yield (second,), f"cannot be given with {first}{why}"


class Section(BaseModel):
    """A mapping of the workload file: unknown keys refused, values read strictly (no `"8"` for 8)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        """Cross-field problems (exclusive keys, keys that need others), read from the raw mapping."""
        return iter(())

    @classmethod
    def not_a_mapping(cls, value: Any) -> str:
        return "is required" if value is None else f"must be a mapping, got {describe(value)}"

    @model_validator(mode="wrap")
    @classmethod
    def every_problem(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """Field problems (unknown keys first, as they are read) and then the rules, all in one error."""
        model, errors = None, []
        try:
            model = handler(data)
        except ValidationError as exc:
            errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
        # A value YAML could not build is reported already: its error stays, unworded (SAID).
        problems = [(e["loc"], SAID if e["input"] is BROKEN else cls.wording(e)) for e in errors]
        if isinstance(data, dict):
            taken = {loc for loc, _ in problems}  # one problem a key: a rule adds none where its type failed
            problems += [(loc, message) for loc, message in cls.rules(data) if loc not in taken]
        raise_all(problems, cls.__name__)
        assert model is not None  # failed validation left problems, raised just above
        return model

    @classmethod
    def wording(cls, error: ErrorDetails) -> str:
        """Pydantic's error in the words of this file's author ("must be an integer, got 'eight'")."""
        kind, loc, value = error["type"], error["loc"], error["input"]
        if kind == WORDED:
            return error["ctx"]["message"]
        if not loc:
            return cls.not_a_mapping(value)
        if kind == "extra_forbidden":
            key = str(loc[-1])
            close = difflib.get_close_matches(key, list(cls.model_fields), n=1)
            return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        if kind == "missing" or (value is None and len(loc) == 1):
            return "is required"
        if kind == "greater_than_equal":
            return f"must be at least {error['ctx']['ge']}, got {value}"
        if kind == "literal_error" and isinstance(value, str):
            choices = ", ".join(re.findall(r"'([^']*)'", error["ctx"]["expected"]))
            return f"must be one of {choices}, got {describe(value)}" if value.strip() else "must not be empty"
        field = cls.model_fields.get(str(loc[0])) if len(loc) == 1 else None
        noun = (field and field.description) or _NOUNS.get(kind)
        if noun is None:
            return error["msg"]
        hint = " (quote it)" if noun == "a string" and isinstance(value, int | float | date) else ""
        return f"must be {noun}, got {describe(value)}{hint}"


# ---- values -----------------------------------------------------------------------------------


def _number_as_text(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _task_key(why: str) -> AfterValidator:
    """At most 100 ASCII letters, digits, '-' and '_': what a Jobs task key may hold."""

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


def _one_script(value: Any) -> Any:
    if isinstance(value, list):  # the CLI decodes `command` into a string: a list is refused there too
        raise worded("must be a string; write several lines as a YAML block (`command: |`)")
    return value


def _version(value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise worded(f"must be a string or an integer, got {describe(value)}")
    match = AI_ENVIRONMENT.fullmatch(value.strip()) if isinstance(value, str) else None
    if match and int(match.group(1)) < 5:
        raise worded("databricks_ai_v environments start at databricks_ai_v5")
    return One.validate_python(value) if isinstance(value, str) else value


def _inside_the_code_root(path: str) -> str:
    text = path.strip()
    if text.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", path):
        raise worded("must be relative to the code root, not absolute")
    if ".." in re.split(r"[/\\]", text):
        raise worded("must stay inside the code root (no '..')")
    return path


Text = Annotated[str, Strict(), must(str.strip, "must not be empty")]
# Ids written as bare numbers (`pool_id: 1234`) are ids all the same.
Id = Annotated[Text, BeforeValidator(_number_as_text)]
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
    BeforeValidator(_one_script),
]
NoRemote = Annotated[
    Any,
    must(
        lambda remote: remote is False,
        "is no longer supported: the snapshot archives your local copy (only false is accepted); "
        "pin a revision with commit",
    ),
]
TaskKey = Annotated[Text, _task_key(": it becomes the Jobs task key")]
RunName = Annotated[Text, _task_key("")]
Token = Annotated[Id, _at_most(IDEMPOTENCY_TOKEN_MAX)]
WorkspacePath = Annotated[
    Text, must(lambda path: path.strip().startswith("/Workspace"), "must be a workspace path starting with /Workspace")
]
PolicyName = Annotated[Text, _at_most(USAGE_POLICY_NAME_MAX), AfterValidator(str.strip)]
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
VolumePath = Annotated[
    Text, must(lambda path: path.startswith("/Volumes/"), "must be a volume path starting with /Volumes/")
]
Branch = Annotated[
    Text, must(GIT_REF.fullmatch, "only letters, digits, '-', '_', '.' and '/' are allowed in a branch name")
]
IncludePaths = Annotated[
    list[Annotated[Text, AfterValidator(_inside_the_code_root)]],
    must(len, "must not be an empty list: leave it out to include everything"),
]
SnapshotType = Annotated[Text, must(lambda kind: kind == "snapshot", "must be snapshot (the only type), got {got}")]
One, Requirements = TypeAdapter(Text), TypeAdapter(list[Text], config=ConfigDict(strict=True))


def _dependencies(value: Any) -> str | list[str]:
    # A string is a path to a YAML file of version + dependencies (the older tool's form).
    return (One if isinstance(value, str) else Requirements).validate_python(value)


# ---- credentials -------------------------------------------------------------------------------


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


def _no_credentials(section: dict[str, Any]) -> dict[str, Any]:
    raise_all(_credentials_in(section, (), None))
    return section


def _env_problems(section: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
    for name, value in section.items():
        if value is BROKEN:
            continue
        if not isinstance(value, str | int | float):
            yield (name,), f"must be a string, number or boolean, got {describe(value)}"
        else:
            yield from _credentials_in(value, (name,), name)


def _reference_problems(section: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
    for name, value in section.items():
        if value is BROKEN:
            continue
        # Never echo the value: whatever is not a reference may be the secret itself. Only the
        # distinctive key shapes here: a reference like team1/hfToken is mixed-case too.
        if label := known_shape(value, name) if isinstance(value, str) else None:
            yield (name,), f"looks like {label}: secrets must be scope/key references, never values"
        elif not isinstance(value, str) or not SECRET_REFERENCE.fullmatch(value):
            # `{{secrets/scope/key}}` is how env values point at a secret; here the bare form is wanted.
            hint = (
                " (here write just scope/key, without {{secrets/...}})" if _TEMPLATE_REF.fullmatch(str(value)) else ""
            )
            yield (name,), f"secrets must be scope/key references (like ml-team/hf-token), never values{hint}"


def _env_variables(section: dict[str, Any]) -> dict[str, Any]:
    raise_all(_env_problems(section))
    return section


def _references(section: dict[str, Any]) -> dict[str, Any]:
    raise_all(_reference_problems(section))
    return section


# ---- sections ----------------------------------------------------------------------------------


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
                ("credentials_scope" if key else "credentials_key",),
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

    type: SnapshotType
    snapshot: Snapshot


def _code_source(value: Any) -> Snapshot | SnapshotSource:
    """The flat form (the snapshot's keys straight under code_source) has neither `type` nor `snapshot`."""
    if isinstance(value, dict) and value and not {"type", "snapshot"} & value.keys():
        return Snapshot.model_validate(value)
    return SnapshotSource.model_validate(value)


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
    """The whole file, in the order its problems are told (required keys first)."""

    experiment_name: TaskKey
    command: Command
    compute: Compute
    environment: Environment | None = None
    code_source: Annotated[Snapshot | SnapshotSource, PlainValidator(_code_source)] | None = None
    parameters: Annotated[dict[str, Any], AfterValidator(_no_credentials)] | None = None
    env_variables: Annotated[dict[str, Any], AfterValidator(_env_variables)] | None = None
    secrets: Annotated[dict[str, Any], AfterValidator(_references)] | None = None
    timeout_minutes: Positive | None = None
    permissions: list[Permission] | None = Field(None, description="a list of permissions")
    max_retries: Annotated[int, Field(ge=0)] | None = None
    mlflow_run_name: RunName | None = None
    idempotency_token: Token | None = None
    mlflow_experiment_directory: WorkspacePath | None = None
    usage_policy_name: PolicyName | None = None
    usage_policy_id: PolicyId | None = None

    @classmethod
    def rules(cls, raw: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
        plain, secret = (raw.get(k) if isinstance(raw.get(k), dict) else {} for k in ("env_variables", "secrets"))
        for name in sorted(set(plain) & set(secret)):
            yield ("env_variables", name), "is also set in secrets; remove it from one"
        yield from exclusive(raw, "usage_policy_name", "usage_policy_id", ": give one usage policy, by name or id")
