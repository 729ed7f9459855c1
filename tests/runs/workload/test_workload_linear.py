"""Workload text an attacker controls is read in time linear in its size (issue 33).

Each input is a few hundred bytes to a few hundred kilobytes that once took seconds to minutes
of a web worker (`POST /api/v1/admission` parses the file in the request). The deadlines are
generous for a loaded two-core machine; the fixed code takes a tenth of them.
"""

from __future__ import annotations

import pytest

from runs.workload.credentials import describe_credential
from runs.workload.schema import WorkloadError, parse_workload
from tests.bounded_time import finishes_within

HEAD = "experiment_name: x\ncompute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\ncommand: go\nparameters:\n"


def merge_bomb() -> str:
    """480 bytes: a mapping of unreadable keys merged 9^4 times over, reached through 729 aliases.

    Each alias rebuilt the 6,561 merged pairs and reported every key again: 50 s on 4ab1749.
    """
    lines = ["  s0: &s0 {1: x}"]
    lines += [f"  s{i}: &s{i} {{<<: [{', '.join([f'*s{i - 1}'] * 9)}]}}" for i in range(1, 5)]
    lines.append("  l0: &l0 [" + ", ".join(["*s4"] * 9) + "]")
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 3)]
    return HEAD + "\n".join(lines) + "\n"


def test_nested_merge_keys_are_refused_in_linear_time() -> None:
    text = merge_bomb()
    assert len(text) < 700
    with finishes_within(1.0), pytest.raises(WorkloadError) as caught:
        parse_workload(text)
    # The one unreadable key is reported once, not once per alias that reaches it.
    problems = [str(p) for p in caught.value.problems]
    assert "line 5: parameters.s0: keys must be strings, got 1 (quote it)" in problems
    assert len(problems) < 20
    assert any("too large" in p for p in problems)


def test_merges_that_expand_too_far_are_refused_before_expanding() -> None:
    lines = ["  m0: &m0 {a: 1}"]
    lines += [f"  m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}], b{i}: 1}}" for i in range(1, 12)]
    with finishes_within(1.0), pytest.raises(WorkloadError) as caught:
        parse_workload(HEAD + "\n".join(lines) + "\n")
    assert [p.message for p in caught.value.problems] == ["invalid YAML: merges expand too far"]


def test_a_merge_still_works_and_explicit_keys_win() -> None:
    text = HEAD + "  base: &b {lr: 0.1, epochs: 3}\n  run: {<<: [*b, *b], epochs: 5}\n"
    assert parse_workload(text).parameters["run"] == {"lr": 0.1, "epochs": 5}


@pytest.mark.parametrize(
    "value",
    [
        "a" * 100_000,  # 20,000 letters took 1.1-1.3 s in the URL-with-password detector; 100,000 took 30 s
        "a1" * 50_000,
        "a{{" * 30_000,  # the `{{...}}` template check, under a secret-sounding name
        "{{a}" * 30_000,
    ],
)
def test_credential_detectors_are_linear(value: str) -> None:
    with finishes_within(1.0):
        assert describe_credential(value, "HF_TOKEN") is None


@pytest.mark.parametrize(
    "value",
    ["postgres://u:hunter2x@db", "jdbc:postgresql://u:hunter2x@db", "--url=https://u:pw9@h", "git+ssh://u:pw9@h"],
)
def test_urls_with_a_password_are_still_found(value: str) -> None:
    assert describe_credential(value) == "a URL with an embedded password"


def test_templates_are_still_not_literals() -> None:
    assert describe_credential("{{secrets/scope/key}}", "HF_TOKEN") is None
    assert describe_credential("Xy7aQ9zLmpR2kT", "HF_TOKEN") == "a literal credential"
