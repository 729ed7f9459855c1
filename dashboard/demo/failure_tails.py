"""How real failures end, as the failing node's last lines: the worker's error (CUDA OOM, NCCL
watchdog, Xid 79, ...) in the words PyTorch, NCCL, the driver and the kernel print, then
torchrun's ChildFailedError block when distributed. Pure: text from a `random.Random` and a `LogContext`.
"""

from __future__ import annotations

import random
from datetime import timedelta

from dashboard.demo.log_context import CODE, KERNEL_LINE, SITE, LogContext, glog_line, ip_host_name, random_pid
from dashboard.demo.series import PROFILES


def failure_tail(rng: random.Random, ctx: LogContext) -> list[str]:
    """The failing node's last lines: the worker's error, then torchrun's report if distributed."""
    prefix = f"[rank{ctx.failed_rank}]: " if ctx.distributed else ""
    # PyTorch prefixes a rank's Python output with "[rankN]: " and its C++ log lines with "[rankN]:";
    # kernel lines (dmesg, "[ 8123.456789] ...") come from the host, not from a rank.
    assert ctx.failure is not None  # only a failing node's log has a tail
    child = [
        line if KERNEL_LINE.match(line) else (prefix.rstrip() if line.startswith("[") else prefix) + line
        for line in _ERRORS[ctx.failure](rng, ctx)
    ]
    exitcode = {"host_oom": -9, "segfault": -11, "nccl_timeout": -6}.get(ctx.failure or "", 1)
    if not ctx.distributed:
        if ctx.failure == "host_oom":
            return [*child, "Killed"]
        if ctx.failure == "segfault":
            return [*child, "Segmentation fault (core dumped)"]
        return child
    return child + _child_failed(rng, ctx, exitcode)


def _child_failed(rng: random.Random, ctx: LogContext, exitcode: int) -> list[str]:
    ts = ctx.end - timedelta(seconds=2)
    agent = random_pid(rng)
    pid = agent + 13 + ctx.failed_local_rank
    api = "torch/distributed/elastic/multiprocessing/api.py"
    lines = []
    for local in range(min(ctx.gpus_per_node, 8)):
        if local != ctx.failed_local_rank:
            lines.append(
                glog_line("W", ts, agent, f"{api}:897", f"Sending process {agent + 13 + local} closing signal SIGTERM")
            )
    lines.append(glog_line("E", ts, agent, f"{api}:869",
                       f"failed (exitcode: {exitcode}) local_rank: {ctx.failed_local_rank} (pid: {pid}) of binary:"
                       " /databricks/python/bin/python"))  # fmt: skip
    signal = {-6: "Signal 6 (SIGABRT) received by PID", -9: "Signal 9 (SIGKILL) received by PID",
              -11: "Signal 11 (SIGSEGV) received by PID"}.get(exitcode)  # fmt: skip
    traceback = (
        f"{signal} {pid}" if signal else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    )
    return [
        *lines,
        "Traceback (most recent call last):",
        '  File "/databricks/python/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{SITE}/torch/distributed/run.py", line 919, in main',
        "    run(args)",
        f'  File "{SITE}/torch/distributed/run.py", line 910, in run',
        "    elastic_launch(",
        f'  File "{SITE}/torch/distributed/launcher/api.py", line 138, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{SITE}/torch/distributed/launcher/api.py", line 269, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        f"{CODE}/train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {ts:%Y-%m-%d_%H:%M:%S}",
        f"  host      : {ip_host_name(ctx.hosts[ctx.failed_node])}",
        f"  rank      : {ctx.failed_rank} (local_rank: {ctx.failed_local_rank})",
        f"  exitcode  : {exitcode} (pid: {pid})",
        "  error_file: <N/A>",
        f"  traceback : {traceback}",
        "============================================================",
    ]


def _train_frames(ctx: LogContext) -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "{CODE}/train.py", line 212, in <module>',
        "    main()",
        f'  File "{CODE}/train.py", line 187, in main',
        "    loss = train_step(model, batch, optimizer)",
        f'  File "{CODE}/train.py", line 121, in train_step',
        "    outputs = model(**batch)",
        f'  File "{SITE}/torch/nn/modules/module.py", line 1736, in _wrapped_call_impl',
        "    return self._call_impl(*args, **kwargs)",
        f'  File "{SITE}/torch/nn/modules/module.py", line 1747, in _call_impl',
        "    return forward_call(*args, **kwargs)",
    ]


def _cuda_advice() -> list[str]:
    return [
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might"
        " be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "",
    ]


def _oom(rng: random.Random, ctx: LogContext) -> list[str]:
    total = PROFILES[ctx.accelerator_type].torch_capacity_gib
    free = rng.uniform(0.2, 1.6)
    in_use = total - free
    by_torch = in_use - rng.uniform(1.5, 4.0)
    reserved = rng.uniform(0.4, 3.0)
    alloc = ctx.oom_alloc_gib
    return [
        *_train_frames(ctx),
        f'  File "{SITE}/transformers/models/llama/modeling_llama.py", line 1190, in forward',
        "    logits = logits.float()",
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB. GPU {ctx.failed_local_rank}"
        f" has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch memory,"
        f" this process has {in_use:.2f} GiB memory in use. Of the allocated memory {by_torch:.2f} GiB is allocated"
        f" by PyTorch, and {reserved:.2f} GiB is reserved by PyTorch but unallocated. If reserved but unallocated"
        " memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See"
        " documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    ]


def _nccl_timeout(rng: random.Random, ctx: LogContext) -> list[str]:
    rank = ctx.failed_rank
    seq = rng.randint(800, 90000)
    numel = rng.choice([65536, 1048576, 25165824, 134217728])
    work = (f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000)"
            f" ran for {600000 + rng.randint(2, 90)} milliseconds before timing out.")  # fmt: skip
    when = f"{ctx.end - timedelta(seconds=4):%m%d %H:%M:%S}.{rng.randint(100000, 999999)}"
    frame = f"{SITE}/torch/lib/libtorch_cuda.so"
    return [
        f"[E{when} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: {work}",
        f"[E{when} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error"
        " or timeout) detected by watchdog at work: " + str(seq) + ", last enqueued NCCL work: " + str(seq) + ","
        f" last completed NCCL work: {seq - 1}.",
        f"[E{when} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the"
        " asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"[E{when} ProcessGroupNCCL.cpp:636] [Rank {rank}] To avoid data inconsistency, we are taking the entire"
        " process down.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with"
        f" exception: [Rank {rank}] Watchdog caught collective operation timeout: {work}",
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent"
        " call first):",
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f4c2b96c446 in {frame})",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout() + 0x282 (0x7f4c2cc5a772 in {frame})",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f4c2cc61bb3 in {frame})",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f4c2cc6361d in {frame})",
        "frame #4: <unknown function> + 0x145c0 (0x7f4c74c3a5c0 in /databricks/python/lib/libtorch.so)",
        "frame #5: <unknown function> + 0x94ac3 (0x7f4c7c894ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #6: clone + 0x44 (0x7f4c7c925a04 in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def _illegal_access(rng: random.Random, ctx: LogContext) -> list[str]:
    return [
        *_train_frames(ctx),
        f'  File "{SITE}/flash_attn/flash_attn_interface.py", line 96, in _flash_attn_forward',
        "    out, softmax_lse, S_dmask, rng_state = flash_attn_cuda.fwd(",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        *_cuda_advice(),
    ]


def _device_assert(rng: random.Random, ctx: LogContext) -> list[str]:
    lines = [
        f"../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [{rng.randint(0, 900)},0,0],"
        f" thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed."
        for t in sorted(rng.sample(range(128), 4))
    ]
    return [
        *lines,
        *_train_frames(ctx),
        f'  File "{SITE}/torch/nn/modules/sparse.py", line 190, in forward',
        "    return F.embedding(",
        "RuntimeError: CUDA error: device-side assert triggered",
        *_cuda_advice(),
    ]


def _host_oom(rng: random.Random, ctx: LogContext) -> list[str]:
    pid = random_pid(rng) + 13 + ctx.failed_local_rank
    rss = rng.randint(150, 1800 if ctx.gpus_per_node == 8 else 180) * 1024 * 1024  # kB: the node's RAM
    return [
        f"[{rng.randint(8000, 90000)}.{rng.randint(0, 999999):06d}] Out of memory: Killed process {pid} (python)"
        f" total-vm:{rss + rng.randint(10**6, 10**7)}kB, anon-rss:{rss}kB, file-rss:0kB, shmem-rss:0kB, UID:0"
        " pgtables:412888kB oom_score_adj:0",
    ]


def _xid79(rng: random.Random, ctx: LogContext) -> list[str]:
    bus = rng.choice(["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"])
    uptime = f"{rng.randint(8000, 90000)}.{rng.randint(0, 999999):06d}"
    return [
        f"[{uptime}] NVRM: GPU at PCI:0000:{bus}:00: GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-"
        f"{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}",
        f"[{uptime}] NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        f"[{uptime}] NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.",
        *_train_frames(ctx),
        "RuntimeError: CUDA error: unspecified launch failure",
        *_cuda_advice(),
    ]


def _module_not_found(rng: random.Random, ctx: LogContext) -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "{CODE}/train.py", line 9, in <module>',
        "    from databricks_genai import finetuning",
        "ModuleNotFoundError: No module named 'databricks_genai'",
    ]


def _nan_loss(rng: random.Random, ctx: LogContext) -> list[str]:
    step = ctx.curve.step_at((ctx.end - ctx.start).total_seconds())
    return [
        "Traceback (most recent call last):",
        f'  File "{CODE}/train.py", line 212, in <module>',
        "    main()",
        f'  File "{CODE}/train.py", line 194, in main',
        '    raise FloatingPointError(f"Loss is {loss.item()} at step {step}")',
        f"FloatingPointError: Loss is nan at step {step}",
    ]


def _disk_full(rng: random.Random, ctx: LogContext) -> list[str]:
    step = ctx.curve.step_at((ctx.end - ctx.start).total_seconds())
    target = f"/local_disk0/tmp/checkpoint-{step}"
    return [
        f"Saving model checkpoint to {target}",
        "Traceback (most recent call last):",
        f'  File "{CODE}/train.py", line 203, in main',
        '    torch.save(state, f"{out_dir}/optimizer.pt")',
        f'  File "{SITE}/torch/serialization.py", line 850, in save',
        "    _save(",
        f'  File "{SITE}/torch/serialization.py", line 1114, in _save',
        "    zip_file.write_record(name, storage, num_bytes)",
        "RuntimeError: [enforce fail at inline_container.cc:783] . PytorchStreamWriter failed writing file"
        f" data/{rng.randint(40, 900)}: file write failed",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        f'  File "{CODE}/train.py", line 212, in <module>',
        "    main()",
        f'  File "{SITE}/torch/serialization.py", line 849, in save',
        "    with _open_zipfile_writer(f) as opened_zipfile:",
        f'  File "{SITE}/torch/serialization.py", line 690, in __exit__',
        "    self.file_like.write_end_of_file()",
        f"OSError: [Errno 28] No space left on device: '{target}/optimizer.pt'",
    ]


def _result_too_large(rng: random.Random, ctx: LogContext) -> list[str]:
    """Returning a model or predictions to the driver: Spark's result cap, or pickle's 4 GiB limit."""
    if ctx.source == "classic":
        size = rng.uniform(4.1, 9.5)
        return [
            "Traceback (most recent call last):",
            f'  File "{CODE}/train.py", line 230, in <module>',
            "    model = TorchDistributor(num_processes=8, local_mode=False, use_gpu=True).run(train_fn, config)",
            f'  File "{SITE}/pyspark/ml/torch/distributor.py", line 969, in run',
            "    return self._run_distributed_training(framework_wrapper_fn, train_object, None, *args, **kwargs)",
            f'  File "{SITE}/pyspark/errors/exceptions/captured.py", line 221, in deco',
            "    raise converted from None",
            "pyspark.errors.exceptions.captured.SparkException: Job aborted due to stage failure: Total size of"
            f" serialized results of 1 tasks ({size:.1f} GiB) is bigger than spark.driver.maxResultSize (4.0 GiB)",
        ]
    return [
        "Traceback (most recent call last):",
        f'  File "{CODE}/train.py", line 230, in <module>',
        "    results = run_training.distributed(config)",
        f'  File "{CODE}/train.py", line 141, in run_training',
        "    return pickle.dumps({'state_dict': model.state_dict(), 'predictions': preds}, protocol=3)",
        "OverflowError: cannot serialize a bytes object larger than 4 GiB",
    ]


def _segfault(rng: random.Random, ctx: LogContext) -> list[str]:
    return [
        "Fatal Python error: Segmentation fault",
        "",
        f"Thread 0x00007f{rng.getrandbits(36):09x} (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 331 in wait',
        f'  File "{SITE}/tqdm/_monitor.py", line 60 in run',
        '  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner',
        "",
        f"Current thread 0x00007f{rng.getrandbits(36):09x} (most recent call first):",
        f'  File "{SITE}/torch/utils/data/_utils/collate.py", line 163 in collate_tensor_fn',
        f'  File "{SITE}/torch/utils/data/dataloader.py", line 1344 in _next_data',
        f'  File "{CODE}/train.py", line 171 in main',
        f'  File "{CODE}/train.py", line 212 in <module>',
        "",
        "Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft, torch._C._linalg, torch._C._nn,"
        f" torch._C._sparse, torch._C._special, pyarrow.lib, pandas._libs.lib (total: {rng.randint(90, 140)})",
    ]


_ERRORS = {
    "cuda_oom": _oom,
    "nccl_timeout": _nccl_timeout,
    "illegal_memory_access": _illegal_access,
    "device_assert": _device_assert,
    "host_oom": _host_oom,
    "xid79": _xid79,
    "module_not_found": _module_not_found,
    "nan_loss": _nan_loss,
    "disk_full": _disk_full,
    "result_too_large": _result_too_large,
    "segfault": _segfault,
}
