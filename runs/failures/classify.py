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
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import re2

from runs.failures import families
from runs.failures.rules import (
    BARE_EXCEPTION,
    BOILERPLATE,
    CLASSES,
    EXIT_CODE_CLASSES,
    FRAME,
    HARMLESS,
    IPYTHON_HEADER,
    KILL_REASON_LINES,
    KILL_REASONS,
    LINE_PREFIX,
    NATIVE_FRAME,
    NCCL_FATAL_WARN,
    OVERFLOW,
    OVERFLOW_STREAK,
    PROGRESS,
    RECOVERED_AFTER,
    ROOT,
    SYMPTOM,
    TAIL_LINES,
    TRACEBACK,
    WEAK_ERROR,
    Rule,
    compile_linear,
)
from runs.failures.rules_table import RULES

# Terminal colour codes (tqdm, rich) would split words the patterns look for.
ANSI_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# Evidence is shown in a terminal and on a page; a 50 MB line (a dumped tensor) must not be.
MAX_EVIDENCE_CHARS = 1_000
# Characters of a line the rules read. Every cause a rule looks for is named in the first few
# hundred characters of its line; the rest of a 50 MB line (a dumped tensor, a progress bar
# redrawn with "\r") is never searched, so the time per line is bounded whatever the log holds.
MAX_SCAN_CHARS = 4_000


# Memory RE2 may use for the set's automaton (its default, 8 MiB, is too small for every
# family's wordings: the DFA would rebuild its state cache line after line).
SET_MAX_MEM = 256 << 20

# What else one pass over a line says, after the rules' indices in the set.
_HARMLESS, _NCCL_FATAL, _BOILERPLATE, _PROGRESS, _OVERFLOW, _FRAME, _IPYTHON_HEADER, _NATIVE, _INFO = range(9)
# A logger's INFO or DEBUG level: such a line reports, it is not a collective's failure (NCCL's
# "Connection closed by localRank" at INFO is its normal shutdown).
INFO_LEVEL = compile_linear(r"(?-i:\b(INFO|DEBUG)\b)")
_FLAGS = (HARMLESS, NCCL_FATAL_WARN, BOILERPLATE, PROGRESS, OVERFLOW, FRAME, IPYTHON_HEADER, NATIVE_FRAME, INFO_LEVEL)
_COLLECTIVE = frozenset({"nccl_error", "nccl_timeout"})
# The abnormal-end fallback (families.ABNORMAL_END): a tail line at error level with a word of failure.
ABNORMAL_END = compile_linear(families.ABNORMAL_END)
LAUNCHER_KILL = compile_linear(families.LAUNCHER_KILL)
NOT_AN_ERROR = compile_linear(families.NOT_AN_ERROR)
INFO_SOCKET_FAILED = compile_linear(families.INFO_SOCKET_FAILED)


def _line_set() -> re2.Set:
    # Every rule and every other line pattern in one RE2 set: a single linear pass over a line
    # (about a microsecond) says which rules match it and what kind of line it is. The Python
    # wrapper's per-call cost (tens of microseconds on long lines) is paid once a line, not ten times.
    options = re2.Options()
    options.max_mem = SET_MAX_MEM
    compiled = re2.Set.SearchSet(options)
    for rule in RULES:
        compiled.Add("(?i)" + rule.source)
    for flag in _FLAGS:
        compiled.Add(flag.pattern)
    compiled.Compile()
    return compiled


_LINE_SET = _line_set()
# The compiled set's own Match, called with UTF-8 bytes: the wrapper's method re-encodes and
# re-dispatches on every call, a third of the time per line on a healthy log.
_MATCH = _LINE_SET._set.Match
_N_RULES = len(RULES)
_NO_FLAGS: frozenset[int] = frozenset()
# The indices (into RULES) of the rules that still read a warning line.
_IN_WARNING = frozenset(i for i, rule in enumerate(RULES) if rule.in_warning)
# Prefix stripping stops after this many prefixes ("[rank0]:[2024-..] ..." is two).
MAX_PREFIXES = 4
# Characters of each side read when a message is split over two lines; only a line at least
# WRAP_CHARS long or one that opened an error can continue on the next.
JOIN_CHARS = 200
WRAP_CHARS = 80


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
    text = raw[:MAX_SCAN_CHARS].rstrip("\r\n")
    return ANSI_CSI.sub("", text) if "\x1b" in text else text


def strip_prefixes(text: str) -> str:
    """The line without the rank, actor, timestamp and quote prefixes before the message
    (`LINE_PREFIX`); the indentation after the last prefix is kept (it tells a traceback's source
    lines from its messages)."""
    for _ in range(MAX_PREFIXES):
        match = LINE_PREFIX.search(text)
        if match is None or not match.end():
            break
        text = text[match.end() :]
    return text


def _read(text: str) -> tuple[Rule | None, frozenset[int]]:
    """The first rule (in RULES order) that claims a line, or None, and the line's flags.

    Boilerplate hints are cut out first. A harmless warning is read only by the rules whose cause
    a warning can carry (`Rule.in_warning`) and, for NCCL's transport failures, NCCL_FATAL_WARN.
    """
    hits = _MATCH(text.encode())
    if not hits:
        return None, _NO_FLAGS
    flags = frozenset(i - _N_RULES for i in hits if i >= _N_RULES) if max(hits) >= _N_RULES else _NO_FLAGS
    if _BOILERPLATE in flags:
        text = BOILERPLATE.sub(" ", text)
        hits = _MATCH(text.encode()) or []
        flags = frozenset(i - _N_RULES for i in hits if i >= _N_RULES)
    matched = [i for i in hits if i < _N_RULES]
    if matched and _HARMLESS in flags and _NCCL_FATAL not in flags:
        matched = [i for i in matched if i in _IN_WARNING]
    if matched and _INFO in flags and _NCCL_FATAL not in flags:
        matched = [i for i in matched if RULES[i].class_id not in _COLLECTIVE]
    return (RULES[min(matched)] if matched else None), flags


def match_rule(text: str) -> Rule | None:
    """The first rule (in RULES order) that claims this line, or None.

    The line is read up to MAX_SCAN_CHARS, its rules anchored after any rank, actor, timestamp
    or quote prefixes; a traceback's frame line is never evidence.
    """
    rule, flags = _read(text[:MAX_SCAN_CHARS])
    return None if _FRAME in flags else rule


def _indent(text: str) -> int:
    key = strip_prefixes(text)
    return len(key) - len(key.lstrip())


def _likeliest_line(tail: Iterable[tuple[int, str]]) -> tuple[int, str] | None:
    """The likeliest root-cause line of a failed run no rule explains: the first line of the
    log's tail with an error word (WEAK_ERROR), else the tail's last line."""
    last = None
    for number, text in tail:
        if WEAK_ERROR.search(text):
            return number, text
        last = (number, text)
    return last


def _abnormal_end(tail: Iterable[tuple[int, str]]) -> tuple[int, str] | None:
    """The first line of the log's tail that says the run ended abnormally although no rule
    named a cause: a word of failure at error level (not INFO or DEBUG, not "0 errors"), or a
    launcher killing its workers."""
    for number, text in tail:
        if LAUNCHER_KILL.search(text) or (ABNORMAL_END.search(text) and not NOT_AN_ERROR.search(text)):
            return number, text
    return None


def _continues(previous: tuple[int, str, Rule | None, frozenset[int]], text: str) -> bool:
    """Whether a line reads as the rest of the one before: it starts in lower case (a word or a
    sentence cut by a wrap), or it is indented under an error line."""
    first = text[:1]
    return first.islower() or (first.isspace() and previous[2] is not None)


def _joined(previous: tuple[int, str, Rule | None, frozenset[int]], text: str) -> Rule | None:
    """The ROOT or SYMPTOM rule that a message split over two lines matches only when joined."""
    head = previous[1]
    if _BOILERPLATE in previous[3]:
        head = BOILERPLATE.sub(" ", head)
    head = head[-JOIN_CHARS:]
    rest = text.lstrip()[:JOIN_CHARS]
    # A word cut in two ("an illeg" / "al memory") joins as it was; whole words with a space.
    for glue in ("", " "):
        rule, _ = _read(head + glue + rest)
        if rule is not None and rule.tier <= SYMPTOM:
            return rule
    return None


def _read_joined(
    previous: tuple[int, str, Rule | None, frozenset[int]], rule: Rule | None, number: int, text: str
) -> tuple[Rule | None, int, str]:
    """The rule, line number and text of a line that continues `previous`: the rule a message split
    over the two lines matches only when joined, with the line that best shows it as evidence."""
    joined = _joined(previous, text)
    if joined is None or (previous[2] is not None and previous[2].tier <= SYMPTOM):
        return rule, number, text
    if len(previous[1]) <= JOIN_CHARS:
        # The message starts on a short line ("RuntimeError: CUDA error: an"): the
        # evidence is that line. A long wrapped line's tail is what continues here,
        # so this line shows the cause better.
        return joined, previous[0], previous[1]
    return joined, number, text


def _completes_root(kind: str, rule: Rule, header: bool) -> bool:
    """Whether a later ROOT line completes the ROOT evidence of class `kind`: the message an
    IPython header announced, or the reason a scheduler gives for its kill."""
    return (header and kind == rule.class_id) or (kind == "cancelled" and rule.class_id in KILL_REASONS)


def _after_root(rule: Rule, number: int, text: str, flags: frozenset[int]) -> tuple[bool, int | None, bool]:
    """How far to read on after the first ROOT line: (bare, open_until, warned); all three false
    or None mean the scan ends at this line.

    IPython's traceback header ("ResourceExhaustedError   Traceback (most recent call
    last)") names the exception; its message comes at the traceback's end. Read on
    for that message, keeping the header if the excerpt ends first. A scheduler's
    deletion or cancel line is often followed by its reason ("job deleted" then
    "job exceeded wallclock limit"): read KILL_REASON_LINES more lines for one.
    """
    if BARE_EXCEPTION.search(text):
        return True, None, False
    if _IPYTHON_HEADER in flags:
        return False, sys.maxsize, False
    if rule.class_id == "cancelled":
        return False, number + KILL_REASON_LINES, False
    if _HARMLESS in flags:
        # A cause a warning carries (an OOM in an NCCL WARN): read on, since training
        # that goes on after it (RECOVERED_AFTER progress lines) means the warning was
        # survived, and a later error line is still the cascade it set off.
        return False, None, True
    return False, None, False


def _decide(
    best: dict[int, tuple[int, str, str]],
    tail: deque[tuple[int, str]],
    *,
    exit_code: int | None,
    failed: bool,
    recovered: bool,
    warned: bool,
) -> Classification:
    """The verdict from what the scan kept (steps 5 to 10 of `classify_lines`): the earliest line
    of each tier in `best`, the log's tail, and whether training went on after the last error."""
    run_failed = failed or bool(exit_code)
    if best and (ROOT not in best or warned) and recovered and not run_failed:
        # Training went on after the last error line: whatever it was, it did not end the run.
        return _verdict("none", None, "")
    for tier in sorted(best):
        if tier > SYMPTOM and exit_code in EXIT_CODE_CLASSES:
            break
        number, class_id, text = best[tier]
        return _verdict(class_id, number, text.strip()[:MAX_EVIDENCE_CHARS])
    if exit_code in EXIT_CODE_CLASSES:
        return _verdict(EXIT_CODE_CLASSES[exit_code], None, f"exit code {exit_code}")
    refused = next(((n, t) for n, t in tail if INFO_SOCKET_FAILED.search(t)), None)
    if refused is not None:
        # A collective's socket call failing at INFO level, with nothing else to explain the end.
        return _verdict("nccl_error", refused[0], refused[1].strip()[:MAX_EVIDENCE_CHARS])
    if run_failed:
        likeliest = _likeliest_line(tail)
        if likeliest is not None:
            return _verdict("other", likeliest[0], likeliest[1].strip()[:MAX_EVIDENCE_CHARS])
    ended = _abnormal_end(tail)
    if ended is not None:
        # No rule named a cause, but the log's tail reads as a failure: an unrecognised one.
        return _verdict("other", ended[0], ended[1].strip()[:MAX_EVIDENCE_CHARS])
    if exit_code:
        return _verdict("other", None, f"exit code {exit_code}")
    if failed:
        return _verdict("other", None, "the run source reports the run as failed")
    return _verdict("none", None, "")


def classify_lines(lines: Iterable[str], *, exit_code: int | None = None, failed: bool = False) -> Classification:
    """Classify a log given as lines (numbered from 1 in the order given).

    1. Read each line up to MAX_SCAN_CHARS, strip terminal colour codes; rules anchored at a
       line's start are anchored after its rank, actor, timestamp and quote prefixes. A
       traceback's frame lines and the source lines they quote are never evidence.
    2. Match each remaining line against the rules in order; the first rule that matches
       claims the line, so one line is evidence of one class only. A warning line is read only
       for the causes a warning can carry (an OOM inside an NCCL WARN, a full disk inside a
       UserWarning). A message split over two lines is read joined, and its first line is the
       evidence.
    3. Keep the earliest line of each tier. A ROOT match (a cause: OOM, Xid, full disk, ...)
       ends the scan: whatever follows is the cascade it set off. A cause a warning carries
       reads on: training that outlives it (step 6) means the warning was survived.
    4. Count consecutive fp16 "Gradient overflow" (or NaN gradient norm) lines; OVERFLOW_STREAK
       of them in a row is a collapsing loss scale (a divergence), while a single one is routine.
    5. Answer with the earliest line of the lowest tier found: ROOT, then SYMPTOM (NCCL
       timeouts and errors, SIGKILL, SIGSEGV), then a generic exception, then an abnormal end
       (a bare traceback, a signal, a non-zero exit status, a scheduler's kill).
    6. A non-ROOT error (or a cause inside a warning) followed by RECOVERED_AFTER progress
       lines (epoch, step, loss) and no
       later error did not end the run (a DataLoader worker's segfault the loader survived):
       `none`, unless the exit code or `failed` says the run failed.
    7. With no ROOT or SYMPTOM evidence, a telling exit code (137, 139) beats a generic
       exception; any other non-zero exit code without evidence is `other`.
    8. A run the source reports failed (`failed=True`) is never `none`: with no evidence it is
       `other` (an unrecognised failure) with the likeliest root-cause line of the log's tail.
    9. A collective's socket call failing at INFO level in the log's tail (NCCL's "Call to connect
       returned Connection refused") with no other evidence: `nccl_error` with that line.
    10. With no evidence and no failed status, a log whose tail (since its last progress line) has
       a line with a word of failure at error level (families.ABNORMAL_END; not INFO, DEBUG or
       warning level, not "0 errors") ended abnormally: `other` with that line, never `none`.
    """
    best: dict[int, tuple[int, str, str]] = {}
    streak_start: tuple[int, str] | None = None
    streak = 0
    progress_since_error = 0
    frame_indent: int | None = None  # the indentation of the last frame line, while its source lasts
    # The last line read, if it may continue on this one: number, text, rule.
    previous: tuple[int, str, Rule | None, frozenset[int]] | None = None
    tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
    header = False  # the ROOT evidence so far is an IPython traceback header
    open_until: int | None = None  # a later line may still name the ROOT's reason, up to this one
    framed: dict[int, tuple[int, str, str]] = {}  # the earliest native-frame match of each tier
    bare = False  # the ROOT evidence so far is an exception's name whose message is on the next line
    warned = False  # the ROOT evidence so far is a cause inside a warning line
    for number, raw in enumerate(lines, start=1):
        if open_until is not None and number > open_until:
            break
        text = scan_text(raw)
        if not text or text.isspace():
            previous = None
            continue
        if bare:
            # "ImportError:" alone on its line: its message is this line, the better evidence.
            best[ROOT] = (number, best[ROOT][1], text)
            break
        rule, flags = _read(text)
        if _FRAME in flags:
            frame_indent = _indent(text)
            previous = None
            tail.append((number, text))
            # A traceback, even one cut before its message, is an abnormal end.
            best.setdefault(TRACEBACK, (number, "other", text))
            continue
        if frame_indent is not None and _indent(text) > frame_indent:
            # The source a frame quotes: its lines (Python 3.11+ shows a statement's every
            # line) and the carets under them, all indented deeper than the frame line.
            previous = None
            continue
        frame_indent = None
        if _OVERFLOW in flags and (rule is None or rule.tier != ROOT):
            streak += 1
            if streak == 1:
                streak_start = (number, text)
            if streak >= OVERFLOW_STREAK and streak_start is not None and ROOT not in best:
                best[ROOT] = (streak_start[0], "nan_divergence", streak_start[1])
                break
            continue
        streak = 0
        if previous is not None and (rule is None or rule.tier > SYMPTOM) and _continues(previous, text):
            rule, number, text = _read_joined(previous, rule, number, text)
        # A line may continue on the next when it opened an error or is long enough to have
        # been wrapped (a progress bar redrawn in place is long but never continues).
        may_continue = rule is not None or (len(text) >= WRAP_CHARS and _PROGRESS not in flags)
        previous = (number, text, rule, flags) if may_continue else None
        if rule is None:
            if _PROGRESS in flags:
                tail.clear()
                if best:
                    progress_since_error += 1
            else:
                tail.append((number, text))
            continue
        tail.append((number, text))
        progress_since_error = 0
        if _NATIVE in flags:
            # A native frame names a cause only when no line of output does (see NATIVE_FRAME).
            framed.setdefault(rule.tier, (number, rule.class_id, text))
            continue
        if rule.tier in best:
            if rule.tier == ROOT and open_until is not None and _completes_root(best[ROOT][1], rule, header):
                # The message the header announced; the reason a scheduler gives for its kill.
                best[ROOT] = (number, rule.class_id, text)
                break
            continue
        best[rule.tier] = (number, rule.class_id, text)
        if rule.tier == ROOT:
            header = _IPYTHON_HEADER in flags
            bare, open_until, warned = _after_root(rule, number, text, flags)
            if not (bare or warned or open_until is not None):
                break

    for tier, found in framed.items():
        best.setdefault(tier, found)
    return _decide(
        best, tail, exit_code=exit_code, failed=failed, recovered=progress_since_error >= RECOVERED_AFTER, warned=warned
    )


def classify_text(text: str, *, exit_code: int | None = None, failed: bool = False) -> Classification:
    """Classify a whole log held in memory; lines are split on "\\n" (a trailing "\\r" is dropped)."""
    return classify_lines(text.split("\n"), exit_code=exit_code, failed=failed)
