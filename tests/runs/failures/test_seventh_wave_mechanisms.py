"""Issue 32: the families written for the seventh wave's misses, each on a real cited line.

Every log named below is in the corpus (tests/data/failures/SOURCES.md cites its thread). Each
family is a mechanism, so a test also checks a wording next to it that no log of the corpus has
and a line the family must leave alone.
"""

from __future__ import annotations

import pytest

from runs.failures.classify import classify_lines
from tests.conftest import TESTS

CORPUS = TESTS / "data" / "failures"


def read(name: str) -> list[str]:
    return (CORPUS / name).read_bytes().decode("utf-8", errors="replace").split("\n")


@pytest.mark.parametrize(
    ("name", "class_id", "words"),
    [
        # pytorch/pytorch#118666: the store's connection reset while the process group starts.
        ("nccl_timeout/pytorch_118666_reset_by_peer.log", "nccl_timeout", "DistNetworkError: Connection reset"),
        # huggingface/accelerate#2468: the store unreachable, errno 113 (no route to host).
        ("nccl_timeout/accelerate_2468_no_route.log", "nccl_timeout", "failed to connect to any network"),
        # yangkky/distributed_tutorial#3: c10d's bare socket error, TCPStore on the frame above.
        ("nccl_timeout/distributed_tutorial_3_store_timeout.log", "nccl_timeout", "RuntimeError: Connection timed out"),
        # kwsong0113/diffusion-forcing-transformer#31: NCCL's bootstrap socket connect refused.
        ("nccl_error/dft_31_socket_refused.log", "nccl_error", "socketPollConnect"),
        # pytorch/pytorch#38702: NCCL at INFO, connect refused, the log cut before its WARN.
        ("nccl_error/pytorch_38702_nccl_connect_refused.log", "nccl_error", "Call to connect returned Connection"),
        # ultralytics/yolov5#11250: cuDNN found no algorithm (a smaller batch fixed it).
        ("cuda_oom/yolov5_11250_cudnn_algorithm.log", "cuda_oom", "Unable to find a valid cuDNN algorithm"),
        # SAFEHR-data/FlowEHR#141: Databricks' self-bootstrap failure; CI line anchors are no progress.
        ("other/flowehr_141_self_bootstrap.log", "other", "Self-bootstrap failure"),
        # aws/amazon-sagemaker-examples#739: the container has no `train` to exec.
        ("other/sagemaker_examples_739_train_not_found.log", "other", "executable file not found"),
    ],
)
def test_seventh_wave_families_on_their_real_lines(name: str, class_id: str, words: str) -> None:
    lines = read(name)
    verdict = classify_lines(lines)
    assert verdict.class_id == class_id
    assert verdict.line is not None and words in lines[verdict.line - 1]


@pytest.mark.parametrize(
    ("line", "class_id"),
    [
        ("torch.distributed.DistNetworkError: Connection refused", "nccl_timeout"),
        ("RuntimeError: Connection refused", "nccl_timeout"),
        ("TCPStore client: connect failed (errno: 111 - Connection refused)", "nccl_timeout"),
        ("bootstrap.cc:45 NCCL WARN Bootstrap : connect returned No route to host", "nccl_error"),
        ("Could not load library libcudnn: cuDNN found no suitable algorithm for this shape", "cuda_oom"),
        ("Cluster 0101-abc terminated. Reason: INIT_SCRIPT_FAILURE", "other"),
        ('OCI runtime create failed: exec: "python3": executable file not found in $PATH', "other"),
    ],
)
def test_the_families_read_other_wordings_of_their_mechanism(line: str, class_id: str) -> None:
    assert classify_lines([line]).class_id == class_id


def test_a_store_connect_warning_while_c10d_retries_is_no_failure() -> None:
    # pytorch/PiPPy#158: c10d warns while it retries the store; the run went on (corpus: none).
    verdict = classify_lines(read("none/pippy_158_socket_retry.log"))
    assert verdict.class_id == "none"


def test_an_nccl_info_refusal_that_training_outlives_is_no_failure() -> None:
    lines = [
        "node1:123:456 [0] NCCL INFO Call to connect returned Connection refused, retrying",
        "node1:123:456 [0] NCCL INFO Connected all rings",
        "epoch 1 step 10 loss 2.31",
        "epoch 1 step 20 loss 2.10",
        "epoch 1 step 30 loss 1.95",
    ]
    assert classify_lines(lines).class_id == "none"


def test_a_ci_line_anchor_is_no_training_progress() -> None:
    lines = ["Error: cannot create cluster: 0303-131037 is not able to transition", "[2081](#step:3:2082)"] * 1
    lines += ["[2082](https://github.com/o/r/actions/runs/1/jobs/2#step:3:2083)"] * 5
    assert classify_lines(lines).class_id == "other"
