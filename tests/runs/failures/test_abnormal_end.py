"""Issue 32: a log that ends abnormally is never `none`, whatever words carry the end.

Each mechanism is checked on a real log of the corpus (tests/data/failures/SOURCES.md cites each
file's thread): the third fresh wave's six logs that were still `none` from the log alone, and the
abnormal end read again with the line that names the cause taken out, so the mechanism (a status
field set to a failure, an exit status, a supervisor's report) is what answers, not the wording.
"""

from __future__ import annotations

import pytest

from runs.failures.classify import classify_lines
from runs.failures.corpus import load_corpus, score
from tests.conftest import TESTS

CORPUS = TESTS / "data" / "failures"


def read(name: str) -> list[str]:
    return (CORPUS / name).read_bytes().decode("utf-8", errors="replace").split("\n")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # keyu-tian/SparK#19: torchrun's SignalException alone (its message cut): the agent raises
        # it only for a stop signalled from outside (the terminal that started it closed).
        ("cancelled/spark_19_sighup.log", "multiprocessing.api.SignalException"),
        # Azure-Samples/MyDriving#557: Azure Data Factory's quota in a quoted PowerShell reply that
        # asks for a quota increase.
        ("capacity_unavailable/mydriving_557.log", "increase this quota"),
        # daniel89710/lightNet#2: the objective is a "cost", gone NaN.
        ("nan_divergence/lightnet_2.log", "loss becomes NaN"),
        # AllenNeuralDynamics/aind-ephys-pipeline#81: Nextflow on Slurm, exit status (140) in
        # parentheses: 128 + SIGUSR2, a scheduler's run-limit signal.
        ("timeout/aind_ephys_81.log", "terminated with an error exit status (140)"),
        # argoproj/argo-workflows#6135 and #9934: the kubelet's activeDeadlineSeconds, in its words.
        ("timeout/argo_6135.log", "active on the node longer than the specified deadline"),
        ("timeout/argo_9934.log", "active on the node longer than the specified deadline"),
    ],
)
def test_the_third_waves_silent_failures_have_a_verdict(name: str, words: str) -> None:
    verdict = classify_lines(read(name))
    assert verdict.class_id == name.split("/")[0]
    assert words in verdict.evidence


def test_a_status_field_set_to_a_failure_is_an_abnormal_end() -> None:
    # argo-workflows#6135 without its deadline message: the node status still says `phase: Failed`.
    lines = [line for line in read("timeout/argo_6135.log") if "deadline" not in line]
    verdict = classify_lines(lines)
    assert verdict.class_id == "other"
    assert verdict.evidence == "phase: Failed"


def test_a_workflow_reporting_a_failed_process_is_an_abnormal_end() -> None:
    # aind-ephys-pipeline#81 without its exit status: Nextflow's progress counts failed tasks
    # ("failed: 2") and its "Error executing process" line follows.
    lines = [line for line in read("timeout/aind_ephys_81.log") if "exit status" not in line]
    verdict = classify_lines(lines)
    assert verdict.class_id == "other"
    assert "failed: 2" in verdict.evidence


def test_a_supervisors_pod_failed_line_is_an_abnormal_end() -> None:
    # argo-workflows#9934's title with the deadline's words cut: "Pod failed with error:".
    line = read("timeout/argo_9934.log")[0].split(" Pod was active")[0]
    assert classify_lines([line]).class_id == "other"


def test_a_native_exception_report_is_an_abnormal_end() -> None:
    # InternLM/lmdeploy#3258: the excerpt starts after the CUDA error's headline; c10's
    # "Exception raised from ... at file:line" and its backtrace remain.
    verdict = classify_lines(read("illegal_memory_access/v1log22_internlm-lmdeploy-3258.log"))
    assert verdict.class_id == "other"
    assert verdict.evidence.startswith("Exception raised from c10_cuda_check_implementation")


def test_no_healthy_log_reads_as_an_abnormal_end() -> None:
    healthy = [case for case in load_corpus(CORPUS) if case.label == "none"]
    assert len(healthy) >= 80
    alarms = [(r.case.path.name, r.got, r.evidence) for r in score(healthy) if r.got != "none"]
    assert not alarms


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # PaddlePaddle/Paddle#11475: a Java exception chain behind an MPI rank prefix.
        ("disk_full/paddle_11475.log", "<stderr>:Caused by: java.lang.ClassNotFoundException"),
        # nvidia-cosmos/cosmos-rl#681: a supervisor's "failed with return code 1" behind its logger's prefix.
        ("nccl_timeout/cosmos_rl_681_client_socket.log", "Process 1 failed with return code 1"),
        # concourse/hush-house#8: a pod status whose phase is Failed.
        ("disk_full/hush_house_8_evicted.log", "phase: Failed"),
    ],
)
def test_each_abnormal_end_mechanism_on_its_real_line(name: str, words: str) -> None:
    # The line alone, out of the log whose other lines name the cause: the mechanism still says the
    # run ended abnormally, where the rules of the third wave's freeze said nothing.
    [line] = [line for line in read(name) if words in line]
    verdict = classify_lines([line])
    assert verdict.class_id == "other"
    assert verdict.evidence == line.strip()
