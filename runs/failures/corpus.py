"""Measure the log classifier on a labelled corpus, as a stranger would.

The corpus is a folder of `<class_id>/<name>.log` files (real excerpts from public threads) and a
`SOURCES.md` whose table row for each file gives its source thread and its part:

* `tuning`: logs the rules were written against (or whose misses someone has read);
* `held-out`: logs no rule was tuned on. A thread's logs are all in one part, so a rule that
  fits one post of a thread cannot flatter the figure on another post of the same thread;
* `fresh`: a wave collected after the rules were frozen and measured once (a folder of its own,
  `wave-<date>/`, with its own SOURCES.md).

Each log also has a collection wave (the paragraphs of SOURCES.md that start "Added on <date>"
open a new one; rows above the first are wave `w0`) and an ecosystem (`ecosystem_of`: the
scheduler, platform or framework the log comes from), so the figures can be split by where a
log came from and when, not only at random. An optional `ROOT_CAUSES.tsv` beside SOURCES.md
(`file<TAB>line`) gives the root-cause line of a log, to check the evidence line against.

What counts as a log (the same rule in every wave): at least one of its lines is program output,
copied as the program printed it (whole or cut; an issue title that is an error message copied
verbatim counts). A row whose every line is in a person's own words (an issue title or a
reporter's sentence that describes the failure, even one that quotes a message inside it) is
prose: its SOURCES.md note carries `[prose]`, decided from the thread when it is labelled, before
the classifier runs. Prose rows are kept and classified but measured apart (`Case.prose`): the
classifier reads program output, and a sentence is not a run's log.

`score` classifies every file and `report` prints the parts with per-class precision and
recall. `bench/classify.py` and `tests/runs/failures/test_classify.py` both call it, so the figure a test
asserts is the figure a person reruns.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from runs.failures.classify import classify_text

PARTS = ("tuning", "held-out", "fresh")
# `| class/name.log | https://... (a note) | part |`
SOURCE_ROW = re.compile(
    r"^\|\s*(?P<file>[\w-]+/[\w.-]+\.log)\s*\|\s*(?P<source>[^|]*?)\s*\|\s*(?P<part>[\w-]+)\s*\|\s*$"
)
PROSE_MARK = "[prose]"  # in a row's note: no line of the log is program output
WAVE_START = re.compile(r"^Added on (?P<date>\d{4}-\d\d-\d\d)")

# Where a log comes from, first match wins: the scheduler or platform that ran it (its words
# are in the log), then the framework (the thread's repository or the log's own words).
# (name, pattern on the thread URL's repository, pattern on the log's text)
ECOSYSTEMS: tuple[tuple[str, str, str], ...] = (
    ("slurm", r"slurm", r"slurmstepd|\bsrun: |\bsbatch\b|SLURM_"),
    ("pbs/lsf", r"\bpbs|torque|\blsf\b", r"PBS: |\bqsub\b|\bMoab\b|MOAB_|\bTERM_[A-Z]+|\bbsub\b"),
    ("kubernetes", r"k8s|kube|kubeflow", r"kubectl|kubelet|FailedScheduling|OOMKilled|nodes are available|\bpod/"),
    ("cloud", r"sagemaker|vertex|azureml|azure|databricks|skypilot|dstack|modal", r"sagemaker|aiplatform|azureml"),
    ("serving", r"vllm|sglang|lmdeploy|text-generation-inference|tensorrt-llm|triton", r"\bvllm\b|\bsglang\b"),
    ("horovod", r"horovod", r"\bhorovod\b|\bhvd\."),
    ("spark", r"spark|hail", r"\bpyspark\b|org\.apache\.spark|SparkContext"),
    ("ray", r"ray-project|/ray\b", r"ray\.exceptions|\braylet\b|RayTrainWorker|\(pid=\d+"),
    ("jax/xla", r"jax|xla|paxml|flax|t5x|maxtext|praxis", r"\bjaxlib\b|\bjax\b|XlaRuntimeError"),
    ("paddle", r"paddle", r"\bpaddle\b"),
    ("mxnet", r"mxnet|gluon", r"\bmxnet\b"),
    ("tensorflow", r"tensorflow|keras", r"\btensorflow\b|\bkeras\b"),
    ("deepspeed", r"deepspeed", r"\bdeepspeed\b"),
    ("megatron/nemo", r"megatron|nemo", r"\bmegatron\b|\bnemo\b"),
    ("lightning", r"lightning", r"pytorch_lightning|lightning\.pytorch|\blightning\b"),
    ("huggingface", r"huggingface|llamafactory|axolotl|trl|peft|openrlhf|verl|swift|unsloth",
     r"transformers/|\baccelerate\b|\btrl\b"),
    ("nvidia-system", r"nvidia/(nccl|open-gpu|nvsentinel|k8s|dcgm|gpu-operator)", r"NVRM|\bXid\b|nvidia-smi"),
)  # fmt: skip
_ECOSYSTEM_PATTERNS = [
    (name, re.compile(repo, re.IGNORECASE), re.compile(text, re.IGNORECASE)) for name, repo, text in ECOSYSTEMS
]


def ecosystem_of(thread: str, text: str) -> str:
    """The ecosystem a log comes from (ECOSYSTEMS, first match); `pytorch` when none matches."""
    repo = "/".join(thread.split("/")[3:5]) if "github.com" in thread else thread
    for name, repo_pattern, text_pattern in _ECOSYSTEM_PATTERNS:
        if repo_pattern.search(repo) or text_pattern.search(text):
            return name
    return "pytorch"


@dataclass(frozen=True)
class Case:
    """One corpus log: where it is, what it is, where it came from, which part it is in."""

    path: Path
    label: str
    thread: str
    part: str
    wave: str = "w0"
    ecosystem: str = "pytorch"
    root_cause: str = ""
    prose: bool = False  # no line of program output: measured apart (the module's docstring)


@dataclass(frozen=True)
class Result:
    """One log's verdict next to its label."""

    case: Case
    got: str
    evidence: str

    @property
    def correct(self) -> bool:
        return self.got == self.case.label

    @property
    def evidence_is_root_cause(self) -> bool | None:
        """Whether the evidence line is the recorded root-cause line (None when none is recorded)."""
        if not self.case.root_cause:
            return None
        return _same_line(self.evidence, self.case.root_cause)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip("\"'`").lower()


def _same_line(evidence: str, root: str) -> bool:
    # Recorded lines are sometimes a quote of part of a line, sometimes a line cut short: one
    # containing the other (at least 20 characters of it) is the same line.
    a, b = _squash(evidence), _squash(root)
    if not a or not b:
        return False
    shorter, longer = (a, b) if len(a) <= len(b) else (b, a)
    return shorter in longer and len(shorter) >= min(20, len(longer))


def thread_of(source: str) -> str:
    """The source thread of a SOURCES.md cell: its URL without the note after it."""
    return source.split()[0] if source else ""


def _root_causes(root: Path) -> dict[str, str]:
    path = root / "ROOT_CAUSES.tsv"
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, _, text = line.partition("\t")
        if text and name != "file":
            found[name] = text
    return found


def load_corpus(root: Path) -> list[Case]:
    """Every `<label>/<name>.log` under `root` with its thread, part, wave and ecosystem.

    Raises ValueError for a log with no row, a row for a missing log, or an unknown part: a
    corpus whose split cannot be read is not measured at all.
    """
    rows: dict[str, tuple[str, str, str, bool]] = {}
    # A wave folder of its own (`wave-<date>/`) is one wave, named by its folder.
    wave = root.name if root.name.startswith("wave-") else "w0"
    waves = 0
    for line in (root / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        started = WAVE_START.match(line)
        if started and not root.name.startswith("wave-"):
            waves += 1
            wave = f"w{waves} ({started['date']})"
        match = SOURCE_ROW.match(line)
        if match and match["file"] != "file":
            rows[match["file"]] = (thread_of(match["source"]), match["part"], wave, PROSE_MARK in match["source"])
    root_causes = _root_causes(root)
    cases = []
    for path in sorted(root.glob("*/*.log")):
        name = str(path.relative_to(root))
        if name not in rows:
            raise ValueError(f"{name} has no row in SOURCES.md")
        thread, part, log_wave, prose = rows.pop(name)
        if part not in PARTS:
            raise ValueError(f"{name}: part {part!r} is not one of {PARTS}")
        text = path.read_bytes().decode("utf-8", errors="replace")
        cases.append(
            Case(
                path,
                path.parent.name,
                thread,
                part,
                log_wave,
                ecosystem_of(thread, text),
                root_causes.get(name, ""),
                prose,
            )
        )
    if rows:
        raise ValueError(f"SOURCES.md names logs that do not exist: {sorted(rows)}")
    return cases


def score(cases: list[Case]) -> list[Result]:
    """Classify every case from its log alone (bad UTF-8 replaced, as the command reads files)."""
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


def failures_called_none(results: list[Result]) -> list[Result]:
    """Logs of failed runs that the log alone calls healthy."""
    return [r for r in results if r.case.label != "none" and r.got == "none"]


def evidence_checked(results: list[Result]) -> list[Result]:
    """Correct verdicts on logs whose root-cause line is recorded (where the evidence can be checked)."""
    return [r for r in results if r.correct and r.case.label != "none" and r.evidence_is_root_cause is not None]


def by(results: list[Result], attribute: str) -> dict[str, list[Result]]:
    """Results grouped by a Case attribute (`ecosystem`, `wave`, `part`), in name order."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[getattr(r.case, attribute)].append(r)
    return dict(sorted(groups.items()))


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


def group_table(groups: dict[str, list[Result]]) -> str:
    """Accuracy per group (an ecosystem, a wave) as a fixed-width table."""
    rows = [f"{'group':<22}{'n':>5}{'correct':>9}{'accuracy':>10}"]
    for name, results in groups.items():
        rows.append(f"{name:<22}{len(results):>5}{sum(r.correct for r in results):>9}{accuracy(results):>10.3f}")
    return "\n".join(rows)


def report(results: list[Result], *, misses_of: tuple[str, ...] = ("tuning",)) -> str:
    """Each part's table; the misses listed only for the parts in `misses_of`.

    Held-out misses are left out by default: reading them is how a held-out part stops being
    held out. A log that taught something moves to the tuning part (SOURCES.md), and new
    held-out logs are collected in its place.
    """
    out = []
    for part in PARTS:
        chosen = [r for r in results if r.case.part == part]
        if not chosen:
            continue
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
