"""The workload models (runs/workload/models.py on runs/workload/sections.py): pydantic, in the file's words."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.workload import models
from runs.workload.schema import Problem, WorkloadError, parse_workload
from runs.workload.sections import Section
from tests.conftest import TESTS

MINIMAL = (TESTS / "data" / "workloads" / "minimal.yaml").read_text()  # five lines
EVERYTHING = yaml.safe_load((TESTS / "data" / "workloads" / "everything.yaml").read_text())
# pydantic's own sentences, which must never reach the file's author.
PYDANTIC_WORDS = ("Input should", "Field required", "Extra inputs", "Value error", "Assertion failed")


def problems_of(text: str) -> list[Problem]:
    with pytest.raises(WorkloadError) as caught:
        parse_workload(text)
    return caught.value.problems


def test_every_model_is_strict_and_refuses_unknown_keys() -> None:
    sections = [v for v in vars(models).values() if isinstance(v, type) and issubclass(v, Section) and v is not Section]
    assert len(sections) == 8
    for section in sections:
        assert (section.model_config["extra"], section.model_config["strict"]) == ("forbid", True), section


IMAGE_MESSAGE = "must be a mapping with url (like `docker_image: {url: example/trainer:1}`)"


@pytest.mark.parametrize(
    ("extra", "found"),
    [
        # The value is wrong already: "give compute.pool_id too" would be a second problem on that key.
        ("  priority_class: normal\n",
         [(5, "compute.priority_class", "must be one of BEST_EFFORT, NORMAL, CRITICAL, got 'normal'")]),
        ("usage_policy_name: research\nusage_policy_id: research\n",
         [(7, "usage_policy_id", "must be a UUID (like 12345678-90ab-cdef-1234-567890abcdef); "
                                 "to name a policy instead, use usage_policy_name")]),
        # Rules still run beside a failed field elsewhere in the same mapping.
        ("environment:\n  version: '4'\n  docker_image: example/trainer:1\n",
         [(7, "environment.version", "cannot be given with docker_image: the image brings its own environment"),
          (8, "environment.docker_image", IMAGE_MESSAGE)]),
    ],
)  # fmt: skip
def test_a_rule_adds_no_second_problem_to_a_key_that_failed(extra: str, found: list[tuple[int, str, str]]) -> None:
    # Indented lines go into compute (lines 2-4), the others after the file's last line (5).
    text = MINIMAL.replace("command:", extra + "command:") if extra.startswith(" ") else MINIMAL + extra
    assert [(p.line, p.path, p.message) for p in problems_of(text)] == found


@pytest.mark.parametrize(
    ("extra", "path", "line"),
    [
        ("environment:\n  dependencies:\n    - torch\n    -\n", "environment.dependencies[1]", 9),
        ("code_source:\n  root_path: .\n  include_paths: [src, null]\n", "code_source.include_paths[1]", 8),
    ],
)
def test_a_null_list_item_is_refused(extra: str, path: str, line: int) -> None:
    assert [(p.line, p.path, p.message) for p in problems_of(MINIMAL + extra)] == [
        (line, path, "must be a string, got null")
    ]


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
)
KEYS = ["type", "snapshot", "root_path", "git", "branch", "commit", "remote", "include_paths", "remote_volume"]
KEYS += ["docker_image", "url", "tag_policy", "credentials_scope", "version", "dependencies", "level", "user_name"]


@settings(deadline=None, max_examples=300)
@given(
    st.sampled_from(["environment", "code_source", "permissions", "compute", "secrets"]),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=4) | values,
)
def test_every_problem_is_worded_for_the_files_author(section: str, value: object) -> None:
    text = yaml.safe_dump({**EVERYTHING, section: [value] if section == "permissions" else value})
    try:
        parse_workload(text)
    except WorkloadError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.message and not problem.message.startswith(PYDANTIC_WORDS), problem
