"""The workload YAML parser (runs/workload/schema.py), its credential detectors and `check_workload`.

Fake credentials are assembled at run time from a seeded generator, so no token-shaped literal
sits in the repository for secret scanners to trip over.
"""

from __future__ import annotations

import json
import random
import string
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import Group
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.workload.credentials import describe_credential, name_says_secret
from runs.workload.schema import Problem, Workload, WorkloadError, parse_workload
from tests.conftest import TESTS

ROOT = TESTS.parent
DATA = TESTS / "data" / "workloads"

MINIMAL = """\
experiment_name: my-training
compute:
  accelerator_type: GPU_1xA10
  num_accelerators: 1
command: python train.py
"""


def problems_of(text: str) -> list[Problem]:
    with pytest.raises(WorkloadError) as caught:
        parse_workload(text)
    return caught.value.problems


def where(text: str) -> list[tuple[int | None, str]]:
    return [(p.line, p.path) for p in problems_of(text)]


def with_extra(extra: str) -> str:
    """MINIMAL plus some top-level YAML (the extra starts on line 6)."""
    return MINIMAL + extra


def with_compute(accelerator: str, count: object, extra: str = "") -> str:
    return (
        f"experiment_name: x\ncompute:\n  accelerator_type: {accelerator}\n  num_accelerators: {count}\n{extra}"
        "command: python train.py\n"
    )


def read(name: str) -> str:
    return (DATA / name).read_text()


def fake(alphabet: str, length: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"


# ---- valid files -------------------------------------------------------------------------------


def test_docs_example_parses_into_fields() -> None:
    w = parse_workload(read("llama_finetune.yaml"))
    assert isinstance(w, Workload)
    assert (w.experiment_name, w.accelerator_type, w.num_accelerators) == ("llama-finetune", "GPU_8xH100", 16)
    assert (w.gpus_per_node, w.nodes) == (8, 2)
    assert w.command.startswith("torchrun --nproc_per_node 8")
    assert w.environment == {"version": "4", "dependencies": ["torch==2.6.0", "transformers"]}
    assert w.code_source == {"type": "snapshot", "snapshot": {"root_path": "./src"}}
    assert w.parameters == {"epochs": 3, "lr": 2.0e-5}
    assert w.env_variables == {"NCCL_DEBUG": "INFO"}
    assert w.secrets == {"HF_TOKEN": "ml-team/hf-token"}
    assert (w.max_retries, w.timeout_minutes, w.usage_policy_name) == (2, 720, "ml-research")
    assert w.raw["compute"] == {"accelerator_type": "GPU_8xH100", "num_accelerators": 16}


def test_minimal_file_gets_defaults() -> None:
    w = parse_workload(read("minimal.yaml"))
    # max_retries unset is 3, as the CLI submits it.
    assert (w.nodes, w.gpus_per_node, w.max_retries, w.timeout_minutes) == (1, 1, 3, None)
    assert (w.environment, w.code_source, w.parameters, w.secrets, w.permissions) == ({}, None, {}, {}, [])


def test_every_optional_key_together() -> None:
    w = parse_workload(read("everything.yaml"))
    assert w.usage_policy_id == "6f1c2a4e-9b3d-4e8f-a1c2-3d4e5f6a7b8c"
    assert w.environment["docker_image"]["url"].endswith("/vision/trainer:v3")
    assert w.code_source["snapshot"]["git"] == {"commit": "0a1b2c3d", "remote": False}
    assert w.code_source["snapshot"]["include_paths"] == ["src", "configs/resnet.yaml"]
    assert w.command == "pip install -e .\npython -m vision.train --config configs/resnet.yaml\n"
    assert (w.max_retries, w.mlflow_run_name) == (0, "depth-50")
    assert w.mlflow_experiment_directory == "/Workspace/Users/alice@example.com/resnet"
    assert w.idempotency_token == "resnet-sweep-2026-11-02"
    assert w.permissions[1] == {"user_name": "bob@example.com", "level": "CAN_VIEW"}
    assert w.summary()["secrets"] == {"HF_TOKEN": "vision/hf-token", "AWS_SECRET_ACCESS_KEY": "vision/aws-secret"}
    json.dumps(w.summary())  # the summary is what --json prints


def test_null_optional_key_means_not_set() -> None:
    w = parse_workload(with_extra("timeout_minutes:\nenvironment:\nparameters: ~\n"))
    assert (w.timeout_minutes, w.environment, w.parameters) == (None, {}, {})


def test_merge_keys_and_anchors_are_understood() -> None:
    text = (
        "experiment_name: x\n"
        "parameters:\n"
        "  shape: &shape {accelerator_type: GPU_1xA10, num_accelerators: 1}\n"
        "compute:\n"
        "  <<: *shape\n"
        "  num_accelerators: 3\n"  # overrides the merged value: not a duplicate
        "command: go\n"
    )
    w = parse_workload(text)
    assert (w.accelerator_type, w.num_accelerators) == ("GPU_1xA10", 3)
    assert where("defaults: &d {a: 1}\n" + text) == [(1, "defaults")]  # anchors live in known keys only


# ---- required keys and types ---------------------------------------------------------------------


def test_missing_required_keys_are_all_reported() -> None:
    assert where("max_retries: 1\n") == [(None, "experiment_name"), (None, "command"), (None, "compute")]


def test_missing_compute_keys_point_at_compute() -> None:
    text = "experiment_name: x\ncommand: go\ncompute:\n  pool_id: p\n"
    # A pool (provisioned capacity) still needs the accelerators asked of it.
    assert where(text) == [(3, "compute.accelerator_type"), (3, "compute.num_accelerators")]


def test_wrong_type_is_named() -> None:
    errors = [str(p) for p in problems_of(with_compute("GPU_8xH100", "eight"))]
    assert errors == ["line 4: compute.num_accelerators: must be an integer, got 'eight'"]


@pytest.mark.parametrize("count", ["true", "8.0", '"8"', "[8]", "{n: 8}"])
def test_num_accelerators_must_be_a_real_integer(count: str) -> None:
    [problem] = problems_of(with_compute("GPU_8xH100", count))
    assert problem.path == "compute.num_accelerators"
    assert problem.message.startswith("must be an integer")


@pytest.mark.parametrize(
    ("accelerator", "count", "ok"),
    [
        ("GPU_1xA10", 1, True),
        ("GPU_1xA10", 3, True),
        ("GPU_1xA10", 0, False),
        ("GPU_1xH100", 1, True),
        ("GPU_1xH100", 2, False),
        ("GPU_8xH100", 8, True),
        ("GPU_8xH100", 64, True),
        ("GPU_8xH100", 4, False),
        ("GPU_8xH100", 12, False),
        ("GPU_8xB300", 16, True),
        ("GPU_8xB300", 1, False),
        ("GPU_8xB300", -8, False),
    ],
)
def test_accelerator_counts(accelerator: str, count: int, ok: bool) -> None:
    text = with_compute(accelerator, count)
    if ok:
        assert parse_workload(text).num_accelerators == count
    else:
        assert where(text) == [(4, "compute.num_accelerators")]


@pytest.mark.parametrize("accelerator", ["GPU_8xA100", "gpu_1xa10", "'42'"])
def test_unknown_accelerator_type(accelerator: str) -> None:
    [problem] = problems_of(with_compute(accelerator, 1))
    assert (problem.line, problem.path) == (3, "compute.accelerator_type")
    assert "must be one of GPU_1xA10, GPU_1xH100, GPU_8xH100, GPU_8xB300" in problem.message


@pytest.mark.parametrize("key", ["node_pool_id: p1", "pool_name: p"])
def test_the_older_tools_pool_keys_are_refused(key: str) -> None:
    assert where(with_compute("GPU_8xH100", 8, f"  {key}\n")) == [(5, f"compute.{key.split(':')[0]}")]


# Provisioned GPU capacity, as Databricks' workload YAML reference documents compute.pool_id and
# compute.priority_class (docs.databricks.com/aws/en/machine-learning/ai-runtime/connecting/cli/yaml-config).
@pytest.mark.parametrize(
    "keys",
    [
        "  pool_id: gpu-pool-1\n",
        "  pool_id: gpu-pool-1\n  priority_class: BEST_EFFORT\n",
        "  pool_id: 1234\n  priority_class: CRITICAL\n",
    ],
)
def test_provisioned_capacity_keys_accepted(keys: str) -> None:
    assert parse_workload(with_compute("GPU_8xH100", 8, keys)).num_accelerators == 8


@pytest.mark.parametrize(
    ("keys", "found"),
    [
        ("  priority_class: NORMAL\n", [(5, "compute.priority_class")]),
        ("  pool_id: p\n  priority_class: normal\n", [(6, "compute.priority_class")]),
        ("  pool_id: ''\n", [(5, "compute.pool_id")]),
    ],
)
def test_provisioned_capacity_keys_refused(keys: str, found: list[tuple[int, str]]) -> None:
    assert where(with_compute("GPU_8xH100", 8, keys)) == found


def test_priority_class_without_a_pool_says_why() -> None:
    [problem] = problems_of(with_compute("GPU_8xH100", 8, "  priority_class: NORMAL\n"))
    assert "give compute.pool_id too" in problem.message


@pytest.mark.parametrize(
    ("name", "ok"),
    [("smoke-test", True), ("resnet_50-v2", True), ("bad.name", False), ("has space", False), ("é-exp", False),
     ("a" * 100, True), ("a" * 101, False)],
)  # fmt: skip
def test_experiment_name_is_a_jobs_task_key(name: str, ok: bool) -> None:
    text = MINIMAL.replace("my-training", name)
    if ok:
        assert parse_workload(text).experiment_name == name
    else:
        assert where(text) == [(1, "experiment_name")]


@pytest.mark.parametrize(("name", "ok"), [("depth-50", True), ("run_1", True), ("run.1", False), ("a" * 101, False)])
def test_mlflow_run_name_follows_the_same_rule(name: str, ok: bool) -> None:
    text = with_extra(f"mlflow_run_name: {name}\n")
    if ok:
        assert parse_workload(text).mlflow_run_name == name
    else:
        assert where(text) == [(6, "mlflow_run_name")]


def test_command_line_limit() -> None:
    lines = "\n".join(f"  echo {i}" for i in range(1000))
    assert parse_workload(MINIMAL.replace("python train.py", f"|-\n{lines}")).command.count("\n") == 999
    [problem] = problems_of(MINIMAL.replace("python train.py", f"|-\n{lines}\n  echo 1000"))
    assert problem.path == "command" and problem.message.startswith("is 1001 lines long; at most 1000")


def test_a_name_in_env_variables_and_secrets_is_refused() -> None:
    text = with_extra("env_variables:\n  HF_TOKEN: x\nsecrets:\n  HF_TOKEN: ml/hf\n")
    assert [(p.line, p.path, p.message) for p in problems_of(text)] == [
        (7, "env_variables.HF_TOKEN", "is also set in secrets; remove it from one"),
    ]


@pytest.mark.parametrize(("token", "ok"), [("a" * 64, True), ("a" * 65, False), ("''", False)])
def test_idempotency_token_length(token: str, ok: bool) -> None:
    text = with_extra(f"idempotency_token: {token}\n")
    if ok:
        assert parse_workload(text).idempotency_token == token
    else:
        assert where(text) == [(6, "idempotency_token")]


@pytest.mark.parametrize("value", ["yes", "12", "2024-01-01", "''", "[a]"])
def test_experiment_name_must_be_text(value: str) -> None:
    [problem] = problems_of(MINIMAL.replace("my-training", value))
    assert (problem.line, problem.path) == (1, "experiment_name")


@pytest.mark.parametrize(
    ("command", "ok"),
    [
        ("python train.py", True),
        ("[a, b]", False),  # the CLI decodes command into a string
        ("|\n  a\n  b", True),
        ("[]", False),
        ("''", False),
        ("[a, 3]", False),
    ],
)
def test_command_is_a_string(command: str, ok: bool) -> None:
    text = MINIMAL.replace("python train.py", command)
    if ok:
        assert parse_workload(text).command in ("python train.py", "a\nb", "a\nb\n")
    else:
        assert problems_of(text)[0].path.startswith("command")


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("max_retries: -1\n", "max_retries"),
        ("max_retries: true\n", "max_retries"),
        ("max_retries: '2'\n", "max_retries"),
        ("timeout_minutes: 0\n", "timeout_minutes"),
        ("timeout_minutes: 1.5\n", "timeout_minutes"),
    ],
)
def test_retry_and_timeout_bounds(extra: str, path: str) -> None:
    assert where(with_extra(extra)) == [(6, path)]


def test_retry_and_timeout_accept_their_minimums() -> None:
    w = parse_workload(with_extra("max_retries: 0\ntimeout_minutes: 1\n"))
    assert (w.max_retries, w.timeout_minutes) == (0, 1)


@pytest.mark.parametrize(
    ("directory", "ok"),
    # The CLI checks the prefix only: /Workspaces/x passes there, and here.
    [("/Workspace", True), ("/Workspace/Users/a/exp", True), ("/Workspaces/x", True), ("/Users/a", False)],
)
def test_mlflow_experiment_directory_is_in_the_workspace(directory: str, ok: bool) -> None:
    text = with_extra(f"mlflow_experiment_directory: {directory}\n")
    if ok:
        assert parse_workload(text).mlflow_experiment_directory == directory
    else:
        assert where(text) == [(6, "mlflow_experiment_directory")]


def test_usage_policy_by_name_or_id_not_both() -> None:
    assert parse_workload(with_extra("usage_policy_name: research\n")).usage_policy_name == "research"
    uuid = "6f1c2a4e-9b3d-4e8f-a1c2-3d4e5f6a7b8c"
    assert parse_workload(with_extra(f"usage_policy_id: {uuid}\n")).usage_policy_id == uuid
    assert where(with_extra(f"usage_policy_name: research\nusage_policy_id: {uuid}\n")) == [(7, "usage_policy_id")]
    # A name pasted into usage_policy_id is refused with a hint, as the CLI does.
    [problem] = problems_of(with_extra("usage_policy_id: research\n"))
    assert problem.path == "usage_policy_id" and "use usage_policy_name" in problem.message
    assert where(with_extra(f"usage_policy_name: {'p' * 128}\n")) == [(6, "usage_policy_name")]


# ---- unknown keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "line", "path"),
    [
        ("foo: 1\n", 6, "foo"),
        ("environment:\n  pip: [torch]\n", 7, "environment.pip"),
        (
            "code_source:\n  type: snapshot\n  snapshot:\n    root_path: .\n    depth: 1\n",
            10,
            "code_source.snapshot.depth",
        ),
        (
            "code_source:\n  type: snapshot\n  snapshot:\n    root_path: .\n    git: {branch: b, tag: t}\n",
            10,
            "code_source.snapshot.git.tag",
        ),
        ("permissions:\n  - {group_name: g, level: CAN_VIEW, role: x}\n", 7, "permissions[0].role"),
    ],
)
def test_unknown_keys_are_refused_at_every_level(extra: str, line: int, path: str) -> None:
    [problem] = problems_of(with_extra(extra))
    assert (problem.line, problem.path) == (line, path)
    assert problem.message.startswith(f"unknown key '{path.rsplit('.', 1)[-1].split(']')[-1].lstrip('.')}'")


def test_unknown_compute_key_suggests_the_near_miss() -> None:
    text = "experiment_name: x\ncommand: go\ncompute:\n  accelerator_type: GPU_1xA10\n  num_accelerator: 1\n"
    assert [str(p) for p in problems_of(text)] == [
        "line 3: compute.num_accelerators: is required",  # the real key is still missing, in order of lines
        "line 5: compute.num_accelerator: unknown key 'num_accelerator' (did you mean 'num_accelerators'?)",
    ]


# ---- environment ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "environment",
    [
        "{version: '4', dependencies: [torch]}",
        "{version: 5, dependencies: [numpy, torch==2.3.0]}",
        "{version: databricks_ai_v6, dependencies: [torch]}",
        "{dependencies: [torch, --extra-index-url=https://example.org/simple]}",
        "{dependencies: ./reqs.yaml}",
        "{docker_image: {url: myregistry/img:tag}}",
        "{docker_image: {url: r/i:t, tag_policy: latest, credentials_scope: s, credentials_key: k}}",
        "{docker_image: {url: r/i:t, tag_policy: AUTO}}",
        "{}",
    ],
)
def test_environment_shapes_accepted(environment: str) -> None:
    parse_workload(with_extra(f"environment: {environment}\n"))


IMAGE = "environment.docker_image"


@pytest.mark.parametrize(
    ("environment", "paths"),
    [
        ("{version: 4.5, dependencies: [t]}", ["environment.version"]),
        ("{version: databricks_ai_v4, dependencies: [t]}", ["environment.version"]),
        ("{version: 4}", ["environment.version"]),
        ("{dependencies: [torch, 2]}", ["environment.dependencies[1]"]),
        ("{dependencies: {torch: 2}}", ["environment.dependencies"]),
        ("{docker_image: example/t:1}", ["environment.docker_image"]),
        ("{docker_image: {tag_policy: auto}}", ["environment.docker_image.url"]),
        ("{docker_image: {url: r/i:t, tag_policy: newest}}", ["environment.docker_image.tag_policy"]),
        ("{docker_image: {url: r/i:t, tag_policy: latest, credentials_scope: s}}", [f"{IMAGE}.credentials_key"]),
        ("{docker_image: {url: r/i:t, credentials_scope: s, credentials_key: k}}", [f"{IMAGE}.credentials_scope"]),
        ("{dependencies: [torch], docker_image: {url: r/i:t}}", ["environment.dependencies"]),
        ("{unity_catalog_image: main.images.t}", ["environment.unity_catalog_image"]),
    ],
)  # fmt: skip
def test_environment_shapes_refused(environment: str, paths: list[str]) -> None:
    assert [p.path for p in problems_of(with_extra(f"environment: {environment}\n"))] == paths


# ---- code_source --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code_source",
    [
        "{type: snapshot, snapshot: {root_path: ./src}}",
        "{type: snapshot, snapshot: {root_path: ., git: {branch: main}, include_paths: [src]}}",
        "{type: snapshot, snapshot: {root_path: ., git: {commit: 'a1b2c3d', remote: false}}}",
        "{type: snapshot, snapshot: {root_path: ., git: {branch: release/v1.2_rc-1}}}",
        "{type: snapshot, snapshot: {root_path: ., remote_volume: /Volumes/main/ml/code}}",
        # The flat form of the current reference's example (`code_source: root_path: .`, CLI 1.20+).
        "{root_path: .}",
        "{root_path: ., git: {branch: main}, include_paths: [src]}",
    ],
)
def test_code_source_shapes_accepted(code_source: str) -> None:
    parse_workload(with_extra(f"code_source: {code_source}\n"))


def test_the_workload_references_example_parses() -> None:
    """The example atop Databricks' workload YAML reference (connecting/cli/yaml-config), verbatim."""
    text = (
        "experiment_name: my-training\n"
        "compute:\n  accelerator_type: GPU_1xA10\n  num_accelerators: 1\n"
        "environment:\n  version: 6\n  dependencies:\n    - torch\n"
        "code_source:\n  root_path: .\n"
        "command: python $CODE_SOURCE_PATH/train.py\n"
    )
    workload = parse_workload(text)
    assert workload.code_source == {"root_path": "."}
    assert (workload.accelerator_type, workload.num_accelerators) == ("GPU_1xA10", 1)


S = "code_source.snapshot"


@pytest.mark.parametrize(
    ("code_source", "paths"),
    [
        ("{type: snapshot}", [S]),
        ("{type: snapshot, snapshot: {}}", [f"{S}.root_path"]),
        ("{type: tarball, snapshot: {root_path: .}}", ["code_source.type"]),
        ("{snapshot: {root_path: .}}", ["code_source.type"]),
        ("{type: git, git: {remote: r, branch: b}}", ["code_source.git", "code_source.type", S]),
        ("{type: snapshot, root_path: .}", ["code_source.root_path", S]),
        ("{type: snapshot, snapshot: {root_path: .}, include_paths: [src]}", ["code_source.include_paths"]),
        ("{type: snapshot, snapshot: {root_path: ., git: {remote: origin, branch: main}}}", [f"{S}.git.remote"]),
        ("{type: snapshot, snapshot: {root_path: ., git: {remote: true, branch: main}}}", [f"{S}.git.remote"]),
        ("{type: snapshot, snapshot: {root_path: ., git: {}}}", [f"{S}.git.branch"]),
        ("{type: snapshot, snapshot: {root_path: ., git: {branch: b, commit: c}}}", [f"{S}.git.commit"]),
        ("{type: snapshot, snapshot: {root_path: ., git: {branch: 'main; rm -rf ~'}}}", [f"{S}.git.branch"]),
        ("{type: snapshot, snapshot: {root_path: ., git: {commit: 0123456}}}", [f"{S}.git.commit"]),
        ("{type: snapshot, snapshot: {root_path: ., remote_volume: /dbfs/code}}", [f"{S}.remote_volume"]),
        ("{type: snapshot, snapshot: {root_path: ., include_paths: []}}", [f"{S}.include_paths"]),
        ("{root_path: ., depth: 1}", ["code_source.depth"]),
        ("{remote_volume: /Volumes/main/ml/code}", ["code_source.root_path"]),
        ("{root_path: ., remote_volume: /dbfs/code}", ["code_source.remote_volume"]),
        ("{root_path: ., include_paths: ['../up']}", ["code_source.include_paths[0]"]),
        ("{type: snapshot, snapshot: {root_path: ., include_paths: ['../up', '/etc', 'C:\\\\x', 'a/../../b', ok]}}", [
            f"{S}.include_paths[0]",
            f"{S}.include_paths[1]",
            f"{S}.include_paths[2]",
            f"{S}.include_paths[3]",
        ]),
    ],
)  # fmt: skip
def test_code_source_shapes_refused(code_source: str, paths: list[str]) -> None:
    assert [p.path for p in problems_of(with_extra(f"code_source: {code_source}\n"))] == paths


def test_include_paths_messages() -> None:
    text = "code_source:\n  type: snapshot\n  snapshot:\n    root_path: .\n"
    text += "    include_paths:\n      - ../x\n      - /abs\n"
    problems = problems_of(with_extra(text))
    assert [(p.line, p.message) for p in problems] == [
        (11, "must stay inside the code root (no '..')"),
        (12, "must be relative to the code root, not absolute"),
    ]


def test_octal_looking_commit_must_be_quoted() -> None:
    text = "code_source: {type: snapshot, snapshot: {root_path: ., git: {commit: 0123456}}}\n"
    [problem] = problems_of(with_extra(text))
    assert problem.message.endswith("(quote it)")


# ---- parameters, env_variables, secrets, permissions ------------------------------------------------


def test_env_variables_take_scalars_only() -> None:
    w = parse_workload(with_extra("env_variables:\n  A: x\n  B: 1\n  C: 1.5\n  D: true\n"))
    assert w.env_variables == {"A": "x", "B": 1, "C": 1.5, "D": True}
    text = with_extra("env_variables:\n  A: [1]\n  B:\n  C: {x: 1}\n")
    assert [(p.line, p.path, p.message) for p in problems_of(text)] == [
        (7, "env_variables.A", "must be a string, number or boolean, got a list"),
        (8, "env_variables.B", "must be a string, number or boolean, got null"),
        (9, "env_variables.C", "must be a string, number or boolean, got a mapping"),
    ]


@pytest.mark.parametrize("section", ["parameters", "env_variables", "secrets"])
def test_sections_must_be_mappings(section: str) -> None:
    [problem] = problems_of(with_extra(f"{section}: [a, b]\n"))
    assert (problem.line, problem.path, problem.message) == (6, section, "must be a mapping, got a list")


def test_secrets_are_scope_key_references() -> None:
    w = parse_workload(with_extra("secrets:\n  HF_TOKEN: ml-team/hf-token\n  DB: a/b\n"))
    assert w.secrets == {"HF_TOKEN": "ml-team/hf-token", "DB": "a/b"}


@pytest.mark.parametrize(
    "value", ["hf-token", "a/b/c", "/key", "scope/", "'scope /key'", "'a/b c'", "42", "[a, b]", "''"]
)
def test_secret_values_that_are_not_references_are_refused(value: str) -> None:
    [problem] = problems_of(with_extra(f"secrets:\n  HF_TOKEN: {value}\n"))
    assert (problem.line, problem.path) == (7, "secrets.HF_TOKEN")
    assert "secrets must be scope/key references (like ml-team/hf-token), never values" in problem.message


def test_templated_secret_reference_gets_a_hint() -> None:
    [problem] = problems_of(with_extra("secrets:\n  HF_TOKEN: '{{secrets/ml/hf}}'\n"))
    assert "without {{secrets/...}}" in problem.message


def test_secret_given_as_its_value_is_never_echoed() -> None:
    token = "hf_" + fake(ALNUM, 34)
    [problem] = problems_of(with_extra(f"secrets:\n  HF_TOKEN: {token}\n"))
    assert problem.message == "looks like a Hugging Face token: secrets must be scope/key references, never values"
    # Even an AWS secret key that happens to hold exactly one slash (so it parses as scope/key).
    aws = fake(ALNUM, 20, seed=3) + "/" + fake(ALNUM, 19, seed=4)
    [problem] = problems_of(with_extra(f"secrets:\n  AWS_SECRET_ACCESS_KEY: {aws}\n"))
    assert "AWS secret access key" in problem.message
    assert aws[:8] not in str(problem) and aws[-8:] not in str(problem)


def test_permissions() -> None:
    assert len(
        parse_workload(with_extra("permissions:\n  - {user_name: a@example.com, level: CAN_VIEW}\n")).permissions
    )
    text = with_extra(
        "permissions:\n"
        "  - {group_name: g, user_name: u, level: CAN_VIEW}\n"
        "  - {level: CAN_VIEW}\n"
        "  - {group_name: g}\n"
        "  - just-a-name\n"
    )
    assert [(p.line, p.path) for p in problems_of(text)] == [
        (7, "permissions[0].user_name"),
        (8, "permissions[1]"),
        (9, "permissions[2].level"),
        (10, "permissions[3]"),
    ]
    assert where(with_extra("permissions: {group_name: g}\n")) == [(6, "permissions")]


# ---- YAML-level problems --------------------------------------------------------------------------


def test_invalid_yaml_reports_its_line() -> None:
    [problem] = problems_of(read("bad_syntax.yaml"))
    assert problem.line == 4
    assert problem.message == "invalid YAML: mapping values are not allowed here"


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n"])
def test_empty_file(text: str) -> None:
    [problem] = problems_of(text)
    assert (problem.line, problem.path) == (None, "")
    assert problem.message.startswith("the file is empty")


@pytest.mark.parametrize(("text", "got"), [("- a\n- b\n", "a list"), ("hello\n", "'hello'"), ("42\n", "42")])
def test_top_level_must_be_a_mapping(text: str, got: str) -> None:
    [problem] = problems_of(text)
    assert problem.message == f"the top level must be a mapping of keys, got {got}"


def test_duplicate_keys_are_refused_with_both_lines() -> None:
    problems = problems_of(read("duplicate_keys.yaml"))
    assert [str(p) for p in problems] == [
        "line 5: compute.num_accelerators: duplicate key 'num_accelerators' (first given on line 4)",
        "line 7: experiment_name: duplicate key 'experiment_name' (first given on line 1)",
    ]


def test_non_string_keys_are_refused() -> None:
    assert where(with_extra("env_variables:\n  1: a\n  true: b\n")) == [(7, "env_variables"), (8, "env_variables")]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (MINIMAL + "---\nexperiment_name: y\n", 6),  # two documents
        (MINIMAL + "timeout_minutes: !!python/object:os.system x\n", 6),
        (MINIMAL + "parameters: !!set {a, b}\n", 6),
        (MINIMAL + "parameters:\n  when: 2024-13-45\n", 7),  # matches the date pattern, is no date
        (MINIMAL + "parameters: &p\n  self: *p\n", 7),  # an alias inside its own anchor
        (MINIMAL + "parameters:\n  x: \x07\n", 7),
    ],
)
def test_yaml_oddities_become_located_problems(text: str, line: int) -> None:
    assert [p.line for p in problems_of(text)] == [line]


def test_impossible_date_asks_for_quotes() -> None:
    [problem] = problems_of(with_extra("parameters:\n  when: 2024-13-45\n"))
    assert str(problem) == (
        "line 7: parameters.when: cannot read this value: it looks like a date but is not one (quote it)"
    )


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    problems = problems_of(MINIMAL + "parameters:\n" + "\n".join("  " + line for line in lines) + "\n")
    assert any("too large" in p.message for p in problems)


def test_deep_nesting_is_refused() -> None:
    problems = problems_of(with_extra("parameters: " + "[" * 500 + "]" * 500 + "\n"))
    assert problems[0].message in (
        "invalid YAML: nested too deeply",
        "too large or too deeply nested for a workload file",
    )


# ---- all problems at once, and their lines ----------------------------------------------------------


def test_broken_file_reports_every_problem_with_its_line() -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_workload(read("broken.yaml"))
    assert [(p.line, p.path) for p in caught.value.problems] == [
        (1, "experiment_name"),
        (4, "compute.num_accelerators"),
        (5, "compute.priority_class"),
        (7, "environment.version"),
        (8, "environment.docker_image"),
        (14, "code_source.snapshot.git.remote"),
        (16, "code_source.snapshot.include_paths[0]"),
        (19, "env_variables.HF_TOKEN"),
        (21, "secrets.HF_TOKEN"),
        (22, "max_retries"),
        (23, "timeout_mintues"),
        (24, "mlflow_experiment_directory"),
        (26, "permissions[0].level"),
    ]
    assert str(caught.value).splitlines()[1] == (
        "line 4: compute.num_accelerators: GPU_8xH100 takes a multiple of 8 accelerators (8 GPUs a node), got 12"
    )
    assert len(str(caught.value).splitlines()) == 13


def test_problem_str_leaves_out_what_it_lacks() -> None:
    assert str(Problem("experiment_name", None, "is required")) == "experiment_name: is required"
    assert str(Problem("", 3, "invalid YAML: x")) == "line 3: invalid YAML: x"


# ---- literal credentials ------------------------------------------------------------------------------


def _pem() -> tuple[str, str]:
    body = fake(ALNUM + "+/", 64, seed=9)
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n", body


def _credentials() -> list[tuple[str, str, str, str]]:
    """(label, env name, value, the secret part that must never be echoed)."""
    pem, pem_body = _pem()
    hf = "hf_" + fake(ALNUM, 34, seed=2)
    aws_secret = fake(ALNUM + "/+", 40, seed=5)
    azure_key = fake(ALNUM + "+/", 86, seed=6) + "=="
    password = "Pa5s-" + fake(ALNUM, 16, seed=7)
    generic = fake(ALNUM, 32, seed=8)
    return [
        ("an AWS access key id", "AWS_KEY", "AKIA" + fake(UPPER_ALNUM, 16), ""),
        ("an AWS access key id", "STS_KEY", "ASIA" + fake(UPPER_ALNUM, 16, seed=2), ""),
        ("an AWS secret access key", "AWS_SECRET_ACCESS_KEY", aws_secret, aws_secret),
        ("a Databricks personal access token", "DATABRICKS_HOST_CFG", "dapi" + fake(HEX, 32), ""),
        ("a Databricks personal access token", "DB_PAT", "dapi" + fake(HEX, 32, seed=3) + "-2", ""),
        ("a Hugging Face token", "HUGGING", f"--token={hf}", hf),
        ("a GitHub token", "GH", "ghp_" + fake(ALNUM, 36), ""),
        ("a GitHub token", "GH2", "github_pat_" + fake(ALNUM + "_", 60), ""),
        ("an OpenAI-style API key", "OPENAI", "sk-proj-" + fake(ALNUM, 48), ""),
        ("a Google API key", "GOOGLE", "AIza" + fake(ALNUM + "-_", 35), ""),
        (
            "an Azure storage connection string",
            "AZ_CONN",
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={azure_key};EndpointSuffix=core.windows.net",
            azure_key,
        ),
        ("a private key", "SSH_KEY_MATERIAL", pem, pem_body),
        ("a Slack token", "SLACK", "xoxb-" + fake(string.digits, 12) + "-" + fake(ALNUM, 24), ""),
        ("a URL with an embedded password", "DB_URL", f"postgres://trainer:{password}@db.example.com/runs", password),
        ("a literal credential", "WANDB_API_KEY", generic, generic),
        ("a literal credential", "dbPassword", password, password),
    ]


CREDENTIALS = _credentials()


def _assert_not_echoed(secret: str, text: str) -> None:
    for start in range(len(secret) - 7):
        assert secret[start : start + 8] not in text


@pytest.mark.parametrize(("label", "name", "value", "secret"), CREDENTIALS, ids=[c[1] for c in CREDENTIALS])
def test_credentials_in_env_variables_are_refused_without_echo(label: str, name: str, value: str, secret: str) -> None:
    text = with_extra("env_variables:\n  " + yaml.safe_dump({name: value}, width=1000).replace("\n", "\n  ") + "\n")
    with pytest.raises(WorkloadError) as caught:
        parse_workload(text)
    [problem] = caught.value.problems
    assert (problem.line, problem.path) == (7, f"env_variables.{name}")
    assert problem.message == (
        f"looks like {label}; store it in a secret scope and reference it under `secrets` as scope/key"
    )
    _assert_not_echoed(secret or value, str(caught.value))


@pytest.mark.parametrize(("label", "name", "value", "secret"), CREDENTIALS, ids=[c[1] for c in CREDENTIALS])
def test_credentials_nested_in_parameters_are_refused(label: str, name: str, value: str, secret: str) -> None:
    params = {"epochs": 3, "auth": {"hosts": ["a", {name: value}]}}
    [problem] = problems_of(with_extra(yaml.safe_dump({"parameters": params}, width=1000)))
    assert problem.path == f"parameters.auth.hosts[1].{name}"
    assert label in problem.message and "`secrets`" in problem.message
    _assert_not_echoed(secret or value, str(problem))


def test_command_is_not_scanned() -> None:
    token = "hf_" + fake(ALNUM, 34)
    assert parse_workload(MINIMAL.replace("python train.py", f"huggingface-cli login --token {token}"))


def test_every_credential_in_a_file_is_reported_at_once() -> None:
    env = {name: value for _, name, value, _ in CREDENTIALS}
    problems = problems_of(with_extra(yaml.safe_dump({"env_variables": env}, width=1000)))
    assert len(problems) == len(CREDENTIALS)


ORDINARY_ENV = {
    "NCCL_DEBUG": "INFO",
    "WANDB_PROJECT": "my-proj",
    "TOKENIZERS_PARALLELISM": "false",
    "MAX_NEW_TOKENS": 4096,
    "TOKEN_LIMIT": "8192",
    "HF_HOME": "/local_disk0/hf",
    "HF_TOKEN_PATH": "/dbfs/tokens/hf-token-2026.txt",
    "HF_HUB_ENABLE_HF_TRANSFER": "1",
    "SECRET_SCOPE": "ml-team",
    "WANDB_API_KEY": "{{secrets/ml-team/wandb}}",
    "OPENAI_API_KEY": "changeme",
    "GITHUB_TOKEN": "",
    "API_KEY_ENV": "OPENAI_API_KEY",
    "DB_PASSWORD": "${DB_PASSWORD}",
    "DB_PASSWORD_FILE": "./secrets/db.txt",
    "DB_URL": "postgres://trainer:$DB_PASSWORD@db.example.com/runs",
    "AUTH_TOKEN_URL": "https://auth.example.com/oauth2/token",
    "PASSWORD_MIN_LENGTH": 12,
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    "MODEL_NAME": "meta-llama/Llama-3.1-8B-Instruct",
    "GIT_SHA": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
    "RUN_ID": "2f1e9c0a7b3d4e5f8a9b0c1d",
    "DATASET": "s3://bucket/imagenet/train",
    "AWS_REGION": "us-west-2",
    "SLACK_CHANNEL": "#training-alerts",
    "SECRET_NAME_PREFIX": "xxxxxxxxxxxxxxxx",
}
ORDINARY_PARAMETERS = {
    "model": "sk-learn-baseline-classifier",
    "tokenizer": "hf_internal_testing/tiny-random-bert",
    "token_budget": 1_000_000,
    "password_policy": {"min_length": 12, "require_digit": True},
    "lr": 2.0e-5,
    "layers": [64, 128, "AKIA-not-a-key"],
    "pad_token": "<|reserved_special_token_0|>",
    "token_model": "meta-llama/Llama-3.1-8B-Instruct",
    "eos_token": "</s>",
}


def test_ordinary_env_and_parameters_are_not_flagged() -> None:
    text = with_extra(yaml.safe_dump({"env_variables": ORDINARY_ENV, "parameters": ORDINARY_PARAMETERS}))
    w = parse_workload(text)
    assert w.env_variables == ORDINARY_ENV


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("HF_TOKEN", True),
        ("hfToken", True),
        ("AUTHTOKEN", True),
        ("DB_PASSWORD", True),
        ("WANDB_API_KEY", True),
        ("aws_secret_access_key", True),
        ("client_secret", True),
        ("HF_TOKEN_2", True),
        ("TOKEN_LIMIT", False),
        ("SECRET_SCOPE", False),
        ("DB_PASSWORD_FILE", False),
        ("pad_token_id", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("MAX_NEW_TOKENS", False),
        ("WANDB_PROJECT", False),
        ("KEY_PATH", False),
        ("NCCL_DEBUG", False),
    ],
)
def test_name_says_secret(name: str, says: bool) -> None:
    assert name_says_secret(name) is says


def test_credential_labels_never_contain_the_value() -> None:
    for label, name, value, _ in CREDENTIALS:
        assert describe_credential(value, name) == label


# ---- the management command --------------------------------------------------------------------------


def run_command(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("check_workload", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_command_accepts_a_valid_file() -> None:
    code, out, err = run_command("-f", str(DATA / "llama_finetune.yaml"))
    assert (code, out.strip(), err) == (0, "OK: llama-finetune on 16 x GPU_8xH100 (2 node(s))", "")


@pytest.mark.django_db
def test_command_accepts_long_option_and_team_then_checks_admission() -> None:
    Group.objects.create(name="vision")
    code, out, _ = run_command("--file", str(DATA / "minimal.yaml"), "--team", "vision")
    assert code == 0
    assert out.startswith("ALLOW: my-training for team vision")
    code, _, err = run_command("--file", str(DATA / "minimal.yaml"), "--team", "no-such-team")
    assert code == 1
    assert "not admitted" in err


def test_command_reports_problems_as_file_line_path_message() -> None:
    path = str(DATA / "broken.yaml")
    code, out, err = run_command("-f", path)
    lines = err.strip().splitlines()
    assert (code, out) == (1, "")
    assert len(lines) == 13
    assert lines[1] == (
        f"{path}:4: compute.num_accelerators: GPU_8xH100 takes a multiple of 8 accelerators (8 GPUs a node), got 12"
    )
    assert lines[10] == f"{path}:23: timeout_mintues: unknown key 'timeout_mintues' (did you mean 'timeout_minutes'?)"


def test_command_on_empty_and_missing_files(tmp_path: Path) -> None:
    code, _, err = run_command("-f", str(DATA / "empty.yaml"))
    assert code == 1
    assert err.startswith(f"{DATA / 'empty.yaml'}: the file is empty")
    missing = tmp_path / "nope.yaml"
    code, _, err = run_command("-f", str(missing))
    assert (code, err.strip()) == (1, f"{missing}: cannot read the file: No such file or directory")
    (tmp_path / "latin1.yaml").write_bytes(b"experiment_name: caf\xe9\n")
    assert run_command("-f", str(tmp_path / "latin1.yaml"))[0] == 1


@pytest.mark.django_db
def test_command_json_output() -> None:
    Group.objects.create(name="vision")
    code, out, _ = run_command("-f", str(DATA / "everything.yaml"), "--json", "--team", "vision")
    report = json.loads(out)
    assert (code, report["ok"], report["problems"], report["team"]) == (0, True, [], "vision")
    assert report["admission"]["decision"] == "allow"
    assert report["workload"]["nodes"] == 1 and report["workload"]["accelerator_type"] == "GPU_8xB300"

    code, out, err = run_command("-f", str(DATA / "duplicate_keys.yaml"), "--json")
    report = json.loads(out)
    assert (code, report["ok"], report["workload"], err) == (1, False, None, "")
    assert report["problems"][0] == {
        "line": 5,
        "path": "compute.num_accelerators",
        "message": "duplicate key 'num_accelerators' (first given on line 4)",
    }


def test_command_never_prints_a_leaked_credential(tmp_path: Path) -> None:
    token = "dapi" + fake(HEX, 32, seed=11)
    leaked = tmp_path / "leak.yaml"
    leaked.write_text(with_extra(f"env_variables:\n  DATABRICKS_TOKEN: {token}\n"))
    for extra in ([], ["--json"]):
        code, out, err = run_command("-f", str(leaked), *extra)
        assert code == 1
        _assert_not_echoed(token, out + err)


def test_manage_py_exit_codes_without_traceback() -> None:
    def manage(name: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "manage.py", "check_workload", "-f", str(DATA / name)]
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)

    good, bad = manage("minimal.yaml"), manage("bad_syntax.yaml")
    assert (good.returncode, good.stdout.strip()) == (0, "OK: my-training on 1 x GPU_1xA10 (1 node(s))")
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"{DATA / 'bad_syntax.yaml'}:4: invalid YAML: mapping values are not allowed here"


# ---- properties ---------------------------------------------------------------------------------------

VALID = yaml.safe_load(read("everything.yaml"))

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
yamlish = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def parses_or_refuses(text: str) -> None:
    try:
        w = parse_workload(text)
    except WorkloadError as exc:
        assert exc.problems
        assert all(isinstance(p, Problem) and (p.line is None or p.line >= 1) for p in exc.problems)
    else:
        assert w.nodes * w.gpus_per_node == w.num_accelerators


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_arbitrary_text_only_raises_workload_error(text: str) -> None:
    parses_or_refuses(text)


@settings(deadline=None)
@given(yamlish)
def test_arbitrary_yaml_values_only_raise_workload_error(value: object) -> None:
    parses_or_refuses(yaml.safe_dump(value))


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from([*VALID, "compute", "extra"]), yamlish, max_size=4))
def test_mutated_valid_workloads_only_raise_workload_error(changes: dict[str, object]) -> None:
    parses_or_refuses(yaml.safe_dump({**VALID, **changes}))


@settings(deadline=None)
@given(st.sampled_from(["accelerator_type", "num_accelerators", "pool_id", "priority_class"]), yamlish)
def test_mutated_compute_only_raises_workload_error(key: str, value: object) -> None:
    parses_or_refuses(yaml.safe_dump({**VALID, "compute": {**VALID["compute"], key: value}}))


# ---- the Databricks CLI's own workload files ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("run-valid.yaml", []),
        ("run-with-code-source.yaml", []),
        ("run-submit-run.yaml", []),
        ("run-submit-deps-run.yaml", []),
        ("run-submit-deps-run-file.yaml", []),
        ("convert-to-dabs-train.yaml", []),
        ("convert-to-dabs-docker.yaml", []),
        ("run-invalid.yaml", ["experiment_name", "compute.num_accelerators"]),
        ("run-git-remote.yaml", ["code_source.snapshot.git.remote"]),
        ("get-ai-runtime-training_config.yaml", ["compute.accelerator_type"]),
    ],
)
def test_the_clis_acceptance_files_get_the_clis_verdict(name: str, refused: list[str]) -> None:
    """tests/data/workloads/cli: verbatim from databricks/cli's acceptance tests (see SOURCES.md)."""
    text = (DATA / "cli" / name).read_text()
    if refused:
        assert [p.path for p in problems_of(text)] == refused
    else:
        assert parse_workload(text).max_retries == 3


def test_the_clis_bad_name_message() -> None:
    [first, _] = problems_of((DATA / "cli" / "run-invalid.yaml").read_text())
    assert (first.line, first.message) == (
        1, "only ASCII letters, digits, '-' and '_' are allowed (no dots or spaces): it becomes the Jobs task key",
    )  # fmt: skip
