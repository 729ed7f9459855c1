"""Issue 32: the mechanisms the fourth fresh wave's misses showed, each on a real cited log.

Each log is in tests/data/failures/ (SOURCES.md cites its thread, in the rows "Added on
2026-12-03 (the 110 rows below)"). Where a log carries more than one mechanism the others are
taken out, so the mechanism under test is what answers; where a family has more than one
member, a second real member (or the same line with the member swapped) checks it is the family
that is read, not the one wording.
"""

from __future__ import annotations

import pytest

from runs.failures.classify import classify_lines
from runs.failures.corpus import load_corpus
from tests.conftest import TESTS

CORPUS = TESTS / "data" / "failures"


def read(name: str) -> list[str]:
    return (CORPUS / name).read_bytes().decode("utf-8", errors="replace").split("\n")


def test_a_status_field_whose_value_is_a_time_limit_is_a_timeout() -> None:
    # Azure/azure-sdk-for-python#25675 (a [prose] row: the reporter quotes the portal's log): the
    # quoted field is the program's own, and a quoted key counts as a key.
    assert classify_lines(['"run_method_duration": 90.25895500183105, "status": "RUN_TIMEOUT"']).class_id == "timeout"
    # The same family as Slurm's sacct prints it.
    assert classify_lines(["State: TIMEOUT"]).class_id == "timeout"


@pytest.mark.parametrize("value", ["DEAD", "FAILED", "RUN_FAILED", "SYSTEM_ERROR", "Lost", "error"])
def test_a_status_field_set_to_a_failure_word_is_an_abnormal_end(value: str) -> None:
    # ray-project/ray#18586: Ray's actor manager reports the actor `state: DEAD`; any failure
    # word of the family in the same field is the same mechanism.
    line = next(line for line in read("other/ray_18586_actor_dead.log") if "state: DEAD" in line)
    verdict = classify_lines([line.replace("state: DEAD", f"state: {value}")])
    assert verdict.class_id == "other"
    assert f"state: {value}" in verdict.evidence


@pytest.mark.parametrize("value", ["Running", "Succeeded", "COMPLETED", "Pending", "deadline_s"])
def test_a_status_field_set_to_a_healthy_word_is_no_failure(value: str) -> None:
    line = next(line for line in read("other/ray_18586_actor_dead.log") if "state: DEAD" in line)
    assert classify_lines([line.replace("state: DEAD", f"state: {value}")]).class_id == "none"


def test_a_glog_fatal_line_behind_a_progress_bar_is_read() -> None:
    # pytorch/xla#7138: absl's fatal header (F0000 00:00:<seconds> <tid> <file>:<line>]) glued to a
    # tqdm bar by its carriage return.
    verdict = classify_lines(read("other/torch_xla_7138_core_halted.log"))
    assert verdict.class_id == "other"
    assert "]F0000 00:00:1717141650.890307" in verdict.evidence


def test_a_glog_info_line_is_not_fatal() -> None:
    line = "  0%|          | 1/7800 [00:01<2:37:37,  1.21s/it]I0000 00:00:1717141650.890307    9276 pjrt.cc:487] ok"
    assert classify_lines([line]).class_id == "none"


def test_the_shells_job_control_kill_report_is_a_sigkill() -> None:
    # adaptivecomputing/torque#473: the job script's shell reports its child's SIGKILL with the
    # pid and the command; the bare `Killed` line is the same report, and the same class.
    verdict = classify_lines(read("other/torque_473_killed.log"))
    assert verdict.class_id == classify_lines(["Killed"]).class_id == "host_oom"
    assert "8698 Killed" in verdict.evidence
    # bash's interactive job table says it the same way.
    assert classify_lines(["[1]+  Killed                  python train.py"]).class_id == "host_oom"


def test_the_shells_job_control_report_of_other_signals_is_an_abnormal_end() -> None:
    line = read("other/torque_473_killed.log")[0].replace("Killed", "Aborted (core dumped)")
    assert classify_lines([line]).class_id in {"other", "segfault"}
    assert classify_lines([line]).class_id != "none"


def test_a_grpc_status_code_is_an_error() -> None:
    # GoogleCloudPlatform/vertex-ai-samples#213: google.api_core's InvalidArgument with its HTTP
    # status, no Error/Exception suffix.
    verdict = classify_lines(read("other/vertex_samples_213.log"))
    assert verdict.class_id == "other"
    assert "InvalidArgument: 400" in verdict.evidence
    # The same family as grpc and absl print it.
    assert classify_lines(["\tstatus = StatusCode.UNAVAILABLE"]).class_id == "other"
    assert classify_lines(["Non-OK-status: status: INTERNAL: Core halted unexpectedly"]).class_id == "other"


def test_protobufs_byte_limit_is_a_message_size_limit() -> None:
    # tensorflow/tensorflow#2233: libprotobuf's parser rejects a message over its 64 MB limit; its
    # WARNING line before ("Reading dangerously large protocol message") is not the evidence.
    verdict = classify_lines(read("serialization_too_large/tensorflow_2233_protobuf.log"))
    assert verdict.class_id == "serialization_too_large"
    assert "A protocol message was rejected because it was too big" in verdict.evidence


def test_a_pod_not_scheduled_is_capacity() -> None:
    # NVIDIA/k8s-device-plugin#102: the pod description cut before its events.
    verdict = classify_lines(read("capacity_unavailable/k8s_device_plugin_102.log"))
    assert verdict.class_id == "capacity_unavailable"
    assert "PodScheduled" in verdict.evidence


def test_pinned_host_memory_refused_is_host_memory() -> None:
    # mindspore-ai/mindspore#172 (the thread's log): cudaHostAlloc failing is host memory.
    verdict = classify_lines(read("host_oom/mindspore_172_hostalloc.log"))
    assert verdict.class_id == "host_oom"
    assert "cudaHostAlloc failed" in verdict.evidence


def test_julias_interrupt_is_a_stop() -> None:
    # CarloLucibello/Tsunami.jl#63: Julia's report of a Ctrl+C during fit.
    assert classify_lines(read("cancelled/tsunami_jl_63.log")).class_id == "cancelled"


def test_prose_rows_are_marked_and_measured_apart() -> None:
    # A reporter's sentence is not a run's log: the rows in a person's own words carry `[prose]`,
    # and the loader reads the mark (bench/classify.py measures them apart).
    cases = {str(case.path.relative_to(CORPUS)): case for case in load_corpus(CORPUS)}
    assert cases["host_oom/nnunet_469_killed.log"].prose
    assert cases["timeout/mlopspython_204.log"].prose
    assert not cases["other/torque_473_killed.log"].prose
    assert all(case.path.read_text(encoding="utf-8", errors="replace").strip() for case in cases.values())
