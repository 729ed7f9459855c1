"""Why did this run fail? A classifier for training logs.

Pure text in, one `Classification` out: no database, no Django models, so the management
command, the post-mortem page and the tests can all call it. The patterns and remedies live in
`runs.failures.rules`; this module holds the algorithm that picks the *first causal* error
rather than the last line of the cascade.

    >>> classify_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB").class_id
    'cuda_oom'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import re2

from runs.failures.rules import (
    BOILERPLATE,
    CLASSES,
    EXIT_CODE_CLASSES,
    HARMLESS,
    NCCL_FATAL_WARN,
    OVERFLOW,
    OVERFLOW_STREAK,
    PROGRESS,
    RECOVERED_AFTER,
    ROOT,
    RULES,
    SYMPTOM,
    Rule,
)

# Terminal colour codes (tqdm, rich) would split words the patterns look for.
ANSI_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# Evidence is shown in a terminal and on a page; a 50 MB line (a dumped tensor) must not be.
MAX_EVIDENCE_CHARS = 1_000
# Characters of a line the rules read. Every cause a rule looks for is named in the first few
# hundred characters of its line; the rest of a 50 MB line (a dumped tensor, a progress bar
# redrawn with "\r") is never searched, so the time per line is bounded whatever the log holds.
MAX_SCAN_CHARS = 4_000


def _rule_set() -> re2.Set:
    # All rules in one RE2 set: a single linear pass over a line says which rules match it.
    rules = re2.Set.SearchSet()
    for rule in RULES:
        rules.Add("(?i)" + rule.source)
    rules.Compile()
    return rules


_RULE_SET = _rule_set()


@dataclass(frozen=True)
class Classification:
    """The verdict on one log: the class, where its evidence is, and what to do about it."""

    class_id: str
    line: int | None
    evidence: str
    remedy: str
    title: str

    def as_dict(self) -> dict[str, str | int | None]:
        """The `--json` shape of the command: class, line, evidence, remedy."""
        return {"class": self.class_id, "line": self.line, "evidence": self.evidence, "remedy": self.remedy}


def _verdict(class_id: str, line: int | None, evidence: str) -> Classification:
    failure = CLASSES[class_id]
    return Classification(class_id, line, evidence, failure.remedy, failure.title)


def scan_text(raw: str) -> str:
    """A raw log line as the rules read it: cut to MAX_SCAN_CHARS, colour codes stripped."""
    return ANSI_CSI.sub("", raw[:MAX_SCAN_CHARS].rstrip("\r\n"))


def match_rule(text: str) -> Rule | None:
    """The first rule (in RULES order) that claims this line, or None.

    Harmless warnings are never evidence, and boilerplate hints are cut out before the rules
    read the line. Lines longer than MAX_SCAN_CHARS are read up to it.
    """
    text = BOILERPLATE.sub(" ", text[:MAX_SCAN_CHARS])
    matched = _RULE_SET.Match(text)
    if not matched or (HARMLESS.search(text) and not NCCL_FATAL_WARN.search(text)):
        return None
    return RULES[min(matched)]


def classify_lines(lines: Iterable[str], *, exit_code: int | None = None) -> Classification:
    """Classify a log given as lines (numbered from 1 in the order given).

    1. Read each line up to MAX_SCAN_CHARS, strip terminal colour codes, and skip harmless
       warnings (they are never evidence).
    2. Match each remaining line against the rules in order; the first rule that matches
       claims the line, so one line is evidence of one class only.
    3. Keep the earliest line of each tier. A ROOT match (a cause: OOM, Xid, full disk, ...)
       ends the scan: whatever follows is the cascade it set off.
    4. Count consecutive fp16 "Gradient overflow" lines; OVERFLOW_STREAK of them in a row is a
       collapsing loss scale (a divergence), while a single one is routine and ignored.
    5. Answer with the earliest line of the lowest tier found: ROOT, then SYMPTOM (NCCL
       timeouts and errors, SIGKILL, SIGSEGV), then a generic exception, then a bare traceback.
    6. A non-ROOT error followed by RECOVERED_AFTER progress lines (epoch, step, loss) and no
       later error did not end the run (a DataLoader worker's segfault the loader survived):
       `none`, unless the exit code says the run failed.
    7. With no ROOT or SYMPTOM evidence, a telling exit code (137, 139) beats a generic
       exception; any other non-zero exit code without evidence is `other`; else `none`.
    """
    best: dict[int, tuple[int, str, str]] = {}
    streak_start: tuple[int, str] | None = None
    streak = 0
    progress_since_error = 0
    for number, raw in enumerate(lines, start=1):
        text = scan_text(raw)
        if OVERFLOW.search(text):
            streak += 1
            if streak == 1:
                streak_start = (number, text)
            if streak >= OVERFLOW_STREAK and streak_start is not None and ROOT not in best:
                best[ROOT] = (streak_start[0], "nan_divergence", streak_start[1])
                break
            continue
        streak = 0
        rule = match_rule(text)
        if rule is None:
            if best and PROGRESS.search(text):
                progress_since_error += 1
            continue
        progress_since_error = 0
        if rule.tier in best:
            continue
        best[rule.tier] = (number, rule.class_id, text)
        if rule.tier == ROOT:
            break

    if best and ROOT not in best and progress_since_error >= RECOVERED_AFTER and not exit_code:
        # Training went on after the last error line: whatever it was, it did not end the run.
        return _verdict("none", None, "")
    for tier in sorted(best):
        if tier > SYMPTOM and exit_code in EXIT_CODE_CLASSES:
            break
        number, class_id, text = best[tier]
        return _verdict(class_id, number, text.strip()[:MAX_EVIDENCE_CHARS])
    if exit_code in EXIT_CODE_CLASSES:
        return _verdict(EXIT_CODE_CLASSES[exit_code], None, f"exit code {exit_code}")
    if exit_code:
        return _verdict("other", None, f"exit code {exit_code}")
    return _verdict("none", None, "")


def classify_text(text: str, *, exit_code: int | None = None) -> Classification:
    """Classify a whole log held in memory; lines are split on "\\n" (a trailing "\\r" is dropped)."""
    return classify_lines(text.split("\n"), exit_code=exit_code)
