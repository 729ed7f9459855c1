"""The rules read first, those that name a cause (and the families by mechanism): the first part of
`runs.failures.rules_table.RULES`, in order.
"""

from __future__ import annotations

from runs.failures import families
from runs.failures.rules import ROOT, Rule, family_rule, make_rule

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

# Families by mechanism. Each rule names what happened, in the words of every ecosystem and
# scheduler that reports it: a time limit is Slurm's "DUE TO TIME LIMIT", PBS's "walltime ...
# exceeded limit", LSF's TERM_RUNLIMIT, Moab's "exceeded wallclock limit", Kubernetes'
# DeadlineExceeded, SageMaker's MaxRuntimeExceeded... (sources in tests/data/failures/SOURCES.md
# and docs/failure-classifier.md).
CAUSE_RULES: tuple[Rule, ...] = (
    make_rule(
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
    make_rule(
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
    make_rule(
        "host_oom",
        ROOT,
        r"shared memory segment .{0,80}?(size \d+|failed)",
        r"failed to extend /dev/shm",
        r"/dev/shm\b.{0,80}?No space left on device",  # noqa: S108 (a pattern, not a path)
        r"posix_fallocate failed.{0,20}?No space left on device",  # NCCL allocating in /dev/shm
        in_warning=True,
    ),
    # Disk before memory: TensorFlow reports a full disk as ResourceExhaustedError too.
    make_rule(
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
    family_rule(families.MEMORY_HOST),
    family_rule(families.MEMORY_DEVICE),
    # Host memory, before the GPU rules: Ray's OutOfMemoryError and its raylet's kills, the JVM's
    # OutOfMemoryError and TensorFlow's OOM on a CPU device are all the host running out.
    make_rule(
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
    make_rule(
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
    family_rule(families.MEMORY_UNQUALIFIED),
    *(family_rule(family) for family in families.CUDA_CODES),
    family_rule(families.SUBMISSION_REFUSED),
    family_rule(families.TIME_LIMIT_STATE),
    family_rule(families.LOSS_TERMINATED),
    family_rule(families.NO_GPU_SUPPORT),
    *(family_rule(family) for family in families.MECHANISMS_6),
    make_rule(
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
    make_rule(
        "device_assert",
        ROOT,
        r"device-side assert",
        r"Assertion `.*` failed",
        # A kernel's own assert line (`Indexing.cu:1422: indexSelectLargeIndex: block: [31,0,0],
        # thread: [16,0,0] Assertion ...`), whatever the assert's form or where its "failed" wraps.
        r"\.cu:\d+: .{0,300}?\bthread: \[[\d,]+\] Assertion\b",
        in_warning=True,
    ),
    make_rule(
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
    make_rule(
        "pickling_error",
        ROOT,
        r"PicklingError",
        r"can'?t pickle",
        r"cannot pickle",
        r"Could not serialize the (function|argument|object)",
        r"is not (JSON |msgpack )?serializable",
    ),
    # ABI and architecture mismatches that frameworks report only as a warning: still the cause.
    make_rule(
        "dependency_error",
        ROOT,
        r"is not compatible with the current PyTorch installation",
        r"compiled using NumPy 1\.x cannot be run in",
        in_warning=True,
    ),
    make_rule(
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
    make_rule(
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
    make_rule(
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
    make_rule(
        "cancelled",
        ROOT,
        r"KeyboardInterrupt",
        in_warning=True,
    ),
    make_rule(
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
)
