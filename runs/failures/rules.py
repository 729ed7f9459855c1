"""The failure classes, the tiers and the line filters the classifier reads, for `runs.failures.classify`.

Kept apart from the scanning algorithm so that adding a pattern or rewording a remedy never
touches the ordering logic. The rule table itself is `runs.failures.rules_table` (causes in
`runs.failures.rules_causes`). Every pattern here was written against the labelled corpus in
`tests/data/failures/` (real excerpts from public bug reports, see its SOURCES.md) and is
measured by `tests/runs/failures/test_classify.py`: change one, rerun the corpus test.

Rules come in tiers, because a crashed distributed job prints its cause once and its
consequences many times:

* ROOT (tier 0): messages that name a cause (CUDA OOM, an Xid, a full disk, ...).
* SYMPTOM (tier 1): messages that other failures trigger: an NCCL watchdog timeout after one
  rank died of OOM, a SIGKILL/SIGSEGV reported by torchrun, an NCCL error.
* GENERIC (tiers 2 and 3): an exception line or a bare traceback with none of the above.

The classifier picks the earliest line of the lowest tier present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import re2

from runs.failures import families

ROOT = 0
SYMPTOM = 1
EXCEPTION = 2
TRACEBACK = 3


@dataclass(frozen=True)
class FailureClass:
    """A failure class as a person reads it: a short title and what to do about it."""

    class_id: str
    title: str
    remedy: str


class LineMatch(Protocol):
    def end(self) -> int: ...


class LinePattern(Protocol):
    """What the classifier needs of a compiled pattern (an RE2 regexp)."""

    @property
    def pattern(self) -> str: ...
    def search(self, text: str) -> LineMatch | None: ...
    def sub(self, repl: str, text: str) -> str: ...


@dataclass(frozen=True)
class Rule:
    """One pattern: a line matching `pattern` is evidence of `class_id` at `tier`."""

    class_id: str
    tier: int
    pattern: LinePattern
    source: str
    # A cause that still counts inside a warning line (an NCCL WARN, a UserWarning): an OOM, a
    # device assert, a full disk, a KeyboardInterrupt reported by a warning is still the cause.
    in_warning: bool = False


def compile_linear(*alternatives: str) -> LinePattern:
    """One case-insensitive RE2 pattern matching any of `alternatives`.

    RE2 matches in time linear in the line whatever the pattern (no backtracking), so a hostile
    or freak line (40,000 dots, a dumped tensor) costs microseconds, not minutes. A pattern that
    must keep its case (TIMEDOUT, CANCELLED) says so with a scoped `(?-i:...)` group.
    """
    return re2.compile("(?i)" + "|".join(f"(?:{alternative})" for alternative in alternatives))


# Prefixes that launchers, loggers and schedulers put before a process's own output: a rank
# ("[rank3]:", "[default0]:", "rank0: "), Horovod/MPI ("[1,0]<stderr>:"), a Ray actor
# ("(RayTrainWorker pid=123, ip=10.0.0.1)"), a timestamp, a quoted reply ("> "), a line number
# of a pasted log ("[1763] "). A rule anchored at the start of a line ("^MemoryError") is
# anchored after any number of them (START), so it sees the message; the evidence shown is
# still the whole line.
LINE_PREFIXES = (
    r"\[?rank\s?\d+\]?\s?[:>]",
    r"\[default\d+\]:",
    r"\[\d+(,\d+)*\]<std(out|err)>:",
    r"\((\w+ )?pid=\d+(, ip=[\d.]+)?\)",
    r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d([.,]\d+)?(Z|[+-]\d\d:?\d\d)?\]?( ?[|:-])?",
    r"\[\d\d:\d\d:\d\d([.,]\d+)?\]",
    r"\[\d+\] ",
    r"\[task [^\]]{1,40}\]",  # Taskcluster's task log ("[task 2025-01-21T16:30:37.188Z] ")
    r">",
    # A logger's level and time ("ERROR 04-17 23:05:06", vLLM's) and its source ("[core.py:390]").
    r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?",
    r"\[[\w./-]+\.py:\d+(:\w+)?\]",
    r"[\w./-]+\.py:\d+\]",  # vLLM's older "engine.py:366]"
    r"[\w.-]+\s+\|",  # Docker Compose's service name ("vllm-1  | ")
)
START = r"^(?i:\s*(?:" + "|".join(LINE_PREFIXES) + r"))*"
LINE_PREFIX = compile_linear(*(r"^\s*(?:" + prefix + ")" for prefix in LINE_PREFIXES))


def anchored(alternative: str) -> str:
    """An alternative whose "^" (maybe inside a case-sensitive group) means START."""
    if alternative.startswith("^"):
        return START + alternative[1:]
    if alternative.startswith("(?-i:^"):
        return "(?-i:" + START + alternative[len("(?-i:^") :]
    return alternative


def make_rule(class_id: str, tier: int, *alternatives: str, in_warning: bool = False) -> Rule:
    alternatives = tuple(anchored(alternative) for alternative in alternatives)
    source = "|".join(f"(?:{alternative})" for alternative in alternatives)
    return Rule(class_id, tier, compile_linear(*alternatives), source, in_warning)


def family_rule(family: families.Family) -> Rule:
    class_id, tier, alternatives, in_warning = family
    return make_rule(class_id, ROOT if tier == families.CAUSE else SYMPTOM, *alternatives, in_warning=in_warning)


CLASSES: dict[str, FailureClass] = {
    fc.class_id: fc
    for fc in (
        FailureClass(
            "cuda_oom",
            "GPU out of memory",
            "Lower the per-GPU batch size (keep the global batch with gradient accumulation), enable "
            "activation checkpointing, shard parameters and optimizer state with FSDP or DeepSpeed ZeRO, "
            "train in bf16, and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.",
        ),
        FailureClass(
            "host_oom",
            "Host (CPU) memory exhausted: the process was killed",
            "The kernel's OOM killer or the container limit ended the process (SIGKILL, exit 137). Use fewer "
            "DataLoader workers, stream or memory-map the dataset instead of loading it whole, load checkpoints "
            "with mmap=True / low_cpu_mem_usage=True, or pick a node with more host memory.",
        ),
        FailureClass(
            "nccl_timeout",
            "Collective or rendezvous timed out",
            "A collective (NCCL, gloo, XLA) or the rendezvous (TCPStore, c10d, JAX coordination service) gave "
            "up waiting for a peer. Look above and on the other nodes for the rank that failed first (OOM, "
            "exception, dead node); if none did, look for uneven work between ranks (data skew, rank-0-only "
            "evaluation or checkpointing) or, at start-up, for a master address or port the nodes cannot reach. "
            "Raise the process-group timeout only for known long steps.",
        ),
        FailureClass(
            "nccl_error",
            "NCCL communication error",
            "Rerun with NCCL_DEBUG=INFO to see the failing transport. Check NCCL_SOCKET_IFNAME / the IB and EFA "
            "setup, that every node runs the same NCCL and driver versions, and that /dev/shm is large enough.",
        ),
        FailureClass(
            "illegal_memory_access",
            "CUDA kernel fault (illegal memory access or launch failure)",
            "A kernel read or wrote out of bounds or failed to launch. Rerun with CUDA_LAUNCH_BLOCKING=1 to find "
            "the op; suspect custom or fused kernels (flash-attention, Triton, apex) and mismatched CUDA/PyTorch "
            "builds; if it recurs on one GPU only, drain that node.",
        ),
        FailureClass(
            "device_assert",
            "CUDA device-side assert",
            "An index was out of range inside a kernel, usually a label >= num_classes, a token id >= vocab size "
            "or a bad embedding index. Run one batch on CPU to get a readable error, and check the data and the "
            "model's num_labels / vocab size.",
        ),
        FailureClass(
            "gpu_hardware",
            "GPU hardware fault",
            "The GPU failed (Xid 79 fell off the bus, uncorrectable ECC, GPU lost). Not your code: drain and "
            "report the node, then resume the run from its last checkpoint on healthy nodes.",
        ),
        FailureClass(
            "serialization_too_large",
            "Object too large to serialize",
            "A large object was pickled to move it between processes. Load the dataset inside the "
            "decorated/distributed function (from a table, volume or path) instead of passing it as an "
            "argument, and return small results; raising spark.driver.maxResultSize only hides the problem.",
        ),
        FailureClass(
            "pickling_error",
            "Object could not be pickled",
            "An object that cannot be pickled (a lock, socket, open file, lambda or local function, a framework "
            "model) was sent to another process (Ray task or actor, multiprocessing, DataLoader workers). Create "
            "it inside the remote function or worker, or pass what rebuilds it (a path, a config) instead.",
        ),
        FailureClass(
            "dependency_error",
            "Missing or incompatible dependency",
            "Pin the package versions that were installed when the run last worked, and rebuild compiled "
            "extensions (flash-attn, apex) against the installed torch/CUDA. Removed packages do not come back: "
            "databricks_genai (Foundation Model Fine-tuning reached end of life: write the loop as ordinary "
            "PyTorch on serverless GPUs) and HorovodRunner (deprecated: use TorchDistributor).",
        ),
        FailureClass(
            "nan_divergence",
            "Training diverged (NaN/Inf loss)",
            "Lower the learning rate or lengthen warmup, clip gradients, prefer bf16 over fp16 (or keep the "
            "loss scaler), check the inputs for NaN/Inf, and resume from the last checkpoint before the spike.",
        ),
        FailureClass(
            "disk_full",
            "Disk full",
            "Write checkpoints to a volume or object storage instead of local disk, keep only the last N "
            "checkpoints, and clear caches (HF_HOME, pip, /tmp) on long runs.",
        ),
        FailureClass(
            "segfault",
            "Segmentation fault",
            "A native library crashed. Check that torch, CUDA and compiled extensions come from matching "
            "builds, try DataLoader num_workers=0 to rule out worker crashes, and run with faulthandler "
            "(python -X faulthandler) to get the Python stack.",
        ),
        FailureClass(
            "timeout",
            "Run hit its time limit",
            "Checkpoint regularly and resume before the runtime cap (7 days for notebook runs, 14 days for "
            "CLI runs), or raise timeout_minutes for the run.",
        ),
        FailureClass(
            "capacity_unavailable",
            "No GPU capacity or quota available",
            "The cloud had no capacity for the requested instance type, or the account's quota for it is "
            "used up. Retry later, allow other zones or regions, accept an equivalent GPU type, or use "
            "reserved capacity; for a quota, ask the cloud for an increase.",
        ),
        FailureClass(
            "cancelled",
            "Run cancelled",
            "The run was stopped by a person or a policy, not by a fault. Resume from the last checkpoint "
            "if it should continue.",
        ),
        FailureClass(
            "other",
            "Unrecognised failure",
            "The run ended abnormally but no known failure pattern matched. Read the evidence line (the "
            "most likely root-cause line) and the traceback around it.",
        ),
        FailureClass("none", "No failure found", "Nothing to do: the log shows no failure."),
    )
}

# The InfiniBand transport failing (12: retry count exceeded), which NCCL logs at WARN: as
# `with error 12` before 2.21, `status=12` to 2.28.3, `status=IBV_WC_RETRY_EXC_ERR(12)` since.
# An nccl_error rule, and NCCL_FATAL_WARN keeps HARMLESS from hiding it.
IB_COMPLETION_ERROR = (
    r"NET/IB\w* ?: ?Got completion from peer .{0,200}?(status=[1-9]|status=IBV_WC_\w*ERR|with error [1-9])"
)

# Lines that look alarming but are not failures: no rule reads them, except the causes a
# warning can carry (`Rule.in_warning`: an OOM or a device assert inside an NCCL WARN line, a
# full disk or a KeyboardInterrupt inside a UserWarning) and NCCL_FATAL_WARN's transport errors.
HARMLESS = compile_linear(
    # NCCL's own log levels, in capitals: "check NCCL warnings" in an error's text is not one.
    r"(?-i:NCCL (INFO|WARN)\b)",
    # A warning class ("UserWarning: ..."), not a logger's WARNING level: torchrun logs the signal
    # that stopped it at WARNING. Warning classes are CamelCase: "CWARNING:" (a ^C glued to a
    # logger's level) is not one.
    r"(?-i:\w+Warning\b)\s*:",
    r"\[W (socket|ProcessGroup|Utils)\S*\.cpp",
    r"TensorFloat-32|\bTF32\b",
    r"Some weights of .* (not initialized|not used)",
    r"attention mask and the pad token id were not set",
    r"huggingface/tokenizers",
    r"To disable this warning",
    r"flight recorder",
)

# NCCL WARN lines that are a failure's own report (HARMLESS does not hide them): an InfiniBand
# completion with an error status, after which NCCL only logs the error code (`-> 6`) at INFO.
NCCL_FATAL_WARN = compile_linear(
    IB_COMPLETION_ERROR,
    r"Failed to execute operation Connect from rank",
    r"Connect to \S+ failed",
    r"\bNet ?: Call to (recv|send|connect) .{0,60}?failed",
    r"NET/\w+ ?: Connection closed by remote peer",
    r"unhandled (system|cuda) error",
)

# Boilerplate hints that frameworks append to an error: cut out of a line before the rules read
# it, so the hint never becomes evidence ("...enable device-side assertions" is not a device
# assert) while the error it is appended to still is.
BOILERPLATE = compile_linear(
    r"Compile with `?TORCH_USE_CUDA_DSA`? to enable device-side assertions?\.?",
    r"CUDA kernel errors might be asynchronously reported at some other API call[^.]*\.?",
    r"For debugging consider passing CUDA_LAUNCH_BLOCKING=1\.?",
    r"Hint: If you want to see a list of allocated tensors when OOM happens[^.]*\.?",
    # Ray lists every cause a dead worker could have had; naming SIGKILL or SIGSEGV there is not
    # evidence of either.
    r"There are some potential root causes\..*",
    r"\(1\) The process is killed by SIGKILL by OOM killer due to high memory usage\.?",
)

# A Python traceback's frame line (`File "...", line N, in f`). Never evidence, and neither is
# the source line it quotes (indented deeper, e.g. `raise RuntimeError(f"NCCL error: {error_str}")`).
# A native backtrace's frames (`frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout`) are
# read: with the message cut, the function a frame names is all a log says.
# A native backtrace's frame (`frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout`, glog's
# `@ 0x7f...`, gdb's `#4 0x... in`): read, since with the message cut the function a frame names is
# all a log says, but evidence only when no line of output says as much.
NATIVE_FRAME = compile_linear(
    anchored(r"^\s*frame #\d+:"), anchored(r"^\s*@\s+0x[0-9a-f]+"), anchored(r"^\s*#\d+\s+0x[0-9a-f]+ in ")
)
FRAME = compile_linear(anchored(r"^\s*File \"[^\"]*\", line \d+(, in \S+)?\s*$"))

# IPython's traceback header: the exception's name, then its traceback, then its message.
IPYTHON_HEADER = compile_linear(r"^\W*[\w.]+\s{2,}Traceback \(most recent call last\)")

# An exception's name alone on its line ("ImportError:"): its message is on the next line.
BARE_EXCEPTION = compile_linear(anchored(r"^\W*[\w.]*(?-i:Error|Exception)\s*:?\s*$"))

# Training progress (an epoch, iteration or step counter, a loss, a progress bar's rate). A
# non-ROOT error followed by RECOVERED_AFTER such lines and nothing worse did not end the run:
# a DataLoader worker's segfault that the loader survived, a handled exception's traceback.
PROGRESS = compile_linear(
    r"\bepoch\b\s*[:=]?\s*\[?\d",
    r"\biter(ation)?\b\s*[:=]?\s*\[?\d",
    r"(^|[^#])\bstep\b\s*[:=]?\s*\d",  # not a CI log's line anchor (`#step:3:2082`)
    r"\bloss\b\s*[:=]\s*\d",
    r"\d+(\.\d+)?\s*(it|s)/(s|it)\b",
)
RECOVERED_AFTER = 2

# fp16 loss scaling: one skipped step is routine; a run of them means the scale is collapsing.
# The same for a gradient norm logged as NaN step after step (HF Trainer's `'grad_norm': nan`).
OVERFLOW = compile_linear(r"Gradient overflow", r"overflow, skipping", r"grad[_ ]norm['\"]?\s*[:=]\s*['\"]?nan\b")
OVERFLOW_STREAK = 5

# A cancel is often a scheduler's deletion whose reason follows ("job deleted" / "MOAB_INFO: job
# exceeded wallclock limit"): these classes, KILL_REASON_LINES lines after it at most, replace it.
KILL_REASONS = frozenset({"timeout", "capacity_unavailable", "host_oom", "disk_full", "gpu_hardware"})
KILL_REASON_LINES = 20

# Words that make a line the likeliest root-cause line of a run that failed with no rule
# matching (the "unrecognised failure" verdict reads the log's tail for the first of them).
WEAK_ERROR = compile_linear(
    r"\b(error|errors|fail\w*|fatal|exception|abort\w*|kill\w*|terminat\w*|panic|denied|refused|cannot|"
    r"can't|unable|crash\w*|die[ds]?|dead|exit\w*|interrupt\w*|timed? ?out)\b"
)
# Non-blank lines at the end of a log searched for that line.
TAIL_LINES = 40

# Exit codes that say something on their own when the log does not.
EXIT_CODE_CLASSES: dict[int, str] = {137: "host_oom", -9: "host_oom", 139: "segfault", -11: "segfault"}
