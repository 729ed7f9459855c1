"""Log text for the demo seed: what a node of a training run prints, start to end.

The failure tails reproduce what PyTorch, NCCL, the CUDA driver and the kernel actually print
(message texts, `[rankN]:` prefixes, torchrun's ChildFailedError block), so the failure
classifier and the log viewer are exercised on the real thing. Pure: text from a
`random.Random` and a `LogContext`.

The failing node's last lines are `dashboard.demo.failure_tails`.
"""

from __future__ import annotations

import random
from datetime import timedelta

from dashboard.demo.failure_tails import failure_tail
from dashboard.demo.log_context import (
    CODE,
    LINES_PER_CHUNK,
    SITE,
    LogContext,
    clock_text,
    glog_line,
    ip_host_name,
    random_pid,
)
from runs.choices import RunStatus


def node_log(rng: random.Random, ctx: LogContext) -> list[str]:
    """The node's log as chunks of about LINES_PER_CHUNK lines, each ending in a newline."""
    lines = _startup(rng, ctx)
    if ctx.failure == "module_not_found":
        lines += failure_tail(rng, ctx) if ctx.is_failing_node else _terminated(rng, ctx)
        return _chunks(lines)
    lines += _training(rng, ctx)
    lines += closing_lines(rng, ctx)
    return _chunks(lines)


def progress_lines(rng: random.Random, ctx: LogContext, after_step: int) -> list[str]:
    """The progress lines of steps after `after_step` up to `ctx.end` (the live demo's next lines)."""
    return _training(rng, ctx, after_step)


def closing_lines(rng: random.Random, ctx: LogContext) -> list[str]:
    """How the node's log ends for the attempt's status: nothing while running, else its last lines."""
    if ctx.status == RunStatus.RUNNING:
        return []
    if ctx.failure and ctx.is_failing_node:
        return failure_tail(rng, ctx)
    if ctx.status == RunStatus.SUCCEEDED:
        return _success(rng, ctx)
    # Another node failed, or the run was cancelled or timed out: SIGTERM from above.
    return _terminated(rng, ctx)


def _chunks(lines: list[str]) -> list[str]:
    return [
        "".join(f"{line}\n" for line in lines[i : i + LINES_PER_CHUNK]) for i in range(0, len(lines), LINES_PER_CHUNK)
    ]


def _startup(rng: random.Random, ctx: LogContext) -> list[str]:
    ts = ctx.start + timedelta(seconds=rng.randint(20, 70))
    agent = random_pid(rng)
    script = f"{CODE}/train.py --config configs/{ctx.experiment}.yaml"
    lines = [f"Attempt {ctx.attempt} on {ctx.hosts[ctx.node_index]} (node {ctx.node_index + 1} of {len(ctx.hosts)})"]
    if ctx.distributed:
        lines.append(
            f"+ torchrun --nnodes={len(ctx.hosts)} --nproc_per_node={ctx.gpus_per_node} --node_rank={ctx.node_index}"
            f" --rdzv_backend=c10d --rdzv_endpoint={ctx.hosts[0]}:29400 {script}"
        )
        banner = "torch/distributed/run.py:793"
        lines += [
            glog_line("W", ts, agent, banner, ""),
            glog_line("W", ts, agent, banner, "*****************************************"),
            glog_line(
                "W",
                ts,
                agent,
                banner,
                "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your"
                " system being overloaded, please further tune the variable for optimal performance in your"
                " application as needed. ",
            ),
            glog_line("W", ts, agent, banner, "*****************************************"),
        ]
    else:
        lines.append(f"+ python {script}")
    host = ip_host_name(ctx.hosts[ctx.node_index])
    pid = agent + 13
    if ctx.distributed:
        lines += [
            f"{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:{ctx.hosts[ctx.node_index]}<0>",
            f"{host}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 12040",
            "NCCL version 2.21.5+cuda12.4",
            f"{host}:{pid}:{pid + 171} [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)",
            f"{host}:{pid}:{pid + 171} [0] NCCL INFO Using network AWS Libfabric",
            f"{host}:{pid}:{pid + 171} [0] NCCL INFO comm 0x55d5c8f0e2a0 rank {ctx.node_index * ctx.gpus_per_node}"
            f" nranks {ctx.world_size} cudaDev 0 nvmlDev 0 busId 53000 commId 0x{rng.getrandbits(64):016x}"
            " - Init START",
            f"{host}:{pid}:{pid + 171} [0] NCCL INFO Connected all rings",
            f"{host}:{pid}:{pid + 171} [0] NCCL INFO Connected all trees",
            f"{host}:{pid}:{pid + 171} [0] NCCL INFO comm 0x55d5c8f0e2a0 rank {ctx.node_index * ctx.gpus_per_node}"
            f" nranks {ctx.world_size} cudaDev 0 nvmlDev 0 busId 53000 - Init COMPLETE",
        ]
    if ctx.failure == "module_not_found":
        return lines
    if ctx.family == "nlp":
        lines.append(
            f"{SITE}/transformers/tokenization_utils_base.py:1617: FutureWarning: `clean_up_tokenization_spaces` was"
            " not set. It will be set to `True` by default. This behavior will be deprecated in transformers v4.45,"
            " and will be then set to `False` by default."
        )
    lines.append(
        f"{SITE}/torch/utils/checkpoint.py:1399: FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated."
        " Please use `torch.amp.autocast('cpu', args...)` instead."
    )
    if ctx.distributed:
        lines.append(
            f"[rank{ctx.node_index * ctx.gpus_per_node}]:[W{ts:%m%d %H:%M:%S}.118 ProcessGroupNCCL.cpp:4115]"
            f" [PG ID 0 PG GUID 0 Rank {ctx.node_index * ctx.gpus_per_node}]  using GPU 0 to perform barrier as"
            " devices used by this process are currently unknown. This can potentially cause a hang if this rank to"
            " GPU mapping is incorrect."
        )
    return lines


def _training(rng: random.Random, ctx: LogContext, after_step: int = -1) -> list[str]:
    """Progress lines; only the first node's rank 0 reports, the others stay quiet.

    `after_step` >= 0 continues a log already written up to that step (no header again).
    """
    if ctx.node_index != 0:
        if after_step >= 0:
            return []
        return [f"[rank{ctx.node_index * ctx.gpus_per_node}]: Joined training on {ctx.hosts[ctx.node_index]}"]
    curve = ctx.curve
    last = curve.step_at((ctx.end - ctx.start).total_seconds())
    every = curve.log_every() * 3
    lines = (
        []
        if after_step >= 0
        else [f"Training {ctx.experiment}: {curve.total_steps} steps, world size {ctx.world_size}"]
    )
    first = (max(after_step, 0) // every + 1) * every
    for step in range(first, last + 1, every):
        elapsed = step * curve.step_seconds
        loss = curve.loss(rng, step)
        if ctx.failure == "nan_loss" and last - step < every * 3:
            loss *= 4.0 + 30.0 * (1 - (last - step) / (every * 3))
        if ctx.family == "nlp":
            pct = 100 * step // curve.total_steps
            bar = ("█" * (pct // 10)).ljust(10)
            remaining = (curve.total_steps - step) * curve.step_seconds
            lines.append(
                f" {pct:3d}%|{bar}| {step}/{curve.total_steps} [{clock_text(elapsed)}<{clock_text(remaining)},"
                f" {curve.step_seconds:.2f}s/it]"
            )
            lines.append(
                f"{{'loss': {loss:.4f}, 'grad_norm': {rng.lognormvariate(0, 0.3):.4f},"
                f" 'learning_rate': {curve.lr(step):.3e}, 'epoch': {3 * step / curve.total_steps:.2f}}}"
            )
        else:
            ts = ctx.start + timedelta(seconds=elapsed)
            lines.append(
                f"[{ts:%Y-%m-%d %H:%M:%S},{ts.microsecond // 1000:03d}][train][INFO] - step {step}/{curve.total_steps}"
                f" | loss {loss:.4f} | lr {curve.lr(step):.2e} | grad_norm {rng.lognormvariate(0, 0.3):.3f}"
                f" | {curve.throughput * rng.uniform(0.95, 1.03):.1f} samples/s"
            )
        if step % (every * 5) == 0:
            lines.append(f"Saving model checkpoint to {ctx.checkpoint_dir}/checkpoint-{step}")
        if rng.random() < 0.03:
            lines.append(
                f"{SITE}/torch/distributed/fsdp/_state_dict_utils.py:827: UserWarning: When using"
                " ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict will be returned."
            )
    return lines


def _success(rng: random.Random, ctx: LogContext) -> list[str]:
    if ctx.node_index != 0:
        return [f"[rank{ctx.node_index * ctx.gpus_per_node}]: Training finished, exiting"]
    runtime = (ctx.end - ctx.start).total_seconds()
    model = ctx.experiment.replace("-", "_")
    return [
        f"{{'train_runtime': {runtime:.4f}, 'train_steps_per_second': {1 / ctx.curve.step_seconds:.3f},"
        f" 'train_loss': {ctx.curve.loss_end * rng.uniform(1.0, 1.1):.4f}, 'epoch': 3.0}}",
        f"Saving model checkpoint to {ctx.checkpoint_dir}/final",
        f"Successfully registered model 'main.{ctx.family}.{model}'.",
        f"Created version '{rng.randint(2, 40)}' of model 'main.{ctx.family}.{model}'.",
    ]


def _terminated(rng: random.Random, ctx: LogContext) -> list[str]:
    """A node told to stop: torchrun's agent forwards SIGTERM to its workers and exits."""
    ts = ctx.end - timedelta(seconds=rng.randint(1, 4))
    agent = random_pid(rng)
    api = "torch/distributed/elastic/multiprocessing/api.py"
    lines = [glog_line("W", ts, agent, "torch/distributed/elastic/agent/server/api.py:704",
                   "Received Signals.SIGTERM death signal, shutting down workers")]  # fmt: skip
    for local in range(min(ctx.gpus_per_node, 8)):
        lines.append(
            glog_line("W", ts, agent, f"{api}:897", f"Sending process {agent + 13 + local} closing signal SIGTERM")
        )
    lines += [
        "Traceback (most recent call last):",
        '  File "/databricks/python/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{SITE}/torch/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler',
        '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
        f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {agent} got signal: 15",
    ]
    return lines
