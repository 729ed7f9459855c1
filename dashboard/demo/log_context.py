"""What a demo node's log depends on (`LogContext`), the failure kinds the demo uses, and the
line formats both the training log and the failure tails print (glog, host names, clocks).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime

from dashboard.demo.series import TrainingCurve

SITE = "/databricks/python/lib/python3.11/site-packages"
CODE = "/local_disk0/code_source"
LINES_PER_CHUNK = 25
KERNEL_LINE = re.compile(r"\[\s*\d+\.\d{6}\] ")
# Sizes (GiB) a failing CUDA allocation asks for: activations, logits, optimizer state.
OOM_ALLOCATIONS = (0.5, 1.0, 1.95, 2.0, 3.91, 4.0, 7.81)


@dataclass(frozen=True)
class Failure:
    """One way an attempt dies: its exit code and the one-line message the source reports."""

    kind: str
    exit_code: int
    message: str


# The failure kinds the demo uses; `message` is what Attempt.state_message says.
FAILURES: dict[str, Failure] = {
    f.kind: f
    for f in (
        Failure("cuda_oom", 1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB."),
        Failure("nccl_timeout", 1, "NCCL watchdog timeout: WorkNCCL(OpType=ALLREDUCE) ran for 600012 ms (rank {rank})"),
        Failure("illegal_memory_access", 1, "RuntimeError: CUDA error: an illegal memory access was encountered"),
        Failure("device_assert", 1, "RuntimeError: CUDA error: device-side assert triggered"),
        Failure("host_oom", 137, "Process killed by the kernel OOM killer (exit code 137): host memory exhausted"),
        Failure("xid79", 1, "Node {host} lost a GPU (Xid 79: GPU has fallen off the bus)"),
        Failure("module_not_found", 1, "ModuleNotFoundError: No module named 'databricks_genai'"),
        Failure("nan_loss", 1, "FloatingPointError: Loss is nan at step {step}"),
        Failure("disk_full", 1, "OSError: [Errno 28] No space left on device"),
        Failure("result_too_large", 1, "The run's returned result was too large to serialize back to the driver"),
        Failure("segfault", 139, "Worker process crashed with signal 11 (SIGSEGV)"),
    )
}


@dataclass(frozen=True)
class LogContext:
    """Everything one node's log depends on."""

    experiment: str
    family: str  # nlp, vision or speech
    accelerator_type: str
    gpus_per_node: int
    hosts: tuple[str, ...]  # every node of the attempt; hosts[0] runs the rendezvous
    node_index: int
    attempt: int
    start: datetime
    end: datetime  # the attempt's end, or now while it runs
    status: str  # the attempt's RunStatus
    failure: str | None
    failed_node: int
    failed_local_rank: int
    curve: TrainingCurve
    checkpoint_dir: str
    oom_alloc_gib: float = 2.0
    source: str = "serverless"

    @property
    def distributed(self) -> bool:
        return len(self.hosts) * self.gpus_per_node > 1

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.gpus_per_node

    @property
    def failed_rank(self) -> int:
        return self.failed_node * self.gpus_per_node + self.failed_local_rank

    @property
    def is_failing_node(self) -> bool:
        return self.failure is not None and self.node_index == self.failed_node


def checkpoint_dir(team: str, experiment_name: str, mlflow_run_id: str) -> str:
    """Where an attempt saves its checkpoints: the seed's logs and the live demo's name the same folder."""
    slug = experiment_name.rstrip("/").rsplit("/", 1)[-1]
    return f"/Volumes/main/{team}/checkpoints/{slug}/{mlflow_run_id[:8]}"


def glog_line(level: str, ts: datetime, pid: int, where: str, message: str) -> str:
    """A line in the glog format torch.distributed uses: W0312 09:14:07.512000 140235 file:line] msg."""
    return f"{level}{ts:%m%d %H:%M:%S}.{ts.microsecond:06d} {pid} {where}] {message}"


def ip_host_name(host: str) -> str:
    return "ip-" + host.replace(".", "-")


def random_pid(rng: random.Random) -> int:
    return rng.randint(180, 4000)


def clock_text(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"
