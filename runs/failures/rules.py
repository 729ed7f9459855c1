"""The failure classes and the line patterns that recognise them, for `runs.failures.classify`.

Kept apart from the scanning algorithm so that adding a pattern or rewording a remedy never
touches the ordering logic. Every pattern here was written against the labelled corpus in
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


def _rule(class_id: str, tier: int, *alternatives: str, in_warning: bool = False) -> Rule:
    alternatives = tuple(anchored(alternative) for alternative in alternatives)
    source = "|".join(f"(?:{alternative})" for alternative in alternatives)
    return Rule(class_id, tier, compile_linear(*alternatives), source, in_warning)


def _family(family: families.Family) -> Rule:
    class_id, tier, alternatives, in_warning = family
    return _rule(class_id, ROOT if tier == families.CAUSE else SYMPTOM, *alternatives, in_warning=in_warning)


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

# Order matters within a line: the first rule that matches claims the line. So "CANCELLED ...
# DUE TO TIME LIMIT" is a timeout, an NCCL watchdog line quoting an ECC error is hardware, a
# JVM or Ray OutOfMemoryError is host memory (not the GPU), and a glog fatal line naming an
# illegal memory access is that, not a generic fatal line.
#
# The timeout taxonomy. Two different things time out in a training run:
# * `timeout`: the run's own time limit (Slurm's TIME LIMIT, the run's timeout_minutes, the
#   runtime cap). Nothing broke; the run was stopped for taking too long.
# * `nccl_timeout`: a collective or rendezvous between processes gave up waiting: an NCCL
#   watchdog, gloo's "Timed out waiting ...ms", a TCPStore or rendezvous connect timeout, JAX's
#   DEADLINE_EXCEEDED barrier or a coordination-service heartbeat timeout. Usually one peer
#   died or stalled first, so these are SYMPTOM tier: a peer's OOM or exception outranks them.
# The InfiniBand transport failing (12: retry count exceeded), which NCCL logs at WARN: as
# `with error 12` before 2.21, `status=12` to 2.28.3, `status=IBV_WC_RETRY_EXC_ERR(12)` since.
# An nccl_error rule, and NCCL_FATAL_WARN keeps HARMLESS from hiding it.
IB_COMPLETION_ERROR = (
    r"NET/IB\w* ?: ?Got completion from peer .{0,200}?(status=[1-9]|status=IBV_WC_\w*ERR|with error [1-9])"
)

# Families by mechanism. Each rule names what happened, in the words of every ecosystem and
# scheduler that reports it: a time limit is Slurm's "DUE TO TIME LIMIT", PBS's "walltime ...
# exceeded limit", LSF's TERM_RUNLIMIT, Moab's "exceeded wallclock limit", Kubernetes'
# DeadlineExceeded, SageMaker's MaxRuntimeExceeded... (sources in tests/data/failures/SOURCES.md
# and docs/failure-classifier.md).
RULES: tuple[Rule, ...] = (
    _rule(
        "gpu_hardware",
        ROOT,
        r"\bXid\b.{0,40}?\b(48|63|64|74|79|92|94|95|119|120|14[4-9]|150)\b",  # 144-150: NVLink
        r"fallen off (of )?the bus",
        r"uncorrectable ECC",
        r"ECC_UNCORRECTABLE",
        r"cudaErrorECCUncorrectable",
        r"double[- ]bit ECC",
        r"ECC errors? (was |were )?(detected|encountered)",
        r"uncontained (ECC )?error",
        r"row remapp\w* (failure|pending)",
        r"GPU is lost",
        r"GpuIsLost",
        r"GPU_IS_LOST",
        r"GPU (at PCI:\S+ )?(has|is) (been )?lost",
        # NVLink and NVSwitch faults (cudaErrorNvlinkUncorrectable, SXid), named without "Xid".
        r"uncorrectable NVLink",
        r"cudaErrorNvlinkUncorrectable",
        r"NVLink (fatal |uncorrectable )?error",
        r"NVLINK.{0,40}?\b(fatal|fault|training failed)",
        r"\bSXid\b",
        r"Critical Xid",
        r"XidCriticalError",
        r"DCGM_FR_\w*(ECC|NVLINK|XID|PCIE|RETIRED|ROW_REMAP)",
        r"marking device \S+ as unhealthy",
        r"double[- ]bit (ECC )?error",
        r"PCIe Bus Error.{0,40}?Uncorrected",
        r"Timeout waiting for RPC from GSP",
        r"GPU (requires|needs) (a )?reset",
        r"GPU reset required",
        r"RmInitAdapter failed",
        r"hardware stack error",
        r"CUDA_ERROR_HARDWARE_STACK_ERROR",
        # nvidia-smi's words for a GPU the driver can no longer reach (fallen off the bus).
        r"Unable to determine the device handle for GPU",
        in_warning=True,
    ),
    _rule(
        "timeout",
        ROOT,
        r"DUE TO TIME LIMIT",  # Slurm
        r"timed out after \d+(\.\d+)? ?(minutes?|hours?|days?)",
        r"\bRun timed out\b",
        r"\b(job|training job|pipeline) ?timed ?out\b",
        r"\b(wall ?clock|wall ?time|max ?time) (was |has been )?(exceeded|expired)\b",
        r"reached (its |the )?(job'?s? )?(time|wall ?clock|wall ?time|run ?time) limit",
        r"due to (the |its )?(wall ?clock|wall ?time|run ?time|time) limit",
        r"enforced h_rt",
        r"activeDeadlineSeconds.{0,40}?(exceeded|reached)",
        r"max(imum)? run duration",
        r"exceed\w* (the |its )?(max(imum)? |allowed |configured )*(execution|run|training) (time|duration)",
        r"max(imum)?[ _]runtime",
        r"(?-i:\bTIMEDOUT\b)",
        r"(?-i:\bJobState=TIMEOUT\b)",
        # PBS/Torque ("=>> PBS: job killed: walltime 3630 exceeded limit 3600"), Moab ("job
        # exceeded wallclock limit"), SGE ("exceeded hard wallclock time"), LSF (TERM_RUNLIMIT).
        r"walltime \d+ exceeded limit",
        r"exceed\w* (its |the |job'?s? |hard |soft )?(allotted |allowed |requested |maximum |max )?"
        r"(wall ?clock|wall ?time|run ?time|time)( time)? ?limit",
        r"exceed\w* (its |the |job'?s? |hard |soft )?(allotted |allowed |requested |maximum |max )?"
        r"(wall ?clock|wall ?time|run ?time)\b",
        r"(wall ?clock|wall ?time|run ?time|time) limit (was |has been )?(exceeded|reached|expired)",
        r"\bTERM_RUNLIMIT\b",
        r"reaching LSF run ?time limit",
        # Kubernetes Jobs (activeDeadlineSeconds), SageMaker, Vertex AI, Azure ML, Databricks.
        r"(?-i:\bDeadlineExceeded\b)",
        r"active longer than (the )?specified deadline",
        # Anything that ran past its allowance, however the platform words the limit: Kubernetes'
        # kubelet ("Pod was active on the node longer than the specified deadline"), Argo, Batch.
        r"\b(ran|run|running|was active|active|alive) .{0,40}?\blonger than (the |its )?"
        r"(specified |allowed |configured |maximum |max |requested )?(deadline|time ?limit|wall ?time|run ?time)",
        r"MaxRuntimeExceeded",
        # A status field whose value is a time limit (Azure ML's `"status": "RUN_TIMEOUT"`,
        # Slurm's `State: TIMEOUT`, a workflow's `phase: TimedOut`); the key may be quoted.
        r"\b(phase|status|state|job ?state|result|conclusion|outcome|reason)['\"]?\s*[:=]\s*['\"]?"
        r"(?-i:([A-Z]+_)?(TIMEOUT|TIMED_OUT|TIME_LIMIT|TimedOut|Timeout|TimeLimit(Exceeded)?))\b",
        r"longer than (the |its )?max(imum)? (allowed |configured )?(time|duration|run ?time)\b",
        r"MaxRuntimeInSeconds",
        r"exceed\w* (its |the )?(max(imum)?[ _]?duration|timeout( period| limit)?|time ?out of)",
        r"(job|run|task|training) (was )?(stopped|cancel+ed|terminated|killed) (because|as|after) it "
        r"(ran|exceeded|reached)",
    ),
    # /dev/shm is memory: NCCL failing to create its shared memory segments there is host memory
    # running out, though the kernel words it as a full disk (so this comes before disk_full).
    _rule(
        "host_oom",
        ROOT,
        r"shared memory segment .{0,80}?(size \d+|failed)",
        r"failed to extend /dev/shm",
        r"/dev/shm\b.{0,80}?No space left on device",  # noqa: S108 (a pattern, not a path)
        r"posix_fallocate failed.{0,20}?No space left on device",  # NCCL allocating in /dev/shm
        in_warning=True,
    ),
    # Disk before memory: TensorFlow reports a full disk as ResourceExhaustedError too.
    _rule(
        "disk_full",
        ROOT,
        r"No space left on device",
        r"\b(Errno|Error) 28\b",
        r"os error 28\b",
        r"\bENOSPC\b",
        r"Disk quota exceeded",
        r"\bEDQUOT\b",
        r"StorageFull",
        # Kubernetes evicting a pod for the node's disk.
        r"low on resource: ephemeral-storage",
        r"\bDiskPressure\b",
        r"ephemeral[- ]storage (usage )?(exceeds|limit)",
        r"exceeded (its |the )?local ephemeral storage",
        r"OutOfDiskError",
        in_warning=True,
    ),
    # Out of memory by mechanism: the words around an allocator's refusal say host or device.
    _family(families.MEMORY_HOST),
    _family(families.MEMORY_DEVICE),
    # Host memory, before the GPU rules: Ray's OutOfMemoryError and its raylet's kills, the JVM's
    # OutOfMemoryError and TensorFlow's OOM on a CPU device are all the host running out.
    _rule(
        "host_oom",
        ROOT,
        r"oom[-_ ]kill",
        r"Out of memory: Kill",
        r"task \d+(-\d+)?: Out Of Memory",
        r"exceeding memory limits",
        r"low on resource: memory",
        r"\bMemoryPressure\b",
        r"java\.lang\.OutOfMemoryError",
        r"^\W*MemoryError\b",
        r"\bMemoryError: Unable to allocate",
        r"_ArrayMemoryError",
        r"ray\.exceptions\.OutOfMemoryError",
        r"RayOutOfMemoryError",
        r"ObjectStoreFullError",
        r"killed due to the node running low on memory",
        r"Workers \(tasks / actors\) killed due to memory pressure",
        r"address the out of memory issue: \S*ray-oom-prevention",
        r"OOM when allocating tensor.{0,200}?device:CPU",
        r"OOMKilled",
        # A native allocator's abort (Rust's, the C++ runtime's), the kernel refusing memory.
        r"memory allocation of \d+ bytes failed",
        # Pinned (page-locked) host memory and the C allocator refusing: host memory, whatever
        # the framework (MindSpore's "cudaHostAlloc failed, ret[2], out of memory").
        r"\b(cudaHostAlloc|cudaMallocHost|cuMemHostAlloc|hipHostMalloc)\b.{0,60}?(fail\w*|out of memory)",
        r"(pinned|page-locked|host) memory.{0,40}?(out of memory|alloc\w* failed)",
        r"\bmemory malloc failed\b",
        r"\bmalloc(\(\))? failed\b",
        r"std::bad_alloc",
        r"Cannot allocate memory",
        r"\[Errno 12\]",
        # YARN and LSF killing a container or job over its memory limit.
        r"running beyond (physical|virtual) memory limits",
        r"\bTERM_MEMLIMIT\b",
        r"job killed: (mem|vmem|pmem) \S+ exceeded limit",  # PBS/Torque
        r"GC overhead limit exceeded",
        r"DefaultCPUAllocator: (not enough memory|can'?t allocate memory)",
        r"ran out[- ]of[- ]memory and exited",  # Vertex AI's words for a replica's OOM kill
        r"insufficient shared memory",
        r"exceeded (its |the )?(job )?memory limit",
        # A DataLoader worker's shared memory (/dev/shm) ran out: host memory, not the GPU's.
        r"workers are out of shared memory",
        # The shell's SIGKILL report glued to a progress bar's last redraw (`3/8 [00:02<00:03]Killed`).
        r"\]\s*Killed\W*$",
        r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
        in_warning=True,
    ),
    _rule(
        "cuda_oom",
        ROOT,
        r"CUDA out of memory",
        # The exception's own name, not a longer name that ends with it (RayOutOfMemoryError).
        r"(?-i:(^|[^A-Za-z])OutOfMemoryError)",
        r"CUDA error: out of memory",
        r"Cuda failure '?out of memory",
        r"cudaErrorMemoryAllocation",
        r"CUDA_ERROR_OUT_OF_MEMORY",
        r"CUBLAS_STATUS_ALLOC_FAILED",
        r"RESOURCE_EXHAUSTED: OOM",
        # TensorFlow / Keras and XLA: the allocator's own words, on a GPU device.
        r"ResourceExhaustedError",
        r"Resource exhausted: OOM",
        r"OOM when allocating tensor",
        r"Out of memory while trying to allocate",
        r"RESOURCE_EXHAUSTED: (Error allocating device buffer|Attempting to (reserve|allocate)|Failed to allocate)",
        r"RESOURCE_EXHAUSTED: Out of memory",
        r"Ran out of memory in memory space",
        r"(HIP|hip|ROCm)( error)?:? out of memory",
        r"CUDA\]?: out of memory",
        r"\b(MPS|XPU|NPU) (backend )?out of memory",
        r"cudaMalloc( retry)? failed: out of memory",
        r"\b(GPU|CUDA|device) (OOM|out of memory)\b",
        r"out of memory (error )?on (GPU|device)",
        r"Dst tensor is not initialized",  # TensorFlow failing to copy a tensor onto a full GPU
        r"larger than the maximum number of tokens that can be stored in KV cache",
        r"hipErrorOutOfMemory",
        # vLLM: the weights fit but the KV cache does not.
        r"No available memory for the cache blocks",
        r"Free memory on device .{0,80}? is less than desired GPU memory utilization",
        in_warning=True,
    ),
    _family(families.MEMORY_UNQUALIFIED),
    *(_family(family) for family in families.CUDA_CODES),
    _family(families.SUBMISSION_REFUSED),
    _family(families.TIME_LIMIT_STATE),
    _family(families.LOSS_TERMINATED),
    _family(families.NO_GPU_SUPPORT),
    *(_family(family) for family in families.MECHANISMS_6),
    _rule(
        "illegal_memory_access",
        ROOT,
        r"illegal memory access",
        r"unspecified launch failure",
        r"cudaErrorLaunchFailure",
        r"cudaErrorIllegalAddress",
        r"CUDA_ERROR_ILLEGAL_ADDRESS",
        r"misaligned address",
        r"an illegal instruction was encountered",
        r"CUBLAS_STATUS_EXECUTION_FAILED",  # a cuBLAS kernel that failed on the device
        r"the GPU program failed to execute",  # the same, in its message
        in_warning=True,
    ),
    _rule(
        "device_assert",
        ROOT,
        r"device-side assert",
        r"Assertion `.*` failed",
        # A kernel's own assert line (`Indexing.cu:1422: indexSelectLargeIndex: block: [31,0,0],
        # thread: [16,0,0] Assertion ...`), whatever the assert's form or where its "failed" wraps.
        r"\.cu:\d+: .{0,300}?\bthread: \[[\d,]+\] Assertion\b",
        in_warning=True,
    ),
    _rule(
        "serialization_too_large",
        ROOT,
        r"bigger than spark\.driver\.maxResultSize",
        r"Total size of serialized results of \d+ tasks",
        r"spark\.rpc\.message\.maxSize",
        r"kryoserializer\.buffer\.max",
        r"Kryo serialization failed: Buffer overflow",
        r"cannot serialize a \w+( object)? larger than",
        r"Serialized task .* exceeds max allowed",
        r"pickle data was truncated",
        r"object (is )?too large",
        r"too large to serialize",
        # The 2 GB protobuf limit (TensorFlow graphs and tensor protos, ONNX models, Ray's RPCs).
        r"exceeds maximum protobuf size",
        r"protobuf.{0,60}?\b2 ?Gi?B\b",
        r"(larger|bigger) than (the )?2 ?Gi?B",
        r"(Cannot|can'?t|failed to) serialize (the )?(protocol buffer|proto\b|message)",
        r"proto(buf)? (size|message) (is )?(larger|too large|exceeds)",
        r"message (is |was )?too (large|long|big)",
        # protobuf's parser halting on its byte limit ("A protocol message was rejected because it
        # was too big (more than 67108864 bytes)"); an HTTP or RPC body over the server's limit.
        r"(protocol )?message was rejected because it was too (big|large)",
        r"\b413\b.{0,20}?(Request Entity|Payload|Content) Too Large",
        r"(request|payload|entity|body|content) (size )?(is |was )?too large\b",
        # gRPC's message-size limit ("Received message larger than max (210771146 vs. 104857600)").
        r"(Received|Sent|Trying to send) message larger than max",
        r"message larger than max",
        r"grpc: (received|trying to send) message larger",
        # multiprocessing/pickle's 32-bit length header on a > 2 GB object.
        r"'i' format requires -2147483648 <= number <= 2147483647",
        r"OverflowError: .{0,60}?(serializ|pickl)",
        r"exceeds (the )?max(imum)? (message|payload|request) size",
        r"payload size exceeds",
        r"Request Entity Too Large",
    ),
    _rule(
        "pickling_error",
        ROOT,
        r"PicklingError",
        r"can'?t pickle",
        r"cannot pickle",
        r"Could not serialize the (function|argument|object)",
        r"is not (JSON |msgpack )?serializable",
    ),
    # ABI and architecture mismatches that frameworks report only as a warning: still the cause.
    _rule(
        "dependency_error",
        ROOT,
        r"is not compatible with the current PyTorch installation",
        r"compiled using NumPy 1\.x cannot be run in",
        in_warning=True,
    ),
    _rule(
        "dependency_error",
        ROOT,
        r"ModuleNotFoundError",
        r"\bImportError\b",
        r"undefined symbol",
        r"symbol lookup error",
        r"version `GLIBC\w*_[\d.]+' not found",
        r"CUDA driver version is insufficient",
        r"Failed to import [\w.]+ because",
        r"No matching distribution found",
        r"cannot open shared object file",
        r"DLL load failed",
        # A binary built for another GPU architecture, CUDA, NumPy or Python ABI.
        r"invalid device function",
        r"no kernel image is available for execution",
        r"NVIDIA driver on your system is too old",
        r"CUDA Setup failed",  # bitsandbytes finding no usable CUDA libraries
        r"module compiled against (API|ABI) version",
        r"size changed, may indicate binary incompatibility",
        r"numpy\.core\.multiarray failed to import",
        r"binary incompatib",
        r"mismatches the version that was used to compile",
        r"Driver/library version mismatch",
        r"(CUDA|cuDNN|NCCL|driver|ABI|jaxlib) version mismatch",
        r"Loaded runtime \w+ library: .{0,80}? but source was compiled with",
        r"Torch not compiled with CUDA enabled",
        r"PTX was compiled with an unsupported toolchain",
        r"Unsupported gpu architecture",
        r"FlashAttention only supports",
        r"\bVersionConflict\b",
        r"DistributionNotFound",
        r"Descriptors cannot be created directly",  # protobuf 4 against generated code of 3
        r"Ninja is required to load C\+\+ extensions",
        r"nvcc fatal",
        r"Failed building wheel for",
        r"Could not build wheels",
        r"forward compatibility was attempted on non supported HW",
        r"compiled with different CUDA (major )?versions",
        r"module '[\w.]+' has no attribute",
        r"Library installation failed",
        r"Could not find a version that satisfies the requirement",
        r"ResolutionImpossible",
        r"seems to be not installed",
        r"requires the following packages that were not found",
        r"Found no NVIDIA driver",
        r"couldn'?t communicate with the NVIDIA driver",
        r"incompatible (jaxlib|version|versions|with (the )?installed)",
    ),
    _rule(
        "nan_divergence",
        ROOT,
        r"\bloss is nan\b",
        r"Loss became infinite or NaN",
        r"NaN or Inf found in input tensor",
        # `loss: nan`, `loss=nan`, a logged table's `| loss | nan |`, a column glued to its name
        # (`average_loss : nan`, `IDLoss=nan`).
        r"loss\w*['\"]?\s*[:=|]\s*['\"]?(nan|inf)\b",
        # The objective under any name (`softmaxcost nan,nan`, `cost = nan`), separated or not.
        r"(loss|cost)\w*['\"]?\s*[:=|]?\s*['\"]?(nan|-?inf)\b",
        r"\b(loss|cost)(es)? (is|are|became|becomes|become|goes|went|turns?|turned|gets?|got|jumps?|jumped)"
        r"( to)? (a |an )?(nan|inf)\b",
        r"\b(outputs?|logits|gradients?|activations?|weights?|predictions?) "
        r"(is|are|became|become|contains?) (a )?nan\b",
        r"\bnan\b.{0,40}\bstop(ping)? (the )?training\b",
        r"non-finite loss",
        r"\b(loss|training|model) (has )?diverged",
        r"found (NaN|Inf) in (local )?grad norm",  # Megatron's check
        r"loss scale already at minimum",  # DeepSpeed's fp16 scaler giving up
        r"Detected (NaN|inf) (loss|gradient)",
    ),
    _rule(
        "capacity_unavailable",
        ROOT,
        # AWS, GCP, Azure, OCI, SageMaker, Vertex, Databricks, SkyPilot, Lambda: no capacity.
        r"INSUFFICIENT_CAPACITY",
        r"InsufficientInstanceCapacity",
        r"insufficient[ _-]capacity",
        r"capacity unavailable",
        r"no (more )?(GPU )?capacity",
        r"(not enough|out of|no available) (host |GPU |instance |compute )?capacity",
        r"OutOfHostCapacity",
        r"do not have sufficient \S+ capacity",
        r"ZONE_RESOURCE_POOL_EXHAUSTED",
        r"resource pool exhausted",
        r"\bstockout\b",
        r"does not have enough resources available to fulfill the request",  # GCP's words for it
        r"ResourceLimitExceeded",  # SageMaker: the account's instance quota
        r"CapacityError",
        r"Unable to provision requested ML compute capacity",
        r"ResourcesUnavailableError",
        r"Failed to acquire resources",
        r"(Zonal)?AllocationFailed",
        r"OverconstrainedAllocationRequest",
        r"SkuNotAvailable",
        r"CLOUD_PROVIDER_LAUNCH_FAILURE",
        r"cloud provider (launch failure|capacity)",
        r"insufficient[ _-]instance[ _-]capacity",
        r"insufficient[ _-]quota",
        r"resources are insufficient",
        r"than your current instance limit",
        r"account-level service limit",
        r"no (longer any )?instances available",
        r"INSTANCE_POOL_MAX_CAPACITY",
        # Quotas: each cloud's wording.
        r"QUOTA_EXCEEDED",
        r"QuotaExceeded",
        r"VcpuLimitExceeded",
        r"vCPU (capacity|limit)",
        r"Quota '?[\w/.-]+'? exceeded",
        r"quota (metrics? )?exceed",
        r"exceed\w* (the |your )?(approved )?[\w/.' -]{0,40}?quota",
        r"GPUS_ALL_REGIONS",
        r"\bOutOfQuota\b",
        r"(not enough|insufficient) [\w ]{0,30}?quota",
        r"quota of \d+ and cannot",
        r"Quota failure",
        r"following quotas are exceeded",
        r"exceeds the allowed maximum of \d+",
        # A refusal that asks for a quota increase is a quota used up, in any cloud's words
        # ("If you would like to increase this quota, create a new Azure support request").
        r"\b(increase|raise) (this|the|your) (\w+ )?quota\b",
        r"\brequest (a |an )?quota increase\b",
        r"quota\b.{0,120}?\bis \d+,? (whereas|but|and|while) \d+ (are|is) (currently )?"
        r"(reserved|used|in use|allocated)",
        r"(?-i:\b(Max|Maximum)\w*(Cores|Instances|Nodes|Gpus|GPUs|Quota|Capacity)\w*(Reached|Exceeded)\b)",
        # Kubernetes: no node can take the pod ("0/4 nodes are available: 4 Insufficient ...").
        r"\d+/\d+ nodes are available",
        r"Insufficient nvidia\.com/gpu",
        r"(?-i:\bFailedScheduling\b)",
        # A pod description cut before its events: the PodScheduled condition is False, or the
        # reason is Unschedulable.
        r"(?-i:^\s*PodScheduled\s+False\b)",
        r"(?-i:\bUnschedulable\b)",
        r"no nodes available to schedule",
        r"Cannot schedule pods",
        # Slurm and PBS refusing the request outright.
        r"Requested node configuration is not available",
        r"(?-i:\b(QOSMax|AssocGrp|AssocMax)\w+)",
        r"violates accounting/QOS policy",
        r"exceeds queue resource limits",
        r"would exceed (the )?(queue|complex|server)",
    ),
    _rule(
        "cancelled",
        ROOT,
        r"KeyboardInterrupt",
        in_warning=True,
    ),
    _rule(
        "cancelled",
        ROOT,
        r"cancel+ed by (the )?(user|owner|admin\w*|operator)",
        r"\bRun was cancel+ed\b",
        r"\bwas cancel+ed\b",
        r"(?-i:\bCANCEL+ED\b)",
        r"SIGTERM.*\b(by user|user request|policy|preempt\w*)\b",
        # Stopped by a person or a system, in each scheduler's and platform's words.
        r"\bscancel\b",
        r"\bqdel\b",
        r"job deleted",
        r"deleted by (the )?(user|owner|admin\w*|operator)",
        r"\bTERM_(OWNER|ADMIN|PREEMPT|FORCE_OWNER|FORCE_ADMIN|REQUEUE_OWNER|REQUEUE_ADMIN)\b",
        r"killed by (the )?(job )?(owner|user|admin\w*)",
        r"(stopped|terminated|interrupted|killed|aborted) by (the )?(user|owner|operator|admin\w*)",
        r"(?-i:\bPREEMPTED\b)",
        r"\b(was|been|being) preempted\b",
        r"\b(job|cluster|instance|node|vm|pod|task|worker)s? (is|are|got) preempted\b",
        r"preemption (notice|signal)",
        r"spot (instance )?(interruption|termination|reclaim)",
        r"Spot Instance interruption",
        r"StopTrainingJob",
        r"Training job .{0,80}?(was )?stopped",
        r"TaskCancelledError",
        r"user requested (stop|cancel\w*|termination)",
        r"Interrupted by user",
        r"(?-i:\bInterruptException\b)",  # Julia's Ctrl+C
        r"\b(job|run|task|trial) (has been |was )?cancel+ed\b",
        r"^\W*\^C",
    ),
    # Symptoms: NCCL, distributed timeouts and signals are what a cascade looks like from the
    # other ranks (see the timeout taxonomy above).
    #
    # torchrun's agent itself signalled from outside (SIGHUP, SIGINT, SIGTERM): a stop, not a
    # fault, but a symptom: a scheduler also stops the other nodes of a job when one fails, and a
    # run past its time limit is stopped the same way. With no cause elsewhere it is a cancel.
    # The agent's own "Sending process N closing signal SIGTERM" to its workers is not this.
    _rule(
        "cancelled",
        SYMPTOM,
        r"Received (1|2|15) death signal",
        r"SignalException: Process \d+ got signal: (1|2|3|15)\b",
        # torchrun's agent raises SignalException only for the signals it traps from outside
        # (SIGTERM, SIGINT, SIGHUP, SIGQUIT): its name alone, the message cut, is such a stop.
        r"(?-i:\bSignalException)\s*$",
        # The agent passing on the SIGHUP or SIGINT it got (on a failure of its own it sends SIGTERM).
        r"closing signal SIG(HUP|INT)\b",
        # A process told to stop from outside (a scheduler, a person, a preemption).
        r"(received|got|caught) (signal )?SIGTERM",
        r"SIGTERM (signal )?received",
    ),
    _family(families.COLLECTIVE_TIMEOUT),
    _family(families.COLLECTIVE_ERROR),
    *(_family(family) for family in families.NETWORK_6),
    _rule(
        "nccl_timeout",
        SYMPTOM,
        r"Watchdog caught collective",
        r"\bNCCL timeout\b",
        r"Timeout at NCCL work",
        r"watchdog got stuck",
        r"WorkNCCL::checkTimeout",
        r"WorkNCCL\([^)]{0,300}\) ran for \d+ ?(ms|milliseconds)",
        r"ran for \d+ milliseconds before timing out",
        r"NCCL watchdog timeout",
        r"gloo.{0,200}?(Timed out|timeout)",
        r"Timed out waiting \d+ ?ms for (recv|send)",
        r"monitoredBarrier",
        r"DistStoreError",
        r"waiting for clients",
        r"store based barrier",
        r"Socket Timeout",
        r"socket has timed out after",
        r"(TCPStore|Store)\b.{0,120}?timed out",
        r"Rendezvous(Timeout|Connection)Error",
        r"DEADLINE_EXCEEDED",
        r"Deadline Exceeded",
        r"Barrier timed out",
        r"heartbeat timeout",
    ),
    _rule(
        "nccl_error",
        SYMPTOM,
        r"NCCL error",
        r"ncclInternalError",
        r"ncclSystemError",
        r"ncclUnhandledCudaError",
        r"ncclInvalidUsage",
        r"Test NCCL failure .{0,80}?'unhandled (cuda|system) error",
        r"ncclRemoteError",
        r"NCCL communicator was aborted",
        r"Failed to execute operation Connect from rank",
        # NCCL's socket layer failing to reach a peer (it prints these at WARN, or bare).
        r"socketStartConnect: Connect to \S+ failed",
        r"NCCL WARN .{0,60}?Connect to \S+ failed",
        r"\bNet ?: Call to (recv|send|connect) .{0,60}?failed",
        r"NET/\w+ ?: Connection closed by remote peer",
        r"NCCL operation \w+\(\) failed",
        IB_COMPLETION_ERROR,
    ),
    _rule(
        "segfault",
        SYMPTOM,
        r"Segment\s*ation fault",  # terminals re-wrapping a line can split the word
        r"SIGSEGV",
        r"(exit|return|status) ?code(\s+is|\s*[:=])?\s*(139|-11)\b",
        r"(exit(ed)? with (exit )?code|status of)\s*[:=]?\s*(139|-11)\b",
        r"Signal 11\b",
    ),
    # SIGILL: the CPU met an instruction it lacks (a wheel built for AVX-512 on an older CPU, a
    # binary for another architecture). A GPU's "illegal instruction was encountered" is a
    # kernel fault, claimed above by illegal_memory_access.
    _rule(
        "dependency_error",
        SYMPTOM,
        r"(?-i:^\W*Illegal instruction\b)",
        r"(signal 4|signal: 4)\b.{0,20}?Illegal instruction",
        r"\bIllegal instruction \(core dumped\)",
        r"\bSIGILL\b",
        r"(exit|return|status) ?code(\s+is|\s*[:=])?\s*(132|-4)\b",
    ),
    # Exit status 140 (128 + SIGUSR2): the signal LSF sends at a job's run limit (TERM_RUNLIMIT), and
    # the status Nextflow and nf-core read as a scheduler's time-limit kill on LSF and Slurm.
    _rule(
        "timeout",
        SYMPTOM,
        r"\bexit(ed)? (with )?(exit )?(status|code)\W{0,4}140\b",
    ),
    _rule(
        "host_oom",
        SYMPTOM,
        r"(exit|return|status) ?code(\s+is|\s*[:=])?\s*(137|-9)\b",
        r"(exit(ed)? with (exit )?code|status of)\s*[:=]?\s*(137|-9)\b",
        r"Signal 9\b",
        r"\bSIGKILL\b",
        r"^\W*(Killed|已杀死|Getötet|Processus arrêté)\W*$",  # the shell's report of a SIGKILL, in its locale
        # The same report from a script's shell, with the job's pid and command ("run.sh: line 62:
        # 8698 Killed   /path/to/cmd ...", "[1]+  Killed   python train.py").
        r"(?-i:(^|: line \d+:)\s*(\[\d+\][+-]?\s+)?\d*\s*Killed\s+\S)",
        r"killed by si\w*: Killed",
    ),
    _rule(
        "other",
        EXCEPTION,
        r"^\W*(\[rank\d+\]:\s*)?([\w.]+\.)?\w*(?-i:Error|Exception)\b\s*:",
        r"terminate called after throwing",
        r"\bAssertionError\b",
        # TensorFlow names the traced function that raised: "... [Op:__inference_train_function_18376]".
        r"\[Op:__inference_\w+\]",
        r"\bFATAL\b",
        # glog's fatal prefix (F1222 11:45:09.434870 8013 file.cc:646] ...) and its checks.
        r"(?-i:^\W*F\d{4} \d\d:\d\d:\d\d)",
        # ... and anywhere in a line (behind a progress bar's carriage return), with its whole
        # header: F<MMDD> <time> <thread> <file>:<line>] (absl prints the time as seconds).
        r"(?-i:(^|[^\w.])F\d{4} \d\d:\d\d:\d\d[\d.]*\s+\d+ [\w.+/-]+:\d+\] )",
        # gRPC's status codes: google.api_core's exceptions with the HTTP status ("InvalidArgument:
        # 400 ...", "FailedPrecondition: 400", "NotFound: 404"), grpc's `StatusCode.UNAVAILABLE`, and
        # absl's `status: INTERNAL: ...`.
        r"(?-i:\b(InvalidArgument|FailedPrecondition|PermissionDenied|NotFound|AlreadyExists|Unauthenticated|"
        r"Unauthorized|Forbidden|BadRequest|Conflict|InternalServerError|ServiceUnavailable|Unknown|Aborted|"
        r"OutOfRange|Unimplemented|DataLoss|GatewayTimeout|TooManyRequests|ResourceExhausted|Cancelled|"
        r"BadGateway|MethodNotAllowed|RetryError):\s*[45]\d\d\b)",
        r"(?-i:\bStatusCode\.(UNKNOWN|INVALID_ARGUMENT|NOT_FOUND|ALREADY_EXISTS|PERMISSION_DENIED|"
        r"FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE|UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS|"
        r"UNAUTHENTICATED)\b)",
        r"(?-i:\b(Non-OK-status|status): (INVALID_ARGUMENT|FAILED_PRECONDITION|INTERNAL|UNAVAILABLE|"
        r"UNIMPLEMENTED|DATA_LOSS|ABORTED|UNKNOWN|NOT_FOUND|PERMISSION_DENIED|OUT_OF_RANGE):)",
        r"Check failed: ",
        # The launcher's summary of a worker that failed without a telling signal.
        r"exits with return code = -?\d+",
        # Ray: a worker or actor died; the cause is in that worker's log (or telemetry), not here.
        r"A worker died or was killed while executing",
        r"The actor died unexpectedly",
        r"(?-i:ERROR: Script failed with exit code \d+)",
        # TensorFlow 1's way of naming an op's error ("AbortedError (see above for traceback): ...").
        r"(?-i:\w+Error) \(see above for traceback\)",
        r"Horovod has been shut down",
        # An exception named alone on its line (a title, or a message cut off): `pkg.mod.SomeError`.
        r"(?-i:^\W*([A-Za-z_]\w*\.)*[A-Z]\w*(Error|Exception)\W*$)",
        # An exception chain (Java, Nextflow, Python's "The above exception was the direct cause").
        r"(?-i:^\W*Caused by:\s*\S)",
        r"The above exception was the direct cause of the following exception",
        # c10's native exception report ("Exception raised from c10_cuda_check_implementation at ...").
        r"Exception raised from \S+ at \S+:\d+",
        # The JVM's and Rust's uncaught-exception reports.
        r"Exception in thread \"[^\"]*\" [\w.$]+",
        r"thread '[^']*' panicked at",
    ),
    # An abnormal end with no named cause: a signal, a non-zero exit status, a scheduler's kill.
    # Tier TRACEBACK: any named cause or symptom elsewhere in the log outranks them.
    _rule(
        "other",
        TRACEBACK,
        r"Traceback \(most recent call last\)",
        r"(?-i:^\s*ERROR\b)",
        r"(?-i:^\W*\[(ERROR|FATAL|CRITICAL)\])",  # a logger's level in brackets ("[ERROR] MD(...)")
        # A script's shell reporting a job's abnormal end ("job.sh: line 9: 4242 Aborted (core dumped) ./a").
        r"(?-i:(^|: line \d+:)\s*(\[\d+\][+-]?\s+)?\d+\s+(Aborted|Terminated|Bus error|Illegal instruction|"
        r"Floating point exception|Hangup|Segmentation fault)\b)",
        r"(?-i:\bFAILED\b)",
        r"core dumped",
        r"(?-i:^\W*(Aborted|Terminated|Bus error|Illegal instruction|Floating point exception)\b)",
        r"Signal \d+ \(SIG\w+\) received",
        r"received signal SIG\w+",
        r"exited on signal \d+",
        r"\bSIG(ABRT|BUS|FPE|ILL)\b",
        r"\bexit ?code\s*:\s*-?[1-9]\d*\b",
        r"exit(ed)? (with )?(status|code|exit code)\s*[:=]?\s*-?[1-9]\d*\b",
        r"non-?zero (exit )?(status|code)",
        r"(Process|Program) finished with exit code [1-9]",
        r"ChildFailedError",
        r"\bpanic: ",
        r"fatal error",
        r"PBS: job killed",
        r"\bjob killed\b",
        r"\bTERM_\w+: job killed",
        r"(?-i:\bBackoffLimitExceeded\b)",
        # A status field set to a failure: Kubernetes' and Argo's `phase: Failed`, a scheduler's
        # `State: FAILED`, a workflow's `status: error`, an orchestrator's `Reason: Error`.
        # The value as a family: a word of failure in any case, alone or in a compound
        # (RUN_FAILED, SYSTEM_ERROR, JobFailed); a dead or lost actor, node or task (Ray's
        # `state: DEAD`). The key may be quoted (`"status": "FAILED"`).
        r"\b(phase|status|state|job ?state|result|conclusion|outcome|reason)['\"]?\s*[:=]\s*['\"]?"
        r"(?-i:([A-Z]+_)*(FAILED|FAILURE|FAIL|ERROR|ERRORED|CRASHED|KILLED|ABORTED|EVICTED|DEAD|LOST|OUT_OF_MEMORY)"
        r"|([A-Z][a-z]+)?(Failed|Failure|Error|Errored|Crashed|Killed|Aborted|Evicted|Dead|Lost)"
        r"|failed|failure|error|errored|crashed|killed|aborted|dead|lost)\b",
        # An exit status in any punctuation ("terminated with an error exit status (140)", "[exit 2]").
        r"\bexit (status|code)\s*[(\[]\s*-?[1-9]\d*\s*[)\]]",
        r"\b(terminated|exited|died|stopped|ended|quit|crashed) (unexpectedly|abnormally|prematurely|"
        r"with an? (error|failure|exception|non-?zero))\b",
        # Something that ran failed, as its supervisor says: a pod, a job, a step, a process.
        r"^\W*(the |a |an |my )?[a-z-]*\s?(pod|job|task|step|process|container|worker|replica|workflow|stage|trial|"
        r"actor|training|run|experiment|command|script|program)\b[^.:]{0,60}? (has |have |had |was |is )?"
        r"(failed|crashed|errored)\b",
        r"\bfailed with (the |an? )?(message|error|exception|exit|status|code|return|signal)\b",
        r"\bfailed:\s*[1-9]\d*\b",  # a workflow's progress line counting failed tasks
        # An error line behind any prefix ("Error: ...", "error: ...", "Error executing process").
        r"(?-i:^\W*(Error|error|ERROR|Fatal|fatal)\s*[:!]\s*[^\d\s.%-])",  # not a metric ("error: 0.12")
        r"(?-i:^\W*(Error|ERROR) \w+ing\b)",
        r"(?-i:\b(CrashLoopBackOff|Evicted)\b)",
        # An exception named inside a line (a title, a sentence, behind a prefix no rule strips).
        r"(?-i:\b([a-z_]\w*\.)*[A-Z]\w*(Error|Exception): +[^\d\s])",
        r"\b(returncode|return code|returned)\s*[:=]?\s*-?[1-9]\d*\b",
        # glibc's and the C++ runtime's aborts on a corrupted heap or stack.
        r"double free or corruption",
        r"\b(free|malloc|realloc|munmap_chunk)\(\): (invalid|corrupted)",
        r"stack smashing detected",
        r"Back-off restarting failed container",
        r"\bExit_status\s*=\s*-?[1-9]\d*",  # PBS/Torque's accounting of a job that did not exit 0
        r"srun: error: .{0,120}?(Exited|Killed|Terminated|task \d+|failed on node)",
        r"_job_complete: JobId=\d+ WTERMSIG \d+",  # slurmctld: the job ended on a signal
        r"(?-i:slurmstepd: error)",
        r"OP_REQUIRES failed",
    ),
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
