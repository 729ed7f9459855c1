"""A stand-in training loop for the demo workloads: prints progress like a real trainer, no GPU needed.

`--warmup-steps 0` is a genuine bug (the warm-up divides by it), so the failing demo ends with a
real Python traceback, the kind the log classifier and post-mortems read.
"""

from __future__ import annotations

import argparse
import math
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="steps per epoch")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup-steps", type=int, default=4)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    args = parser.parse_args()

    print(f"run {os.environ.get('AIRBOARD_RUN_ID', '?')} attempt {os.environ.get('AIRBOARD_ATTEMPT', '?')}")
    step = 0
    for epoch in range(1, args.epochs + 1):
        for _ in range(args.steps):
            step += 1
            lr = args.lr * min(1.0, step / args.warmup_steps)
            loss = 2.5 * math.exp(-0.05 * step) + 0.1
            print(f"epoch {epoch} step {step} lr {lr:.2e} loss {loss:.4f}")
            time.sleep(args.step_seconds)
    print("training done")


if __name__ == "__main__":
    main()
