"""Issue 32: the families written for the fifth wave's misses, each on a real cited line.

Every line below is copied from a log of the corpus (tests/data/failures/SOURCES.md cites its
thread). Each family is a mechanism, so a test also checks a wording next to it that no log of the
corpus has (the same mechanism, another framework's words) and a line the family must leave alone.
"""

from __future__ import annotations

import pytest

from runs.failures.classify import classify_lines
from tests.conftest import TESTS

CORPUS = TESTS / "data" / "failures"


def read(name: str) -> list[str]:
    return (CORPUS / name).read_bytes().decode("utf-8", errors="replace").split("\n")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # HyeonwooNoh/DeconvNet#1: Caffe's glog check on cudaMalloc, code 2 and its words.
        ("cuda_oom/deconvnet_1_caffe.log", "Check failed: error == cudaSuccess (2 vs. 0)"),
        # cupy/cupy#2537: CuPy's pool, under Chainer's trainer, names no device.
        ("cuda_oom/cupy_2537_chainer.log", "Out of memory allocating"),
        # apache/mxnet#2913: MXNet's pooled storage manager.
        ("cuda_oom/mxnet_2913_pooled_alloc.log", "Memory allocation failed"),
        # lightgbm-org/LightGBM#4480: OpenCL's CL_MEM_OBJECT_ALLOCATION_FAILURE in words.
        ("cuda_oom/lightgbm_4480_opencl.log", "Memory Object Allocation Failure"),
        # PaddlePaddle/Paddle#8992: Paddle's allocator check, more asked than available.
        ("cuda_oom/paddle_8992_enforce_allocating.log", "enforce allocating <= available failed"),
        # benanne/kaggle-ndsb#3: Theano's MemoryError is the device's when it says so.
        ("cuda_oom/kaggle_ndsb_3_theano.log", "bytes of device memory (out of memory)"),
        # dmlc/xgboost#8484: std::bad_alloc carrying a CUDA allocation error.
        ("cuda_oom/xgboost_8484_gpu_hist.log", "std::bad_alloc: cudaErrorMemoryAllocation"),
        # LightGBM's and DL4J's host memory, Windows' paging file.
        ("host_oom/lightgbm_4492_host_memory.log", "Out of Host Memory"),
        ("host_oom/dl4j_4335_host_memory.log", "Can't allocate [HOST] memory"),
        ("host_oom/ultralytics_9476_paging_file.log", "The paging file is too small"),
    ],
)
def test_out_of_memory_is_read_by_its_context_words(name: str, words: str) -> None:
    verdict = classify_lines(read(name))
    assert verdict.class_id == name.split("/")[0]
    assert words in verdict.evidence


@pytest.mark.parametrize(
    ("line", "class_id"),
    [
        # The same mechanism in words no corpus log has.
        ("hipMalloc: unable to allocate 4096 MiB on device 0", "cuda_oom"),
        ("RuntimeError: failed to allocate 2.00 GiB of pinned host memory", "host_oom"),
        ("ERROR: insufficient system memory to load the dataset", "host_oom"),
    ],
)
def test_an_allocator_refusal_in_other_words_is_still_out_of_memory(line: str, class_id: str) -> None:
    assert classify_lines([line]).class_id == class_id


def test_an_allocator_warning_that_training_survives_is_not_a_failure() -> None:
    # TensorFlow's BFC allocator warns and carries on; a warning is no cause for the unqualified family.
    line = (
        "2019-03-01 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:211] "
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.0GiB."
    )
    assert classify_lines(["Epoch 1/10", line, "Epoch 2/10"]).class_id in {"none", "cuda_oom"}
    assert classify_lines(["step 10 loss 0.31", "memory allocation summary: 12 GiB in use"]).class_id == "none"


@pytest.mark.parametrize(
    ("name", "class_id", "words"),
    [
        # horovod/horovod#1890, #367, #534: the stall inspector's ranks that never joined.
        ("nccl_timeout/horovod_1890_stall_8gpu.log", "nccl_timeout", "waiting for remainder of ranks"),
        ("nccl_timeout/horovod_367_stuck.log", "nccl_timeout", "waiting for remainder of ranks"),
        # NVIDIA/nccl-tests#15: NCCL's socket layer, the peer gone.
        ("nccl_error/nccl_tests_15_closed_by_peer.log", "nccl_error", "Connection closed by remote peer"),
        # gpustack/gpustack#2125: Gloo's full-mesh connect.
        ("nccl_error/gpustack_2125_gloo_mesh.log", "nccl_error", "connectFullMesh failed"),
        # pytorch/pytorch#75512: Gloo's TCP pair, the peer closed the connection.
        ("nccl_error/pytorch_75512_gloo_closed.log", "nccl_error", "Connection closed by peer"),
    ],
)
def test_collective_communication_failures_are_one_family(name: str, class_id: str, words: str) -> None:
    verdict = classify_lines(read(name))
    assert verdict.class_id == class_id
    assert words in verdict.evidence


def test_a_reset_connection_outside_collectives_is_not_an_nccl_error() -> None:
    # A download's reset connection is no collective's failure.
    line = "ConnectionError: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))"
    assert classify_lines([line]).class_id == "other"
    mpi = "[1,0]<stderr>: MPI_ABORT: connection reset by peer on rank 3"
    assert classify_lines([mpi]).class_id == "nccl_error"


@pytest.mark.parametrize(
    ("line", "class_id"),
    [
        ("RuntimeError: CUDA error 700 while synchronizing the stream", "illegal_memory_access"),
        ("cudaErrorAssert: CUDA error code 710", "device_assert"),
        ("Check failed: e == cudaSuccess (35 vs. 0)", "dependency_error"),
        ("CUDA error: 2 at allocator.cc:88", "cuda_oom"),
    ],
)
def test_a_cuda_error_code_is_read_by_its_number(line: str, class_id: str) -> None:
    assert classify_lines([line]).class_id == class_id
    # A code that shares a prefix with a mapped one is not it.
    assert classify_lines(["CUDA error 7000 reported"]).class_id != "illegal_memory_access"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # mozilla/translations#1002: Marian's error behind a Taskcluster task-log prefix.
        ("other/mozilla_translations_1002_cuda_999.log", "Error: CUDA error 999"),
        # snakemake/snakemake-executor-plugin-slurm#313 and snakemake#1789: sbatch refused.
        ("capacity_unavailable/smk_slurm_313_sbatch_refused.log", "Batch job submission failed"),
        ("capacity_unavailable/snakemake_1789_sbatch_timeout.log", "Batch job submission failed"),
        # phyloacc/PhyloAcc#81: Slurm's TIMEOUT state, as Snakemake's executor prints it.
        ("timeout/phyloacc_81_sacct_timeout.log", "'TIMEOUT'"),
        # keras-team/keras#6747: Keras' TerminateOnNaN.
        ("nan_divergence/keras_6747_invalid_loss.log", "Invalid loss, terminating training"),
        # Azure/fast_retraining#69: LightGBM built without its GPU learner.
        ("dependency_error/fast_retraining_69_no_gpu_build.log", "was not enabled in this build"),
    ],
)
def test_scheduler_loss_and_build_families_on_their_real_lines(name: str, words: str) -> None:
    verdict = classify_lines(read(name))
    assert verdict.class_id == name.split("/")[0]
    assert words in verdict.evidence
