"""A bounded on-disk buffer of batches the site could not take, drained in order when it is back.

One JSON file per batch, named `<seq>-<samples>.json` so that the order and the sample count
are known without reading it. Over AIRBOARD_AGENT_BUFFER_MAX_BYTES the oldest files go first:
during a long outage of the site the most recent telemetry is the most useful, and a full disk on a
GPU node would hurt the training job itself. Dropped samples are counted (in a small file, so
a restart does not forget them) and reported with the next batch shipped.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
_DROPPED_FILE = "dropped"


class DiskBuffer:
    """Batches as files in `directory`, bounded to `max_bytes` in all."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)

    def files(self) -> list[Path]:
        """Buffered batches, oldest first."""
        return sorted(self.directory.glob("*.json"))

    def __len__(self) -> int:
        return len(self.files())

    def size_bytes(self) -> int:
        return sum(_size(path) for path in self.files())

    @property
    def dropped_samples(self) -> int:
        """Samples dropped over the bound (or unreadable) and not yet reported."""
        try:
            return int((self.directory / _DROPPED_FILE).read_text() or 0)
        except (OSError, ValueError):
            return 0

    def take_dropped(self) -> int:
        """The dropped count, reset to zero: the caller reports it."""
        count = self.dropped_samples
        if count:
            self._write_dropped(0)
        return count

    def add_dropped(self, count: int) -> None:
        """Put back a count that could not be reported after all."""
        if count:
            self._write_dropped(self.dropped_samples + count)

    def append(self, payload: dict[str, Any]) -> None:
        """Write one batch (atomically: temp file, then rename), then enforce the bound."""
        files = self.files()
        seq = int(files[-1].name.split("-", 1)[0]) + 1 if files else 0
        path = self.directory / f"{seq:012d}-{len(payload.get('samples') or [])}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, separators=(",", ":")))
        os.replace(tmp, path)
        self._enforce_bound()

    def drain(self, send: Callable[[dict[str, Any]], None]) -> int:
        """Send buffered batches oldest first, deleting each once sent.

        The first exception from `send` stops the drain and propagates; that batch and the
        rest stay for the next try, so the order holds. Returns how many were sent.
        """
        sent = 0
        for path in self.files():
            try:
                payload = json.loads(path.read_text())
            except (OSError, ValueError):
                logger.warning("buffered batch %s is unreadable; dropped", path.name)
                self._drop(path)
                continue
            send(payload)
            path.unlink(missing_ok=True)
            sent += 1
        return sent

    def _enforce_bound(self) -> None:
        files = self.files()
        total = sum(_size(path) for path in files)
        while files and total > self.max_bytes:
            oldest = files.pop(0)
            total -= _size(oldest)
            self._drop(oldest)
            logger.warning("agent buffer over %d bytes: dropped the oldest batch %s", self.max_bytes, oldest.name)

    def _drop(self, path: Path) -> None:
        self._write_dropped(self.dropped_samples + _samples_in_name(path))
        path.unlink(missing_ok=True)

    def _write_dropped(self, count: int) -> None:
        (self.directory / _DROPPED_FILE).write_text(str(count))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _samples_in_name(path: Path) -> int:
    try:
        return int(path.stem.split("-", 1)[1])
    except (IndexError, ValueError):
        return 0
