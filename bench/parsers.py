"""Benchmark: every parser of user-controlled text on adversarial input, at n, 2n and 4n (issue 33).

    .venv/bin/python bench/parsers.py [--scale 1.0]

Prints seconds per input family and size, and the ratio of each doubling: about 2 means linear,
about 4 quadratic. Best of three runs each, in this process. The sizes at scale 1 are the ones
the issue reproduced (20,000 letters, 20,000 `[`, 40,000 spaces, a 480-byte merge bomb).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django

django.setup()

from runs.failures.postmortem import parse_action_items, render_markdown
from runs.workload.credentials import describe_credential
from runs.workload.schema import WorkloadError, parse_workload

HEAD = "experiment_name: x\ncompute: {accelerator_type: GPU_1xA10, num_accelerators: 1}\ncommand: go\nparameters:\n"


def merge_bomb(levels: int) -> str:
    lines = ["  s0: &s0 {1: x}"]
    lines += [f"  s{i}: &s{i} {{<<: [{', '.join([f'*s{i - 1}'] * 9)}]}}" for i in range(1, 5)]
    lines.append("  l0: &l0 [" + ", ".join(["*s4"] * 9) + "]")
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return HEAD + "\n".join(lines) + "\n"


def workload(text: str) -> None:
    with contextlib.suppress(WorkloadError):
        parse_workload(text)


FAMILIES: dict[str, tuple[int, Callable[[int], object]]] = {
    "credential: letters": (20_000, lambda n: describe_credential("a" * n, "HF_TOKEN")),
    "credential: a{{": (20_000, lambda n: describe_credential("a{{" * (n // 3), "HF_TOKEN")),
    "markdown: [": (5_000, lambda n: render_markdown("[" * n)),
    "markdown: ![": (5_000, lambda n: render_markdown("![" * (n // 2))),
    "markdown: <a ": (5_000, lambda n: render_markdown("<a " * (n // 3))),
    "action items: spaces": (40_000, lambda n: parse_action_items("- [ ] a" + " " * n + "b")),
    "workload: long value": (20_000, lambda n: workload(HEAD + "  k: " + "a{{" * (n // 3) + "\n")),
}


def best_of_three(work: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    print(f"{'family':24} {'n':>9} {'seconds':>9} {'2n/n':>6}")
    for name, (base, make) in FAMILIES.items():
        previous = None
        for factor in (1, 2, 4):
            n = int(base * args.scale * factor)
            seconds = best_of_three(lambda n=n, make=make: make(n))
            ratio = f"{seconds / previous:6.2f}" if previous else ""
            print(f"{name:24} {n:9,} {seconds:9.4f} {ratio:>6}", flush=True)
            previous = seconds
    for levels in (1, 2, 3):
        text = merge_bomb(levels)
        seconds = best_of_three(lambda text=text: workload(text))
        print(f"{'workload: merge bomb':24} {len(text):7,} B {seconds:9.4f}   (aliases 9^{levels + 1})", flush=True)


if __name__ == "__main__":
    main()
