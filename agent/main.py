"""The agent loop: sample every interval, ship once 500 samples wait (or a minute passed), flush on SIGINT/SIGTERM.

    AIRBOARD_URL=https://airboard.example.com AIRBOARD_AGENT_KEY=ab_... \\
        python -m agent --run-id RUN [--node N] [--host H] [--interval S] [--mapping FILE]

Without an NVIDIA driver or GPU it prints one line and exits with code 2, so a launcher that
starts it on every node can tell "nothing to sample here" from a crash.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from agent import PAYLOAD_VERSION
from agent.attribution import RUN_SOURCES, Attributor
from agent.buffer import DEFAULT_MAX_BYTES, DiskBuffer
from agent.nvml import NvmlSampler, NvmlUnavailable
from agent.shipper import HttpSender, Shipper, site_url

logger = logging.getLogger("agent")

EXIT_OK = 0
EXIT_NO_GPU = 2
EXIT_NO_KEY = 3
EXIT_NO_SITE = 4
# Each ship becomes one request, one ingest task and one bulk insert; below a few hundred rows the
# fixed cost (the request, the task, the transaction, the rollup refresh) outweighs the insert. An 8-GPU
# node at 1 Hz fills 500 in about a minute; a smaller node ships at the minute anyway, so its
# charts are never more than a minute behind.
SHIP_MIN_SAMPLES = 500
SHIP_MAX_SECONDS = 60.0
# The most samples one payload carries (a long outage of the site drains in chunks of this size).
SHIP_MAX_SAMPLES = 5000


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise SystemExit(f"airboard agent: {name}={raw!r} is not a number") from None
    if value <= 0:
        raise SystemExit(f"airboard agent: {name} must be positive")
    return value


def _agent_key(key_file: Path | None) -> str:
    """The node's ingest key: from --key-file (kept out of the process list), else AIRBOARD_AGENT_KEY."""
    if key_file is not None:
        try:
            return key_file.read_text().strip()
        except OSError as exc:
            raise SystemExit(f"airboard agent: cannot read --key-file: {exc.strerror or exc}") from None
    return os.environ.get("AIRBOARD_AGENT_KEY", "").strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent", description="Airboard GPU node agent (NVML sampler).")
    parser.add_argument("--run-id", help="Run external id for GPUs no process claims (AIRBOARD_RUN_ID wins).")
    parser.add_argument("--run-source", default="serverless", choices=RUN_SOURCES, help="Source of the run ids.")
    parser.add_argument("--node", type=int, default=0, help="This node's index within the attempt (default 0).")
    parser.add_argument("--attempt", type=int, default=None, help="Attempt number (default: the run's latest).")
    parser.add_argument("--host", default=socket.gethostname(), help="Host name reported for the node.")
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        help="Seconds between samples (default AIRBOARD_AGENT_INTERVAL_SECONDS or 1).",
    )
    parser.add_argument("--ticks", type=int, default=None, help="Stop after this many ticks (tests, smoke checks).")
    parser.add_argument("--once", action="store_true", help="One tick, ship, exit (same as --ticks 1).")
    parser.add_argument(
        "--url",
        default=os.environ.get("AIRBOARD_URL", ""),
        help="The Airboard site's base URL, e.g. https://airboard.example.com (default AIRBOARD_URL).",
    )
    parser.add_argument(
        "--key-file", type=Path, default=None, help="File holding the node's ingest API key (else AIRBOARD_AGENT_KEY)."
    )
    parser.add_argument("--mapping", type=Path, default=None, help='JSON file {"<gpu uuid or index>": "<run id>"}.')
    parser.add_argument(
        "--buffer-dir",
        type=Path,
        default=Path(os.environ.get("AIRBOARD_AGENT_BUFFER_DIR") or Path.home() / ".cache" / "airboard-agent"),
        help="Where batches wait while the site is unreachable.",
    )
    parser.add_argument("--ship-seconds", type=float, default=SHIP_MAX_SECONDS, help=argparse.SUPPRESS)
    parser.add_argument("--ship-min-samples", type=int, default=SHIP_MIN_SAMPLES, help=argparse.SUPPRESS)
    parser.add_argument("--ship-samples", type=int, default=SHIP_MAX_SAMPLES, help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default=os.environ.get("AIRBOARD_AGENT_LOG_LEVEL", "INFO"))
    return parser


class Agent:
    """Holds what one agent process accumulates between ships."""

    def __init__(self, args: argparse.Namespace, sampler: NvmlSampler, shipper: Shipper, attributor: Attributor):
        self.args = args
        self.sampler = sampler
        self.shipper = shipper
        self.attributor = attributor
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.ticks = 0
        self.unattributed = 0

    def tick(self) -> None:
        """Sample every GPU once and keep what belongs to a run."""
        taken = self.sampler.sample_all(datetime.now(UTC))
        kept = self.attributor.attribute(taken)
        self.unattributed += len(taken) - len(kept)
        self.samples += kept
        self.events += self.attributor.attribute_events(self.sampler.take_events())
        self.ticks += 1

    def ship(self, force: bool = False) -> None:
        """Ship what is pending, in batches of at most --ship-samples samples; events ride with the first."""
        if not self.samples and not self.events:
            if force:
                self.shipper.drain(force=True)
            return
        size = max(self.args.ship_samples, 1)
        chunks = [self.samples[i : i + size] for i in range(0, len(self.samples), size)] or [[]]
        for number, chunk in enumerate(chunks):
            self.shipper.ship(self.payload(chunk, self.events if number == 0 else []), force=force)
        self.samples, self.events = [], []

    def payload(self, samples: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
        """The body of `POST /api/v1/gpu-samples?bad_rows=drop` (documented in runs/collectors/agent.py).

        Each sample and event names this node (attempt, index, host), as the API's rows do.
        """
        where = {"attempt": self.args.attempt, "node": self.args.node, "host": self.args.host}
        return {
            "version": PAYLOAD_VERSION,
            "source": "nvml",
            "host": self.args.host,
            "sent_at": datetime.now(UTC).isoformat(),
            "dropped_samples": 0,
            "samples": [{**sample, **where} for sample in samples],
            "events": [{**event, **where} for event in events],
        }


def main(
    argv: Sequence[str] | None = None,
    *,
    nvml: ModuleType | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run the agent; returns the process exit code. `nvml` defaults to pynvml."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="airboard agent: %(levelname)s %(message)s")
    interval = args.interval or _env_float("AIRBOARD_AGENT_INTERVAL_SECONDS", 1.0)
    max_bytes = int(_env_float("AIRBOARD_AGENT_BUFFER_MAX_BYTES", DEFAULT_MAX_BYTES))
    ticks = 1 if args.once else args.ticks
    try:
        attributor = Attributor(args.run_id, args.run_source, args.mapping)
    except ValueError as exc:
        print(f"airboard agent: {exc}", file=sys.stderr)
        return EXIT_NO_GPU

    sampler = NvmlSampler(nvml)
    try:
        sampler.open()
    except NvmlUnavailable as exc:
        print(f"airboard agent: {exc}: nothing to sample", file=sys.stderr)
        return EXIT_NO_GPU

    key = _agent_key(args.key_file)
    if not key:
        sampler.close()
        print(
            "airboard agent: no key: set AIRBOARD_AGENT_KEY (or --key-file) to an ingest API key of the node's "
            "team (manage.py create_api_key --team T --role ingest); the site refuses batches without one",
            file=sys.stderr,
        )
        return EXIT_NO_KEY

    try:
        url = site_url(args.url)
    except ValueError as exc:
        sampler.close()
        print(f"airboard agent: {exc}: set AIRBOARD_URL (or --url) to the site's base URL", file=sys.stderr)
        return EXIT_NO_SITE

    stop = stop or threading.Event()
    restore = _install_signal_handlers(stop)
    shipper = Shipper(HttpSender(url, key), DiskBuffer(args.buffer_dir, max_bytes))
    agent = Agent(args, sampler, shipper, attributor)
    logger.info("sampling %d GPU(s) every %.3g s on %s node %d", len(sampler.gpus), interval, args.host, args.node)
    try:
        _loop(agent, interval, ticks, stop)
    finally:
        agent.ship(force=True)  # SIGINT/SIGTERM, --ticks done, or all GPUs lost: flush first
        sampler.close()
        shipper.close()
        restore()
        buffered = len(shipper.buffer)
        logger.info("stopped after %d tick(s): %d batch(es) sent, %d buffered on disk, %d unattributed sample(s)",
                    agent.ticks, shipper.sent, buffered, agent.unattributed)  # fmt: skip
    return EXIT_OK


def _loop(agent: Agent, interval: float, ticks: int | None, stop: threading.Event) -> None:
    last_ship = time.monotonic()
    next_tick = time.monotonic()
    while not stop.is_set():
        agent.tick()
        if not agent.sampler.gpus:
            logger.error("no GPU left to sample (all lost); stopping")
            return
        due = time.monotonic() - last_ship >= agent.args.ship_seconds
        # A GPU falling off the bus or an XID goes out at once, with what is pending.
        if len(agent.samples) >= agent.args.ship_min_samples or due or agent.events:
            agent.ship()
            last_ship = time.monotonic()
        if ticks is not None and agent.ticks >= ticks:
            return
        # Fixed cadence; a tick that ran late (a slow ship) skips ahead rather than bunching up.
        next_tick += interval
        now = time.monotonic()
        if next_tick < now:
            next_tick = now
        stop.wait(next_tick - now)


def _install_signal_handlers(stop: threading.Event) -> Any:
    """SIGINT/SIGTERM set `stop`; returns a function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: flushing and exiting", signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
