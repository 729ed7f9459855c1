"""Failure families read by mechanism, whatever a framework's wording: pattern data for `rules_table.RULES`.

Each family is a cause with one mechanism and many wordings, written so that a wording no rule
has seen still lands in its class:

* out of memory, device or host decided by the words around it (`MEMORY_*`): any allocator's
  refusal ("out of memory", "insufficient memory", "failed to allocate", "allocation failure",
  "allocating <= available", OOM) is the host's when the line names host memory (host, RAM,
  the paging file, swap, pinned memory) and the device's when it names a device (CUDA, a GPU,
  device memory, cudaMalloc, OpenCL, HIP); with neither, an allocator's refusal in a GPU run is
  the device's (Caffe's `Check failed: ... out of memory`, CuPy's `Out of memory allocating`);
* CUDA runtime and driver error codes by number (`CUDA_CODES`): the number says the cause
  however a framework prints it (`CUDA error 700`, glog's `cudaSuccess (2 vs. 0)`);
* collective communication (`COLLECTIVE_*`): a peer that closed or reset the connection, a
  transport's full-mesh connect failing (Gloo), a stall inspector's ranks that never joined
  (Horovod), in NCCL's, Gloo's, MPI's and Horovod's words;
* a scheduler refusing a submission (`SUBMISSION_REFUSED`), against a time limit reached after
  the run started (`TIME_LIMIT_STATE`: Slurm's TIMEOUT state as any reporter prints it);
* a training loop stopped on an invalid loss (`LOSS_TERMINATED`);
* a build or machine without the GPU support asked for (`NO_GPU_SUPPORT`).

Context words are joined by `.*`, not a bounded `.{0,N}`: RE2 unrolls a bound into N copies of
the states, and with alternations on both sides that doubled the 300,000-line log's CPU time; the
line is cut at `classify.MAX_SCAN_CHARS` anyway.

The rules are data only (class, tier, alternatives, in_warning): `rules.family_rule` compiles them, and
`rules_causes.py` and `rules_table.py` place them in order, so this module imports nothing of the
classifier and adds no import cycle.
"""

from __future__ import annotations

CAUSE = "cause"  # rules.ROOT
SYMPTOM = "symptom"  # rules.SYMPTOM

# (class_id, tier, alternatives, in_warning)
Family = tuple[str, str, tuple[str, ...], bool]

# An allocator's refusal, in any framework's words.
_REFUSED = (
    r"(out of (device |host |gpu |system |physical )?memory"
    r"|(insufficient|not enough) (device |host |gpu |system )?memory"
    r"|(fail(ed|ure|s)?|unable|can'?t|cannot) (to )?allocat\w*"
    r"|(memory |buffer )?allocation (failed|failure|error)"
    r"|memory allocation fail\w*"
    r"|error allocating \d+ bytes"
    r"|allocating <= available"
    r"|\bOOM\b)"
)
# Words that put the memory on the host.
_HOST = (
    r"(\[?\bHOST\b\]?|\bhost memory|\bRAM\b|paging file|\bswap\b|system memory|\bCPU\b|cpu memory"
    r"|\bpinned\b|page-locked|Host(Alloc|Malloc|Register)|MallocHost)"
)
# Words that put it on a device (a GPU or another accelerator).
_DEVICE = (
    r"(\bCUDA|\bcuda\w*|\bGPU|\bgpu\w*|device memory|device buffer|on device|\bVRAM\b|OpenCL|\bcl_mem"
    r"|\bHIP\b|\bhip\w+|ROCm|cudaMalloc\w*|cuMem\w*|\bcupy\b|\bNPU\b|\bTPU\b)"
)

MEMORY_HOST: Family = (
    "host_oom",
    CAUSE,
    (
        _REFUSED + r".*" + _HOST,
        _HOST + r".*" + _REFUSED,
        r"(out of|insufficient|not enough) (host|system|physical|cpu) memory",
        # Windows' commit limit (WinError 1455): the paging file is the host's memory.
        r"paging file is too small",
        r"\bWinError 1455\b",
    ),
    True,
)
MEMORY_DEVICE: Family = (
    "cuda_oom",
    CAUSE,
    (
        _REFUSED + r".*" + _DEVICE,
        _DEVICE + r".*" + _REFUSED,
        r"(out of|insufficient|not enough) (device|gpu|accelerator) memory",
        # OpenCL's CL_MEM_OBJECT_ALLOCATION_FAILURE (-4) and CL_OUT_OF_RESOURCES, in words.
        r"Memory Object Allocation Failure",
        r"CL_MEM_OBJECT_ALLOCATION_FAILURE",
    ),
    True,
)
# An allocator's refusal that names neither: in a GPU training run, the device's. Not read in a
# warning (TensorFlow's BFC allocator warns that it "ran out of memory" and then carries on).
MEMORY_UNQUALIFIED: Family = (
    "cuda_oom",
    CAUSE,
    (
        r"out of memory allocating",
        r"\bmemory allocation failed\b",
        r"\ballocating <= available\b",
        r"\bfailed to allocate \d+(\.\d+)? ?([KMGT]i?B|bytes)\b",
    ),
    False,
)


def _cuda_code(*numbers: int) -> tuple[str, ...]:
    """A CUDA runtime or driver error code, however it is printed."""
    alternation = "|".join(str(n) for n in numbers)
    return (
        rf"\bCUDA[ _]?(error|err|failure|status|result)\w*( code)?\s*[:=#]?\s*\(?({alternation})\)?(\D|$)",
        rf"\bcuda(Success|Error\w*) \(({alternation}) vs\. 0\)",  # glog's CHECK_EQ(error, cudaSuccess)
        rf"\bCUresult\s*[:=]?\s*({alternation})\b",
    )


CUDA_CODES: tuple[Family, ...] = (
    ("cuda_oom", CAUSE, _cuda_code(2), True),  # cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY
    # cudaErrorIllegalAddress, IllegalInstruction, MisalignedAddress, LaunchFailure.
    ("illegal_memory_access", CAUSE, _cuda_code(700, 715, 716, 719), True),
    ("device_assert", CAUSE, _cuda_code(710), True),  # cudaErrorAssert
    ("gpu_hardware", CAUSE, _cuda_code(214, 220, 714), True),  # ECC, NVLink, hardware stack
    # InsufficientDriver, NoDevice, NoKernelImageForDevice, UnsupportedPtxVersion, CompatNotSupported.
    ("dependency_error", CAUSE, _cuda_code(35, 100, 209, 222, 804), True),
)

# Libraries and transports of collective communication, as their lines name them.
_COLLECTIVE = (
    r"(\bNCCL\b|\bgloo\b|\bc10d\b|ProcessGroup\w*|\bhorovod\b|\bMPI(_\w+)?\b|\bmpirun\b|\bORTE\b|\bUCX\b"
    r"|\bibverbs\b|socket\.h:|pair\.cc:|\bNet ?:|NET/\w+)"
)
_PEER_LOST = (
    r"(connection (was )?(closed|reset|refused|lost)|closed by (the )?(remote )?peer|reset by peer"
    r"|Broken pipe|peer (closed|hung up|disconnected))"
)
COLLECTIVE_ERROR: Family = (
    "nccl_error",
    SYMPTOM,
    (
        _COLLECTIVE + r".*" + _PEER_LOST,
        r"connectFullMesh failed",
        r"\b(NCCL|gloo)\b.*Call to (bind|connect|accept|listen|recv|send) failed",
    ),
    True,
)
COLLECTIVE_TIMEOUT: Family = (
    "nccl_timeout",
    SYMPTOM,
    (
        # Horovod's stall inspector: ranks that submitted a collective waiting for the rest.
        r"waiting for (the )?remainder of ranks",
        r"stall_inspector\.cc",
        r"\bStalled ranks\b",
        r"(timed out|timeout) waiting for (all |the )?(other |remaining )?(ranks|peers|workers)\b",
    ),
    True,
)

# A scheduler refusing the submission itself: the job never ran (capacity, by the corpus's
# convention: the queue or its controller said no).
SUBMISSION_REFUSED: Family = (
    "capacity_unavailable",
    CAUSE,
    (
        r"\b(sbatch|salloc|srun|qsub|bsub|msub)\b.*(submission failed|submit error|job rejected"
        r"|Unable to allocate resources)",
        r"Batch job submission failed",
        r"\bjob submission (failed|refused|rejected)\b",
    ),
    False,
)
# Slurm's TIMEOUT state as a workflow tool reports it (`{'2254': 'TIMEOUT'}`, `state TIMEOUT`).
TIME_LIMIT_STATE: Family = (
    "timeout",
    CAUSE,
    (
        r"\b(status|state|sacct)\w*\b.*['\"](?-i:TIMEOUT|TIMED_OUT)['\"]",
        r"\btimes out after \d+(\.\d+)? ?(minutes?|hours?|days?)\b",
    ),
    False,
)
# A training loop that stopped itself on a loss it could not use (Keras' TerminateOnNaN, a
# trainer's check for a non-finite loss).
LOSS_TERMINATED: Family = (
    "nan_divergence",
    CAUSE,
    (
        r"invalid loss,? terminating",
        r"terminat\w* (training )?(on|due to|because of) (a )?(nan|inf|invalid|non-finite) loss",
        r"\bloss (is|became|was) (not finite|non-finite|invalid)\b",
    ),
    True,
)
# A build or machine without the GPU support the run asked for: the installed software, not the run.
NO_GPU_SUPPORT: Family = (
    "dependency_error",
    CAUSE,
    (
        r"(GPU|CUDA|cuDNN|NCCL|OpenCL|ROCm)\b.*\bnot (enabled|compiled|built|supported) (in|with|for) this build",
        r"Recompile with .*(GPU|CUDA|OpenCL)",
        r"\b(built|compiled) without (GPU|CUDA|cuDNN|NCCL|OpenCL) support",
        r"\bNVIDIA driver\b.*\b(not (found|installed|loaded)|missing)\b",
    ),
    True,
)

# The system taking the machine back: a spot or preemptible VM's preemption or reclaim notice, in
# GCP's, AWS's and Azure's words (a cancellation by the system, by the corpus's convention).
PREEMPTED: Family = (
    "cancelled",
    CAUSE,
    (
        r"\b(instance|vm|node|machine|host|worker|job|task|pod|tpu)s?\b.*\b(was |were |is |has been |been )"
        r"(preempted|reclaimed)\b",
        r"\b(spot|preemptible|low-priority)\b.*\b(preempt\w*|reclaim\w*|interrupt\w*|evict\w*|termination notice)",
        r"\b(preempt\w*|reclaim\w*|interrupt\w*|evict\w*)\b.*\b(spot|preemptible|low-priority) (instance|vm|node)",
        r"\btermination is imminent\b",
        r"\bspot[- ]instance[- ](interruption|termination)\b",
        r"\b(Preempted|PREEMPTED)\b.*\b(state|status|reason)\b",
        r"\b(state|status|reason)['\"]?\s*[:=]\s*['\"]?(?-i:PREEMPTED|Preempted)\b",
    ),
    False,
)
# Disk by any name: a quota over, ephemeral storage over its limit, HTTP 507.
DISK_QUOTA: Family = (
    "disk_full",
    CAUSE,
    (
        r"\bephemeral[- ]?(local )?storage\b.*\b(exceed\w*|over|limit|usage)\b",
        r"\b(disk|storage|inode) quota\b.*\b(exceed\w*|reached|over)\b",
        r"\bDisk quota exceeded\b",
        r"\bEDQUOT\b",
        r"\b507\b.*\bInsufficient Storage\b",
        r"\bInsufficient Storage\b",
        r"\bThe node (was|is) low on resource:? \[?(ephemeral-storage|DiskPressure)",
        r"\bDiskPressure\b",
    ),
    True,
)
# An extension or op that failed to build: a compiler's or linker's error, a missing header, the
# installed toolchain not fitting (a dependency error, by the corpus's convention).
EXTENSION_BUILD: Family = (
    "dependency_error",
    CAUSE,
    (
        r"(?-i:^\W*FAILED: \S+\.(cuda\.o|o|so)\b)",
        r"\bfatal error: [\w./-]+\.(h|hpp|cuh): No such file or directory",
        r"\b(/usr/bin/)?ld: cannot find\b",
        r"\bcollect2: error: ld returned\b",
        r"\bnvcc (fatal|error)\b",
        r"\berror: command '[^']*(nvcc|gcc|g\+\+|c\+\+|cl\.exe)' failed\b",
        r"\bError building extension\b",
        r"\bFailed building wheel for\b",
        r"\bundefined symbol: ",
        # A library too new or too old for its caller: an attribute the installed version lacks.
        r"(?-i:AttributeError): ('[\w.]+' object|module '[\w.]+') has no attribute '(model_executor|\w+_executor)'",
    ),
    False,
)
# A store or rendezvous the ranks could not reach in time: the network's, not a collective's hang.
STORE_CONNECT_TIMEOUT: Family = (
    "nccl_timeout",
    SYMPTOM,
    (
        r"\bconnect\(\) timed out\b",
        r"\b(TCPStore|c10d|store|rendezvous|rdzv)\b.*\b(timed out|timeout)\b.*\b(connect|join|wait)",
        r"\bRendezvousTimeoutError\b",
        r"\bSocket Timeout\b.*\b(connect|store)\b",
    ),
    True,
)
# A process pool that cannot pickle a local function (Windows' spawn): pickling, not a generic error.
LOCAL_OBJECT: Family = (
    "pickling_error",
    CAUSE,
    (r"\bCan'?t (get|pickle) local object\b", r"\bCan'?t pickle <function\b"),
    False,
)
# The paging file in German (WinError 1455's text, "Die Auslagerungsdatei ist zu klein").
PAGING_FILE_LOCALISED: Family = ("host_oom", CAUSE, (r"\bAuslagerungsdatei ist zu klein\b",), True)
# An accelerator's allocator refusing ("Resource exhausted: Attempting to allocate", XLA on TPUs).
ACCELERATOR_EXHAUSTED: Family = (
    "cuda_oom",
    CAUSE,
    (r"\bResource ?exhausted\b.*\b(Attempting to allocate|allocat\w*|HBM|memory)\b",),
    True,
)
# An InfiniBand port's async event, as NCCL reports it: the fabric failed under the job.
IB_ASYNC_EVENT: Family = (
    "nccl_error",
    SYMPTOM,
    (r"NET/IB ?: Got async event ?: (port error|.*(fatal|error))",),
    True,
)
# A scheduler refusing the account or partition a submission names (slurmctld's words).
ACCOUNT_REFUSED: Family = (
    "capacity_unavailable",
    CAUSE,
    (r"\bInvalid account or account/partition combination\b", r"\bquota violation\b"),
    False,
)

# Wave 7's mechanisms.
# A socket-level failure (refused, reset, no route, timed out: ECONNREFUSED, ECONNRESET,
# EHOSTUNREACH, ETIMEDOUT) reaching a distributed store or rendezvous: the network's, as a store
# connect timeout is. c10d raises a bare socket error as a RuntimeError whose whole message is it.
_SOCKET_FAILED = (
    r"(Connection (refused|reset|timed out)|reset by peer|No route to host|Network is unreachable"
    r"|errno:? (104|110|111|113)\b|ECONN(REFUSED|RESET)|EHOSTUNREACH|ETIMEDOUT)"
)
STORE_SOCKET: Family = (
    "nccl_timeout",
    SYMPTOM,
    (
        r"(?-i:\bDistNetworkError\b)",
        r"\bclient socket has failed to connect\b",
        r"(?-i:^\W*RuntimeError: )" + _SOCKET_FAILED + r"\W*$",
        r"\b(TCPStore|rendezvous|rdzv|init_process_group)\b.*" + _SOCKET_FAILED,
    ),
    False,  # c10d warns `[W socket.cpp] ... failed to connect` while it retries
)
# NCCL's bootstrap connecting its ranks' sockets (`socketPollConnect`, `bootstrap`): a transport failure.
BOOTSTRAP_SOCKET: Family = (
    "nccl_error",
    SYMPTOM,
    (r"\b(socket\w*Connect|bootstrap\w*)\b.*" + _SOCKET_FAILED,),
    True,
)
# NCCL at INFO level reporting a failed socket call: no cause while it retries, the run's cause
# when the log ends there with nothing else to explain it (classify reads it from the tail only).
INFO_SOCKET_FAILED = _COLLECTIVE + r".*\b(Call to \w+|connect\w*)\b.*\b(returned|failed)\b.*" + _SOCKET_FAILED
# cuDNN finding no algorithm it can run: its workspace did not fit in the GPU's memory.
CUDNN_NO_ALGORITHM: Family = (
    "cuda_oom",
    CAUSE,
    (r"\bUnable to find a valid cuDNN algorithm\b", r"\bcuDNN\b.*\bno (valid |suitable )?algorithm\b"),
    False,
)
# A cluster manager's failure status (Databricks' SELF_BOOTSTRAP_FAILURE, a cluster that cannot
# start): an unrecognised failure of the platform, not of the run's code.
CLUSTER_FAILED: Family = (
    "other",
    SYMPTOM,
    (
        r"\b(cannot|failed to|unable to) (create|start|launch|resize) (the )?cluster\b",
        r"\b(cluster|driver|instance)\b.*(?-i:\b[A-Z]+(_[A-Z]+)*_(FAILURE|ERROR)\b)",
        r"\bSelf-bootstrap failure\b",
    ),
    False,
)
# A container whose entrypoint cannot be executed (SageMaker's `exec: "train"`, Docker's OCI
# runtime): the job's configuration, an unrecognised failure by the corpus's convention.
ENTRYPOINT_MISSING: Family = (
    "other",
    SYMPTOM,
    (
        r"\bexec: \S+: executable file not found\b",
        r"\bexecutable file not found in \$PATH\b",
        r"\bOCI runtime (create|exec) failed\b",
        r"\bexec format error\b",
        r"(?-i:^\W*(/bin/)?(ba)?sh: (line \d+: )?\S+: (command not found|No such file or directory)\s*$)",
    ),
    False,
)

# Wave 6's (and 7's) mechanisms, in the order the rule table reads them: causes, then the network's symptoms.
MECHANISMS_6: tuple[Family, ...] = (
    PREEMPTED,
    DISK_QUOTA,
    EXTENSION_BUILD,
    LOCAL_OBJECT,
    PAGING_FILE_LOCALISED,
    ACCELERATOR_EXHAUSTED,
    ACCOUNT_REFUSED,
    CUDNN_NO_ALGORITHM,
)
NETWORK_6: tuple[Family, ...] = (
    STORE_CONNECT_TIMEOUT,
    IB_ASYNC_EVENT,
    STORE_SOCKET,
    BOOTSTRAP_SOCKET,
    CLUSTER_FAILED,
    ENTRYPOINT_MISSING,
)

# An abnormal end when no class rule matched: a line of the log's tail at error level with a word
# of failure. Not an INFO, DEBUG or warning line (a logger's word, glog's and Ray's letter: `I1130`,
# `[2022-04-12 09:34:39,126 I 74 74]`), not a count of none ("0 errors", "no error").
ABNORMAL_END = (
    r"\b(error|errors|failed|failure|fatal|exception|killed|dead|died|abort(ed)?|exhausted|preempted|"
    r"refused|timed out|cannot|unable|(is|was|went|goes|are|were) down)\b"
    r"|(?-i:\b[A-Z]+_(ERROR|FAILED|FAILURE)\b)"
)
# A launcher ending its workers because one of them died (DeepSpeed's, logged at INFO level): an
# abnormal end whatever the level.
LAUNCHER_KILL = r"\bKilling subprocess\b|\bsigkill_handler\b"
NOT_AN_ERROR = (
    r"(?-i:\b(INFO|DEBUG|TRACE|WARN|WARNING)\b|\w+Warning\b)|\[(I|D|W) |^\W*[IDW]\d{4} |\d (?-i:[IDW]) \d+ \d+\]"
    r"|\b(0|no|zero|without) (errors?|failures?)\b|\berrors?\s*[:=]\s*0\b|\bfailed\s*[:=]\s*0\b"
    r"|\bif (it |this )?fails\b|\bon error\b|\berror_?(rate|bar|handler)\b|\bignore_errors\b"
)
