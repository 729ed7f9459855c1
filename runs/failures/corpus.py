"""Measure the log classifier on a labelled corpus, as a stranger would.

The corpus is a folder of `<class_id>/<name>.log` files (real excerpts from public threads) and a
`SOURCES.md` whose table row for each file gives its source thread and its part:

* `tuning`: logs the rules were written against;
* `held-out`: logs no rule was tuned on. A thread's logs are all in one part, so a rule that
  fits one post of a thread cannot flatter the figure on another post of the same thread.

`score` classifies every file and `report` prints both parts with per-class precision and
recall. `bench/classify.py` and `tests/runs/failures/test_classify.py` both call it, so the figure a test
asserts is the figure a person reruns.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from runs.failures.classify import classify_text

PARTS = ("tuning", "held-out")
# `| class/name.log | https://... (a note) | part |`
SOURCE_ROW = re.compile(
    r"^\|\s*(?P<file>[\w-]+/[\w.-]+\.log)\s*\|\s*(?P<source>[^|]*?)\s*\|\s*(?P<part>[\w-]+)\s*\|\s*$"
)


@dataclass(frozen=True)
class Case:
    """One corpus log: where it is, what it is, where it came from, which part it is in."""

    path: Path
    label: str
    thread: str
    part: str


@dataclass(frozen=True)
class Result:
    """One log's verdict next to its label."""

    case: Case
    got: str
    evidence: str

    @property
    def correct(self) -> bool:
        return self.got == self.case.label


def thread_of(source: str) -> str:
    """The source thread of a SOURCES.md cell: its URL without the note after it."""
    return source.split()[0] if source else ""


def load_corpus(root: Path) -> list[Case]:
    """Every `<label>/<name>.log` under `root` with its thread and part from `root/SOURCES.md`.

    Raises ValueError for a log with no row, a row for a missing log, or an unknown part: a
    corpus whose split cannot be read is not measured at all.
    """
    rows: dict[str, tuple[str, str]] = {}
    for line in (root / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        match = SOURCE_ROW.match(line)
        if match and match["file"] != "file":
            rows[match["file"]] = (thread_of(match["source"]), match["part"])
    cases = []
    for path in sorted(root.glob("*/*.log")):
        name = str(path.relative_to(root))
        if name not in rows:
            raise ValueError(f"{name} has no row in SOURCES.md")
        thread, part = rows.pop(name)
        if part not in PARTS:
            raise ValueError(f"{name}: part {part!r} is not one of {PARTS}")
        cases.append(Case(path, path.parent.name, thread, part))
    if rows:
        raise ValueError(f"SOURCES.md names logs that do not exist: {sorted(rows)}")
    return cases


def score(cases: list[Case]) -> list[Result]:
    """Classify every case (bad UTF-8 replaced, as the command reads files)."""
    results = []
    for case in cases:
        verdict = classify_text(case.path.read_bytes().decode("utf-8", errors="replace"))
        results.append(Result(case, verdict.class_id, verdict.evidence))
    return results


def accuracy(results: list[Result]) -> float:
    return sum(r.correct for r in results) / len(results) if results else float("nan")


def false_alarms(results: list[Result]) -> list[Result]:
    """Healthy logs called a failure."""
    return [r for r in results if r.case.label == "none" and r.got != "none"]


def table(results: list[Result]) -> str:
    """Per-class precision and recall as a fixed-width table, accuracy last."""
    true_pos: Counter[str] = Counter()
    predicted: Counter[str] = Counter()
    actual: Counter[str] = Counter()
    for r in results:
        actual[r.case.label] += 1
        predicted[r.got] += 1
        true_pos[r.case.label] += r.correct
    rows = [f"{'class':<24}{'n':>4}{'predicted':>10}{'precision':>11}{'recall':>8}"]
    for class_id in sorted(set(actual) | set(predicted)):
        precision = f"{true_pos[class_id] / predicted[class_id]:.2f}" if predicted[class_id] else "-"
        recall = f"{true_pos[class_id] / actual[class_id]:.2f}" if actual[class_id] else "-"
        rows.append(f"{class_id:<24}{actual[class_id]:>4}{predicted[class_id]:>10}{precision:>11}{recall:>8}")
    correct = sum(r.correct for r in results)
    rows.append(f"accuracy {correct}/{len(results)} = {accuracy(results):.3f}")
    return "\n".join(rows)


def report(results: list[Result], *, misses_of: tuple[str, ...] = ("tuning",)) -> str:
    """Both parts' tables; the misses listed only for the parts in `misses_of`.

    Held-out misses are left out by default: reading them is how a held-out part stops being
    held out. A log that taught something moves to the tuning part (SOURCES.md), and new
    held-out logs are collected in its place.
    """
    out = []
    for part in PARTS:
        chosen = [r for r in results if r.case.part == part]
        threads = len({r.case.thread for r in chosen})
        out.append(f"== {part}: {len(chosen)} logs from {threads} threads")
        out.append(table(chosen))
        alarms = false_alarms(chosen)
        out.append(f"healthy logs called a failure: {len(alarms)}")
        if part in misses_of:
            out += [
                f"MISS {r.case.path.parent.name}/{r.case.path.name}: got {r.got} ({r.evidence[:100]!r})"
                for r in chosen
                if not r.correct
            ]
    return "\n".join(out)
