"""The rule table the classifier reads: the rules that name a cause (`runs.failures.rules_causes`),
then symptoms, signals and abnormal ends. The first rule that matches a line claims it.
"""

from __future__ import annotations

from runs.failures import families
from runs.failures.rules import EXCEPTION, IB_COMPLETION_ERROR, SYMPTOM, TRACEBACK, Rule, family_rule, make_rule
from runs.failures.rules_causes import CAUSE_RULES

RULES: tuple[Rule, ...] = (
    *CAUSE_RULES,
    # Symptoms: NCCL, distributed timeouts and signals are what a cascade looks like from the
    # other ranks (see the timeout taxonomy in runs.failures.rules_causes).
    #
    # torchrun's agent itself signalled from outside (SIGHUP, SIGINT, SIGTERM): a stop, not a
    # fault, but a symptom: a scheduler also stops the other nodes of a job when one fails, and a
    # run past its time limit is stopped the same way. With no cause elsewhere it is a cancel.
    # The agent's own "Sending process N closing signal SIGTERM" to its workers is not this.
    make_rule(
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
    family_rule(families.COLLECTIVE_TIMEOUT),
    family_rule(families.COLLECTIVE_ERROR),
    *(family_rule(family) for family in families.NETWORK_6),
    make_rule(
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
    make_rule(
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
    make_rule(
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
    make_rule(
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
    make_rule(
        "timeout",
        SYMPTOM,
        r"\bexit(ed)? (with )?(exit )?(status|code)\W{0,4}140\b",
    ),
    make_rule(
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
    make_rule(
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
    make_rule(
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
