"""Benchmark: the log classifier's accuracy on real failure logs, split the ways that keep it honest.

    .venv/bin/python bench/classify.py [--corpus DIR] [--wave DIR] [--misses tuning|held-out|both|none]

Classifies every `<class>/<name>.log` of the corpus (default `tests/data/failures`) and of the
fresh wave (default: the newest `wave-<date>/` folder in it, collected after the rules were
frozen), from the log alone, and prints:

1. each part's per-class precision and recall (tuning, held-out, fresh);
2. accuracy by collection wave (SOURCES.md's "Added on <date>" paragraphs);
3. leave-one-ecosystem-out: the rules are written by hand, not fitted, so an ecosystem is "left
   out" when none of its logs taught a rule: each ecosystem's accuracy on the logs no rule was
   tuned on (held-out and fresh), and those logs pooled;
4. the fresh wave's accuracy, measured once, on its own;
5. the evidence line against the recorded root-cause line (ROOT_CAUSES.tsv) on the hits;
6. failed runs called `none` from the log alone, and healthy logs called a failure;
7. the rows that are prose, not logs (no line of program output, `[prose]` in SOURCES.md; see
   `runs.failures.corpus`), measured apart: every figure above is on program output only;
8. the time to classify a 300,000-line log (lines of the healthy logs the classifier calls healthy,
   repeated: the worst case, since a cause ends the scan early; a healthy log it calls a failure
   would make the timing a fast early exit).

Each figure is printed with its target and "met" or "NOT met"; exit status 1 when any is not met.
Held-out and fresh misses are printed only when asked (`--misses held-out`): reading them is
tuning on them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

from runs.failures.classify import classify_lines
from runs.failures.corpus import (
    Result,
    accuracy,
    by,
    evidence_checked,
    failures_called_none,
    false_alarms,
    group_table,
    load_corpus,
    report,
    score,
)

UNSEEN_TARGET = 0.85  # exact class on logs from threads no rule was tuned on
EVIDENCE_TARGET = 0.90  # evidence line = root-cause line, on hits
NONE_TARGET = 0.02  # failed runs called `none`, and healthy logs called a failure
BIG_LINES = 300_000
BIG_SECONDS = 2.0
TIMING_RUNS = 3


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def share(part: list[Result], of: list[Result]) -> str:
    return f"{len(part)}/{len(of)} = {len(part) / len(of):.1%}" if of else "n/a (no logs)"


def big_log(results: list[Result]) -> list[str]:
    # Only logs read through to the end with nothing found: a false alarm among them would stop
    # the scan early and time nothing.
    healthy = [r.case.path for r in results if r.case.label == "none" and r.got == "none"]
    lines: list[str] = []
    for path in healthy:
        lines += path.read_bytes().decode("utf-8", errors="replace").split("\n")
    return (lines * (BIG_LINES // max(len(lines), 1) + 1))[:BIG_LINES]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "failures")
    parser.add_argument("--wave", type=Path, default=None, help="the fresh wave (default: newest wave-* folder)")
    parser.add_argument("--misses", choices=("tuning", "held-out", "both", "none"), default="tuning")
    args = parser.parse_args()
    misses = {"tuning": ("tuning",), "held-out": ("held-out", "fresh"), "both": ("tuning", "held-out", "fresh"),
              "none": ()}[args.misses]  # fmt: skip
    waves = sorted(args.corpus.glob("wave-*/SOURCES.md"))
    wave_dir = args.wave or (waves[-1].parent if waves else None)
    cases = load_corpus(args.corpus) + (load_corpus(wave_dir) if wave_dir else [])
    started = time.perf_counter()
    results = score(cases)
    elapsed = time.perf_counter() - started
    print(report(results, misses_of=misses))
    print(f"{len(results)} logs classified in {elapsed:.2f} s")

    # Prose rows (an issue title or a reporter's sentence in their own words) are not logs: the
    # targets below are on program output; the prose rows are counted on their own line.
    prose = [r for r in results if r.case.prose]
    results = [r for r in results if not r.case.prose]
    print("\n== by collection wave (all parts, program output only)")
    print(group_table(by(results, "wave")))
    unseen = [r for r in results if r.case.part in ("held-out", "fresh")]
    print("\n== leave-one-ecosystem-out: each ecosystem on the logs no rule was tuned on (held-out + fresh)")
    ecosystems = by(unseen, "ecosystem")
    print(group_table(ecosystems))
    under = [
        f"{name} {accuracy(rs):.0%} (n={len(rs)})" for name, rs in ecosystems.items() if accuracy(rs) < UNSEEN_TARGET
    ]
    print(f"ecosystems under {UNSEEN_TARGET:.0%}: {', '.join(under) or 'none'}")
    print("(held-out logs whose misses were read moved to tuning, so the held-out part flatters this; the fresh")
    print(" wave is the clean figure)")
    fresh = [r for r in results if r.case.part == "fresh"]
    checked = evidence_checked([r for r in results if r.case.part in ("fresh", "tuning", "held-out")])
    right = [r for r in checked if r.evidence_is_root_cause]
    fresh_checked = evidence_checked(fresh)
    fresh_right = [r for r in fresh_checked if r.evidence_is_root_cause]
    failed = [r for r in results if r.case.label != "none"]
    healthy = [r for r in results if r.case.label == "none"]
    lines = big_log(results)
    timings = []
    for _ in range(TIMING_RUNS):
        started = time.perf_counter()
        classify_lines(lines)
        timings.append(time.perf_counter() - started)
    big_seconds = min(timings)
    fresh_failed = [r for r in fresh if r.case.label != "none"]

    rows = [
        ("exact class, fresh wave (measured once)", f"{sum(r.correct for r in fresh)}/{len(fresh)} = "
         f"{accuracy(fresh):.1%}" if fresh else "n/a", f">= {UNSEEN_TARGET:.0%}",
         bool(fresh) and accuracy(fresh) >= UNSEEN_TARGET),
        ("exact class, leave-one-ecosystem-out (pooled)", f"{sum(r.correct for r in unseen)}/{len(unseen)} = "
         f"{accuracy(unseen):.1%}", f">= {UNSEEN_TARGET:.0%}", accuracy(unseen) >= UNSEEN_TARGET),
        ("evidence = root-cause line, fresh hits", share(fresh_right, fresh_checked), f">= {EVIDENCE_TARGET:.0%}",
         bool(fresh_checked) and len(fresh_right) / len(fresh_checked) >= EVIDENCE_TARGET),
        ("evidence = root-cause line, all recorded hits", share(right, checked), f">= {EVIDENCE_TARGET:.0%}",
         bool(checked) and len(right) / len(checked) >= EVIDENCE_TARGET),
        ("failed runs called none (log alone), all", share(failures_called_none(failed), failed),
         f"<= {NONE_TARGET:.0%}", len(failures_called_none(failed)) <= NONE_TARGET * len(failed)),
        ("failed runs called none (log alone), fresh", share(failures_called_none(fresh_failed), fresh_failed),
         f"<= {NONE_TARGET:.0%}",
         bool(fresh_failed) and len(failures_called_none(fresh_failed)) <= NONE_TARGET * len(fresh_failed)),
        ("healthy logs called a failure", share(false_alarms(healthy), healthy), f"<= {NONE_TARGET:.0%}",
         len(false_alarms(healthy)) <= NONE_TARGET * len(healthy)),
        (f"{BIG_LINES:,}-line log", f"{big_seconds:.2f} s", f"<= {BIG_SECONDS:.0f} s", big_seconds <= BIG_SECONDS),
    ]  # fmt: skip
    print("\n== prose rows, not logs (measured apart; no target)")
    for part in ("tuning", "held-out", "fresh"):
        rows_of = [r for r in prose if r.case.part == part]
        failed_prose = [r for r in rows_of if r.case.label != "none"]
        print(
            f"{part:<9} {len(rows_of):>3} rows: exact {sum(r.correct for r in rows_of)}/{len(rows_of)},"
            f" failed runs called none {len(failures_called_none(failed_prose))}/{len(failed_prose)}"
        )
    print("\n== targets (issue 32, program output only)")
    width = max(len(name) for name, *_ in rows)
    for name, figure, target, ok in rows:
        print(f"{name:<{width}}  {figure:<22} target {target:<7} {verdict(ok)}")
    print(
        "(a failed run the source reports failed is never `none`: classify_lines(failed=True) answers"
        " `other` with the likeliest root-cause line)"
    )
    load = os.getloadavg()[0]
    print(
        f"(timing: best of {TIMING_RUNS} runs, {', '.join(f'{t:.2f}' for t in timings)} s, on {os.cpu_count()} CPUs"
        f" at load average {load:.1f})"
    )
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
