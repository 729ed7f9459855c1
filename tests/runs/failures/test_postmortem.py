"""runs.failures.classify_pass.classify_run: the first causal error across nodes, attempts, exit codes,
GPU events and timing; the task through a real worker; the backfill command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction

from runs import ingest
from runs.choices import RunEventKind, RunStatus
from runs.failures.classify_pass import classify_run, line_timestamp, signature
from runs.models import Attempt, FailureAnalysis, GpuMinute, LogChunk, Node, Run, RunEvent
from tests.conftest import T0, World, make_run, wait_for

NCCL_WATCHDOG = (
    "[rank{rank}]:[E ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1234, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
)
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.1 GiB"


def add_log(run: Run, attempt: int, node_index: int, text: str, exit_code: int | None = None) -> Node:
    """A node (created if needed) of an attempt (created if needed) with `text` as its log, in two chunks."""
    att, _ = Attempt.objects.get_or_create(
        run=run, number=attempt, defaults={"status": run.status, "started_at": run.started_at, "ended_at": run.ended_at}
    )
    node, _ = Node.objects.get_or_create(attempt=att, index=node_index, defaults={"status": run.status})
    if exit_code is not None:
        node.exit_code = exit_code
        node.save(update_fields=["exit_code"])
    half = len(text) // 2
    for seq, part in enumerate((text[:half], text[half:])):
        LogChunk.objects.create(node=node, seq=seq, text=part, line_count=part.count("\n"))
    return node


def failed_run(world: World, external_id: str = "failed-1", **fields: object) -> Run:
    run = make_run(world.vision, external_id, status=RunStatus.FAILED, **fields)
    Node.objects.filter(attempt__run=run).delete()
    return run


@pytest.mark.django_db
def test_oom_on_rank_3_beats_nccl_watchdog_on_the_others(world: World) -> None:
    run = failed_run(world)
    for rank in (0, 1, 2):
        add_log(run, 1, rank, f"step 100 loss 2.1\nstep 101 loss 2.0\n{NCCL_WATCHDOG.format(rank=rank)}\n", exit_code=1)
    add_log(run, 1, 3, f"step 100 loss 2.1\nstep 101 loss 2.0\n{OOM}\nTraceback (most recent call last):\n", 1)

    analysis = classify_run(run)

    assert analysis.class_id == "cuda_oom"
    assert (analysis.attempt_number, analysis.node_index, analysis.line) == (1, 3, 3)
    assert "CUDA out of memory" in analysis.evidence
    assert analysis.remedy and analysis.title == "GPU out of memory"
    # Idempotent: a second pass overwrites the same row.
    classify_run(run)
    assert FailureAnalysis.objects.filter(run=run).count() == 1


@pytest.mark.django_db
def test_earliest_timestamp_wins_among_root_causes(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, "2026-11-02T09:20:00Z RuntimeError: CUDA error: an illegal memory access was encountered\n")
    add_log(run, 1, 1, f"2026-11-02T09:10:00Z {OOM}\n")
    analysis = classify_run(run)
    assert (analysis.class_id, analysis.node_index) == ("cuda_oom", 1)
    assert analysis.failed_at == T0 + timedelta(minutes=10)


@pytest.mark.django_db
def test_exit_code_only(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, "step 1\nstep 2\n", exit_code=137)
    analysis = classify_run(run)
    assert analysis.class_id == "host_oom"
    assert analysis.line is None and analysis.evidence == "exit code 137"


@pytest.mark.django_db
def test_timeout_only(world: World) -> None:
    run = failed_run(world, timeout_minutes=60)  # make_run runs exactly one hour
    add_log(run, 1, 0, "step 1\nstep 2\n")
    analysis = classify_run(run)
    assert analysis.class_id == "timeout"
    assert "timeout of 60 minutes" in analysis.evidence


@pytest.mark.django_db
def test_runtime_cap_is_noted(world: World) -> None:
    # A notebook run (its parameters name the notebook) stops at 7 days.
    run = failed_run(world, ended_at=T0 + timedelta(days=7, minutes=1), parameters={"notebook_path": "/Users/a/nb"})
    add_log(run, 1, 0, "step 1\n")
    analysis = classify_run(run)
    assert analysis.class_id == "timeout"
    assert "notebook runs stop at 7 days" in analysis.note


@pytest.mark.django_db
def test_runtime_cap_is_the_runs_own(world: World) -> None:
    """One cap per run (Run.runtime_cap): a run that names no notebook is a CLI run, so 8 days is
    inside its 14-day cap here exactly as on the advice page."""
    run = failed_run(world, ended_at=T0 + timedelta(days=8))
    add_log(run, 1, 0, "step 1\n")
    assert run.runtime_cap == timedelta(days=14) and run.runtime_kind == "CLI"
    assert "runs stop at" not in classify_run(run).note
    run = failed_run(world, "failed-2", ended_at=T0 + timedelta(days=14, minutes=1))
    add_log(run, 1, 0, "step 1\n")
    assert "CLI runs stop at 14 days" in classify_run(run).note


@pytest.mark.django_db
def test_gpu_lost_event_is_the_cause(world: World) -> None:
    run = failed_run(world)
    node = add_log(run, 1, 0, "NCCL error: unhandled system error\nRuntimeError: NCCL communication failed\n")
    RunEvent.objects.create(
        run=run, node=node, gpu_index=5, ts=T0 + timedelta(minutes=30), kind=RunEventKind.GPU_LOST, message="Xid 79"
    )
    analysis = classify_run(run)
    assert analysis.class_id == "gpu_hardware"
    assert analysis.node_index == 0 and "GPU 5" in analysis.evidence
    assert analysis.failed_at == T0 + timedelta(minutes=30)


@pytest.mark.django_db
def test_the_attempt_that_ended_the_run_is_analysed_and_earlier_ones_listed(world: World) -> None:
    run = failed_run(world, max_retries=2)
    add_log(run, 1, 0, f"{OOM}\n")
    add_log(run, 2, 0, f"step 1\n{NCCL_WATCHDOG.format(rank=0)}\n")
    add_log(run, 3, 0, "ModuleNotFoundError: No module named 'flash_attn'\n")
    analysis = classify_run(run)
    assert (analysis.class_id, analysis.attempt_number, analysis.line) == ("dependency_error", 3, 1)
    assert "flash_attn" in analysis.evidence
    assert [(a["attempt"], a["class_id"]) for a in analysis.earlier_attempts] == [
        (1, "cuda_oom"),
        (2, "nccl_timeout"),
    ]
    assert "CUDA out of memory" in analysis.earlier_attempts[0]["evidence"]


@pytest.mark.django_db
def test_the_sources_state_message_is_evidence_when_no_log_says_more(world: World) -> None:
    run = failed_run(world)
    attempt = run.attempts.get()
    attempt.exit_code = 1
    attempt.state_message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB."
    attempt.save()
    analysis = classify_run(run)
    assert (analysis.class_id, analysis.line) == ("cuda_oom", None)
    assert analysis.evidence.startswith("torch.OutOfMemoryError")
    # A log line of the same tier outranks it: it shows where, the message does not.
    add_log(run, 1, 0, f"epoch 1\n{OOM}\n")
    analysis = classify_run(run)
    assert (analysis.class_id, analysis.node_index, analysis.line) == ("cuda_oom", 0, 2)


def add_minutes(run: Run, *, memory: float, util: float, power: float, minutes: int = 10) -> None:
    """Per-minute GPU rollups for the last `minutes` of the run's last attempt, on 8 GPUs of node 0."""
    node = Node.objects.filter(attempt__run=run, index=0).order_by("-attempt__number").first()
    end = run.ended_at
    for back in range(minutes):
        for gpu in range(8):
            GpuMinute.objects.create(
                run=run, node=node, gpu_index=gpu, minute=end - timedelta(minutes=back + 1), samples=60,
                memory_total_bytes=80 * 2**30, memory_used_bytes_max=memory * 80 * 2**30,
                utilization_gpu_avg=util, power_watts_avg=power * 700, power_limit_watts=700,
            )  # fmt: skip


@pytest.mark.django_db
def test_gpu_memory_at_its_limit_makes_an_exit_code_a_gpu_oom(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, "step 10 loss 2.1\n", exit_code=1)
    add_minutes(run, memory=0.995, util=95, power=0.9)
    analysis = classify_run(run)
    assert analysis.class_id == "cuda_oom"
    assert "99.5% of capacity on node 0 GPU" in analysis.evidence
    assert analysis.confidence == 0.6
    assert analysis.telemetry["memory_at_limit"] is True


@pytest.mark.django_db
def test_the_hang_signature_makes_a_silent_failure_a_collective_timeout(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, "step 10 loss 2.1\n", exit_code=1)
    add_minutes(run, memory=0.8, util=100, power=0.25, minutes=6)
    analysis = classify_run(run)
    assert analysis.class_id == "nccl_timeout"
    assert "pinned at 100%" in analysis.evidence and "last 6 minutes" in analysis.evidence
    assert analysis.telemetry["hang"] is True


@pytest.mark.django_db
def test_telemetry_raises_or_lowers_the_confidence_in_the_log(world: World) -> None:
    agrees = failed_run(world, "oom-agrees")
    add_log(agrees, 1, 0, f"{OOM}\n")
    add_minutes(agrees, memory=0.99, util=95, power=0.9)
    disagrees = failed_run(world, "oom-disagrees")
    add_log(disagrees, 1, 0, f"{OOM}\n")
    add_minutes(disagrees, memory=0.4, util=95, power=0.9)
    without = failed_run(world, "oom-no-telemetry")
    add_log(without, 1, 0, f"{OOM}\n")
    assert classify_run(agrees).confidence == 0.98
    assert classify_run(disagrees).confidence == 0.7
    assert classify_run(without).confidence == 0.9
    # Busy GPUs at full power are training, not hanging: no verdict from that.
    busy = failed_run(world, "busy")
    add_log(busy, 1, 0, "step 10 loss 2.1\n", exit_code=1)
    add_minutes(busy, memory=0.8, util=100, power=0.9)
    assert classify_run(busy).class_id == "other"


def test_helpers() -> None:
    assert line_timestamp("[2026-11-02 09:10:00,250] boom") == T0 + timedelta(minutes=10, milliseconds=250)
    assert line_timestamp("no time here") is None
    assert signature("rank 3 at 0xdeadbeef in /a/b.py") == signature("rank 5 at 0xcafe in /c/d.py")


@pytest.mark.django_db
def test_backfill_command(world: World) -> None:
    run = failed_run(world)
    add_log(run, 1, 0, f"{OOM}\n")
    make_run(world.vision, "ok-run")  # succeeded: not classified
    out = StringIO()
    call_command("classify_runs", stdout=out)
    assert "cuda_oom 1" in out.getvalue()
    assert FailureAnalysis.objects.count() == 1
    call_command("classify_runs", stdout=out)  # nothing left without --all
    assert "nothing to do" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_log_of_a_failed_run_is_classified_by_a_worker(world: World, celery_worker) -> None:
    run = failed_run(world, "worker-failed")
    with transaction.atomic():
        ingest.append_log_chunk(run, 1, 0, 0, f"step 1\n{OOM}\n")
    assert wait_for(lambda: FailureAnalysis.objects.filter(run=run).exists(), timeout=60), celery_worker.log()
    assert FailureAnalysis.objects.get(run=run).class_id == "cuda_oom"
