"""Which run each GPU works for: a process's AIRBOARD_RUN_ID, else --run-id, else a mapping file.

1. A compute process on the GPU whose environment holds AIRBOARD_RUN_ID (read from
   /proc/<pid>/environ; processes of other users are unreadable and simply skipped). The
   process using the most GPU memory wins when several runs share a GPU.
2. The run id given on the command line (a node dedicated to one run).
3. A JSON file a launcher writes, {"<gpu uuid or index>": "<run external id>"}; re-read when
   it changes, so a launcher may rewrite it while the agent runs.
Samples of a GPU attributed to no run are not shipped: the server cannot store them.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

logger = logging.getLogger(__name__)

RUN_ID_VAR = "AIRBOARD_RUN_ID"
RUN_SOURCE_VAR = "AIRBOARD_RUN_SOURCE"
RUN_SOURCES = ("serverless", "classic", "local")
# The server's ExternalId: 1..200 characters, no whitespace or slash.
_EXTERNAL_ID = re.compile(r"^[^\s/]{1,200}$")


@dataclass(frozen=True)
class RunRef:
    """A run as the server looks it up: (source, external id)."""

    run: str
    source: str


def read_environ(pid: int, proc_root: Path = Path("/proc")) -> dict[str, str]:
    """A process's environment, or {} when it is gone, another user's, or not on Linux."""
    try:
        raw = (proc_root / str(pid) / "environ").read_bytes()
    except OSError:  # PermissionError for other users' processes, FileNotFoundError once it exits
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _valid(run: Any) -> TypeGuard[str]:
    return isinstance(run, str) and bool(_EXTERNAL_ID.match(run))


class Attributor:
    """Sets `run` and `run_source` on samples (and `run` on their processes) tick by tick."""

    def __init__(
        self,
        run_id: str | None = None,
        run_source: str = "serverless",
        mapping_path: Path | None = None,
        proc_root: Path = Path("/proc"),
    ) -> None:
        if run_id is not None and not _valid(run_id):
            raise ValueError(f"run id {run_id!r} is not a valid external id (no spaces or '/', 1-200 chars)")
        if run_source not in RUN_SOURCES:
            raise ValueError(f"run source {run_source!r} is not one of {', '.join(RUN_SOURCES)}")
        self.run_id = run_id
        self.run_source = run_source
        self.mapping_path = mapping_path
        self.proc_root = proc_root
        self._mapping: dict[str, RunRef] = {}
        self._mapping_mtime: float | None = None
        self._env_cache: dict[int, RunRef | None] = {}
        self._last: dict[int, RunRef] = {}

    def attribute(self, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fill in each sample's run; returns the samples that have one, in the same order."""
        self._reload_mapping()
        seen_pids: set[int] = set()
        kept = []
        for sample in samples:
            from_process = None
            processes = sample.get("processes") or []
            # Biggest user of GPU memory first: its run is the GPU's run when several share it.
            for proc in sorted(processes, key=lambda p: -(p.get("used_memory_bytes") or 0)):
                seen_pids.add(proc["pid"])
                ref = self._process_run(proc["pid"])
                proc["run"] = ref.run if ref else ""
                if ref and from_process is None:
                    from_process = ref
            ref = from_process or self._fallback(sample["gpu"], sample.get("gpu_uuid", ""))
            if ref is None:
                continue
            self._last[sample["gpu"]] = ref
            sample["run"], sample["run_source"] = ref.run, ref.source
            kept.append(sample)
        # Forget exited processes, so a recycled pid is read afresh.
        self._env_cache = {pid: ref for pid, ref in self._env_cache.items() if pid in seen_pids}
        return kept

    def attribute_events(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Events go to the run the GPU last worked for (a lost GPU has no sample of its own)."""
        kept = []
        for event in events:
            gpu = event.get("gpu")
            ref = self._last.get(gpu) if gpu is not None else None
            ref = ref or self._fallback(gpu, event.get("gpu_uuid", ""))
            if ref is None:
                logger.warning("event %s on GPU %s belongs to no known run; not shipped", event["kind"], gpu)
                continue
            event["run"], event["run_source"] = ref.run, ref.source
            kept.append(event)
        return kept

    def _process_run(self, pid: int) -> RunRef | None:
        if pid not in self._env_cache:
            env = read_environ(pid, self.proc_root)
            run = env.get(RUN_ID_VAR)
            source = env.get(RUN_SOURCE_VAR) or self.run_source
            ok = _valid(run) and source in RUN_SOURCES
            self._env_cache[pid] = RunRef(run, source) if ok else None  # type: ignore[arg-type]
        return self._env_cache[pid]

    def _fallback(self, gpu: int | None, uuid: str) -> RunRef | None:
        if self.run_id:
            return RunRef(self.run_id, self.run_source)
        if uuid and uuid in self._mapping:
            return self._mapping[uuid]
        if gpu is not None:
            return self._mapping.get(str(gpu))
        return None

    def _reload_mapping(self) -> None:
        """Re-read the mapping file when its mtime changes; a bad file keeps the previous mapping."""
        if self.mapping_path is None:
            return
        try:
            mtime = self.mapping_path.stat().st_mtime
        except OSError:
            if self._mapping:
                logger.warning("mapping file %s is gone; GPUs it named are unattributed", self.mapping_path)
            self._mapping, self._mapping_mtime = {}, None
            return
        if mtime == self._mapping_mtime:
            return
        try:
            raw = json.loads(self.mapping_path.read_text())
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            logger.warning("mapping file %s unreadable (%s); keeping the previous mapping", self.mapping_path, exc)
            return
        mapping = {}
        for key, value in raw.items():
            # A value is a run id, or {"run": id, "source": "classic"} for a non-default source.
            run, source = (value.get("run"), value.get("source", self.run_source)) if isinstance(value, dict) else (
                value, self.run_source)  # fmt: skip
            if _valid(run) and source in RUN_SOURCES:
                mapping[str(key)] = RunRef(run, source)
            else:
                logger.warning("mapping file %s: entry %r ignored (bad run id or source)", self.mapping_path, key)
        self._mapping, self._mapping_mtime = mapping, mtime
