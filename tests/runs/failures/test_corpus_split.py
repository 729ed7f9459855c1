"""Issue 32: the corpus is split by ecosystem and collection wave, and the fresh wave is cited.

`runs.failures.corpus` gives every log a wave (SOURCES.md's "Added on <date>" paragraphs, or
its own `wave-<date>/` folder) and an ecosystem, and reads the recorded root-cause lines that
`bench/classify.py` checks the evidence against.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.failures.corpus import Result, by, ecosystem_of, evidence_checked, failures_called_none, load_corpus
from tests.conftest import TESTS

CORPUS = TESTS / "data" / "failures"
FRESH = CORPUS / "wave-2026-12-03-8"


def test_the_fresh_wave_is_its_own_part_with_a_source_and_root_cause_per_failure() -> None:
    cases = load_corpus(FRESH)
    assert len(cases) >= 100
    assert {case.part for case in cases} == {"fresh"}
    assert {case.wave for case in cases} == {"wave-2026-12-03-8"}
    assert all(case.thread.startswith("https://github.com/") for case in cases)
    failures = [case for case in cases if case.label != "none"]
    assert all(case.root_cause for case in failures), [c.path.name for c in failures if not c.root_cause]
    # No thread of the fresh wave is in the corpus the rules were written against.
    assert not {case.thread for case in cases} & {case.thread for case in load_corpus(CORPUS)}


def test_waves_follow_the_added_on_paragraphs(tmp_path: Path) -> None:
    (tmp_path / "cuda_oom").mkdir()
    for name in ("a", "b"):
        (tmp_path / "cuda_oom" / f"{name}.log").write_text("CUDA out of memory\n")
    (tmp_path / "SOURCES.md").write_text(
        "| file | source | part |\n| --- | --- | --- |\n"
        "| cuda_oom/a.log | https://github.com/o/r/issues/1 | tuning |\n\n"
        "Added on 2026-12-03 (the row below).\n\n"
        "| cuda_oom/b.log | https://github.com/o/r/issues/2 | held-out |\n"
    )
    waves = {case.path.name: case.wave for case in load_corpus(tmp_path)}
    assert waves == {"a.log": "w0", "b.log": "w1 (2026-12-03)"}


@pytest.mark.parametrize(
    ("thread", "text", "expected"),
    [
        ("https://github.com/marbl/canu/issues/1214", "=>> PBS: job killed: walltime 86415 exceeded limit 86400",
         "pbs/lsf"),
        ("https://github.com/o/r/issues/1", "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2024 ***", "slurm"),
        ("https://github.com/vllm-project/vllm/issues/10439", "ValueError: No available memory", "serving"),
        ("https://github.com/jax-ml/jax/issues/13428", "jaxlib.xla_extension.XlaRuntimeError", "jax/xla"),
        ("https://github.com/o/r/issues/2", "RuntimeError: CUDA out of memory", "pytorch"),
    ],
)  # fmt: skip
def test_ecosystem_of(thread: str, text: str, expected: str) -> None:
    assert ecosystem_of(thread, text) == expected


def test_the_measures_bench_classify_prints() -> None:
    cases = load_corpus(FRESH)
    results = [Result(case, case.label, case.root_cause) for case in cases]
    # A perfect classifier: every evidence is its root-cause line, no failure is called none.
    assert all(r.evidence_is_root_cause for r in evidence_checked(results))
    assert not failures_called_none(results)
    assert sum(len(group) for group in by(results, "ecosystem").values()) == len(results)
    silent = [Result(case, "none", "") for case in cases]
    assert len(failures_called_none(silent)) == sum(case.label != "none" for case in cases)
