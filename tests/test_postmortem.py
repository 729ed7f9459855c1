"""runs.postmortem.classify_run: the first causal error across nodes, attempts, exit codes,
GPU events and timing; the task through a real worker; the backfill command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction

from runs import ingest
from runs.choices import RunEventKind, RunStatus
from runs.models import Attempt, FailureAnalysis, LogChunk, Node, Run, RunEvent
from runs.postmortem import classify_run, line_timestamp, signature
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
    run = failed_run(world, ended_at=T0 + timedelta(days=7, minutes=1))
    add_log(run, 1, 0, "step 1\n")
    analysis = classify_run(run)
    assert analysis.class_id == "timeout"
    assert "notebook runs stop at 7 days" in analysis.note


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
def test_first_failing_attempt_without_timestamps(world: World) -> None:
    run = failed_run(world, max_retries=1)
    add_log(run, 1, 0, f"{OOM}\n")
    add_log(run, 2, 0, "ModuleNotFoundError: No module named 'flash_attn'\n")
    analysis = classify_run(run)
    assert (analysis.class_id, analysis.attempt_number) == ("cuda_oom", 1)


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
