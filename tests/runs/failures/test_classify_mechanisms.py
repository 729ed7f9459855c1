"""Issue 32: the classifier reads mechanisms, not wordings, on real logs (tests/data/failures/SOURCES.md
cites each file's thread).

Each family and each reading mechanism is checked on a real log: the class, and that the evidence
line is the line that shows the cause (never a quoted source line of a traceback frame).
"""

from __future__ import annotations

import pytest

from runs.failures.classify import Classification, classify_text
from runs.failures.classify_pass import classify_run
from runs.models import Attempt
from tests.conftest import TESTS, World
from tests.runs.failures.test_postmortem import add_log, failed_run

CORPUS = TESTS / "data" / "failures"


def classify_file(name: str, **kwargs: object) -> tuple[Classification, list[str]]:
    text = (CORPUS / name).read_bytes().decode("utf-8", errors="replace")
    return classify_text(text, **kwargs), text.split("\n")  # type: ignore[arg-type]


# (a) A verdict for every failed run.


def test_a_run_the_source_reports_failed_is_never_none() -> None:
    # databrickslabs/dolly#111: DeepSpeed's memory report, then the log stops (host RAM at 95%).
    alone, lines = classify_file("host_oom/dolly_111_pythia_32gb_ram.log")
    assert alone.class_id == "none"
    failed, _ = classify_file("host_oom/dolly_111_pythia_32gb_ram.log", failed=True)
    assert failed.class_id == "other"
    assert failed.title == "Unrecognised failure"
    assert failed.line is not None and failed.evidence in lines[failed.line - 1]
    # A non-zero exit code says the same.
    assert classify_file("host_oom/dolly_111_pythia_32gb_ram.log", exit_code=1)[0].class_id == "other"


@pytest.mark.django_db
def test_a_failed_run_with_a_silent_log_is_an_unrecognised_failure(world: World) -> None:
    run = failed_run(world)
    text = (CORPUS / "host_oom" / "dolly_111_pythia_32gb_ram.log").read_text()
    add_log(run, 1, 0, text)
    Attempt.objects.filter(run=run).update(status="failed")
    analysis = classify_run(run)
    assert analysis.class_id == "other"
    assert analysis.line is not None
    assert analysis.evidence in text


@pytest.mark.parametrize(
    ("name", "expected_line"),
    [
        # Horovod/TF1: "AbortedError (see above for traceback): Horovod has been shut down" (horovod#243).
        ("other/horovod_243_aborted.log", "AbortedError (see above for traceback)"),
        # A torchrun agent passing on the SIGHUP it got (hiyouga/LlamaFactory#5297): a stop.
        ("cancelled/llamafactory_5297_lora_sighup.log", "closing signal SIGHUP"),
    ],
)
def test_an_abnormal_end_is_not_silence(name: str, expected_line: str) -> None:
    verdict, _ = classify_file(name)
    assert verdict.class_id == name.split("/")[0]
    assert expected_line in verdict.evidence


# (b) Root cause over cascade, across lines.


def test_a_quoted_source_line_is_never_evidence() -> None:
    # vLLM's logger prefix before a traceback (huggingface/trl#3310): line 2 quotes
    # `raise RuntimeError(f"NCCL error: {error_str}")`; the error it raised is line 3.
    verdict, lines = classify_file("nccl_error/trl_3310_invalid_usage.log")
    assert 'raise RuntimeError(f"NCCL error' in lines[1]
    assert (verdict.class_id, verdict.line) == ("nccl_error", 3)
    assert "RuntimeError: NCCL error: invalid usage" in verdict.evidence


def test_a_traceback_cut_before_its_message_is_an_abnormal_end() -> None:
    # vllm-project/vllm#27508: only frames and their quoted source survive in the excerpt; the
    # source names the cause, but a source line is not output.
    verdict, _ = classify_file("cuda_oom/vllm_27508_gpt_oss.log")
    assert verdict.class_id == "other"
    assert "raise" not in verdict.evidence


@pytest.mark.parametrize(
    ("name", "line", "words"),
    [
        # The index wrapped a long line mid-word: "...an illeg" / "al memory access" (allenai/molmoact#10).
        ("illegal_memory_access/v2log_34_allenai-molmoact-10.log", 2, "al memory access was encountered"),
        # XLA's message split over two lines: "Resource exhausted: Out" / "of memory" (google/jax#788).
        ("cuda_oom/jax_788_local_client.log", 1, "Resource exhausted: Out"),
    ],
)
def test_a_message_split_over_lines_is_read_joined(name: str, line: int, words: str) -> None:
    verdict, _ = classify_file(name)
    assert (verdict.class_id, verdict.line) == (name.split("/")[0], line)
    assert words in verdict.evidence


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # A full disk reported by joblib as a UserWarning (Plachtaa/VITS-fast-fine-tuning#397).
        ("disk_full/v2log_27_plachtaa-vits-fast-fine-tuning-397.log", "UserWarning: [Errno 28] No space left"),
        # An sm_86 GPU against a PyTorch built without it, reported as a UserWarning (hcnoh/gail-pytorch#6).
        ("dependency_error/v2log_59_hcnoh-gail-pytorch-6.log", "is not compatible with the current PyTorch"),
    ],
)
def test_a_warning_that_carries_a_cause_is_no_veto(name: str, words: str) -> None:
    verdict, _ = classify_file(name)
    assert verdict.class_id == name.split("/")[0]
    assert words in verdict.evidence


def test_a_deletion_is_explained_by_the_reason_that_follows_it() -> None:
    # CoBrALab/MAGeTbrain#20: Moab prints "job deleted" and only then "job exceeded wallclock limit".
    verdict, lines = classify_file("timeout/magetbrain_20_moab.log")
    assert lines[3] == "job deleted"
    assert verdict.class_id == "timeout"
    assert "job exceeded wallclock limit" in verdict.evidence
    # Without a reason nearby, a deletion by the administrator is a cancel (cBio/cbio-cluster#403).
    assert classify_file("cancelled/cbio_cluster_403_deleted_by_root.log")[0].class_id == "cancelled"


@pytest.mark.parametrize(
    ("name", "expected_line"),
    [
        # horovod/horovod#926: a binary built with AVX on a CPU without it, as MPI reports it.
        ("dependency_error/horovod_926_illegal_instruction.log", "exited on signal 4 (Illegal instruction)"),
        # tensorflow/tensorflow#62342: the shell's report of the same signal.
        ("dependency_error/tf_62342_illegal.log", "Illegal instruction (core dumped)"),
    ],
)
def test_sigill_is_a_cpu_the_binary_does_not_fit(name: str, expected_line: str) -> None:
    verdict, _ = classify_file(name)
    assert verdict.class_id == "dependency_error"
    assert expected_line in verdict.evidence


def test_a_loggers_level_with_a_ctrl_c_glued_on_is_not_a_warning_class() -> None:
    # "CWARNING:torch.distributed.elastic...Received 2 death signal" (GuHuangAI/ADM-Public#6).
    verdict, _ = classify_file("cancelled/v2log_65_guhuangai-adm-public-6.log")
    assert (verdict.class_id, verdict.line) == ("cancelled", 1)


def test_an_ipython_header_waits_for_its_message() -> None:
    # minimaxir/gpt-2-simple#282: "ResourceExhaustedError   Traceback (most recent call last)" first.
    verdict, _ = classify_file("cuda_oom/v2log_56_minimaxir-gpt-2-simple-282.log")
    assert verdict.class_id == "cuda_oom"
    assert verdict.evidence.startswith("ResourceExhaustedError: failed to allocate memory")


def test_ray_out_of_memory_is_host_memory_not_the_gpu() -> None:
    # The names of the two errors: Ray's subclass must not read as torch's (substring slip).
    assert classify_text("ray.exceptions.RayOutOfMemoryError: More than 95% of the memory").class_id == "host_oom"
    assert classify_text("torch.OutOfMemoryError: CUDA out of memory.").class_id == "cuda_oom"


# (c) Families by mechanism.


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # Time limits: Slurm's kill glued to a tqdm bar (OwenCQueen/PolymerGNN).
        ("timeout/v2log_42_owencqueen-polymergnn-c0345c1.log", "DUE TO TIME LIMIT"),
        # Capacity and quota: SageMaker, SkyPilot on RunPod, Kubernetes scheduling.
        ("capacity_unavailable/v2log_62_aws-sagemaker-pytorch-training-toolkit-171.log", "CapacityError"),
        ("capacity_unavailable/v2log_25_skypilot-org-skypilot-5600.log", "ResourcesUnavailableError"),
        ("capacity_unavailable/v2log_11_open-edge-platform-geti-v2-1876.log", "Insufficient nvidia.com/gpu"),
        # Message and serialization size limits: protobuf's 2 GB, gRPC's max message.
        ("serialization_too_large/v2log_15_ray-project-ray-lightning-86.log", "exceeds maximum protobuf size of 2GB"),
        ("serialization_too_large/v2log_41_ray-project-lightgbm-ray-28.log", "Received message larger than max"),
        # Hardware without the token Xid (NVIDIA/NVSentinel#155), and Xid 45 after an NVLink Xid 149.
        ("gpu_hardware/nvsentinel_155_no_xid.log", "fallen off the bus"),
        ("gpu_hardware/ogkm_1150_xid45_after_xid149.log", "caused by previous Xid 149"),
        # Divergence: HF Trainer's NaN gradient norm step after step; DeepSpeed's scaler at its minimum.
        ("nan_divergence/v2log_33_sy-xuan-pink-6.log", "'grad_norm': nan"),
        ("nan_divergence/v2log_53_hiyouga-llamafactory-251.log", "loss scale already at minimum"),
        # Host memory: a native allocator's abort.
        ("host_oom/v2log_10_deepspeedai-deepspeedexamples-321.log", "bytes failed"),
        # The shell's "Killed" in its locale (danijar/dreamerv3#203).
        ("host_oom/dreamerv3_203_chinese_killed.log", "已杀死"),
        # NCCL's bootstrap failing to connect, reported at WARN (espnet/espnet#1940).
        ("nccl_error/espnet_1940_bootstrap_connection_refused.log", "Connection refused"),
        # A person stopping the run: ^C glued to torchrun's warning (huggingface/lerobot#3818).
        ("cancelled/v2log_21_huggingface-lerobot-3818.log", "Received 2 death signal"),
        # The first fresh wave of issue 32 (threads cited in SOURCES.md):
        # time limits in PBS/Torque's, LSF's, SGE's and an HTCondor wrapper's words,
        ("timeout/canu_1214_pbs.log", "PBS: job killed: walltime 86415 exceeded limit 86400"),
        ("timeout/canu_444_lsf.log", "TERM_RUNLIMIT"),
        ("timeout/xqtl_156_sge.log", "qmaster enforced h_rt"),
        ("timeout/crabserver_9366.log", "due to wall clock limit"),
        # capacity and quota in Azure ML's, Cloud ML Engine's, GCP's and Vertex's words,
        ("capacity_unavailable/azure_docs_121466.log", "OutOfQuota"),
        ("capacity_unavailable/tda_2284_mlengine.log", "Quota failure"),
        ("capacity_unavailable/fastai_165_gcp.log", "Quota 'GPUS_ALL_REGIONS' exceeded"),
        ("capacity_unavailable/vertex_samples_700.log", "quota metrics exceed quota limits"),
        # message size limits: protobuf's 2 GB, gRPC's max, Spark's maxResultSize,
        ("serialization_too_large/fate_4944.log", "exceeds maximum protobuf size of 2GB"),
        ("serialization_too_large/grpcio_1254.log", "Received message larger than max"),
        ("serialization_too_large/toil_scripts_177_spark.log", "spark.driver.maxResultSize"),
        # hardware without an Xid: NVLink and ECC,
        ("gpu_hardware/nnunet_1519_nvlink.log", "uncorrectable NVLink error"),
        ("gpu_hardware/paddle_10239_ecc.log", "uncorrectable ECC error"),
        # an ABI mismatch, a preemption, a spot interruption, Ray's OOM killer,
        ("dependency_error/jupyter_7522_numpy2.log", "compiled using NumPy 1.x cannot be run in"),
        ("cancelled/gemmaker_242_preemption.log", "DUE TO PREEMPTION"),
        ("cancelled/runs_on_277_spot.log", "Spot interruption"),
        ("host_oom/ray_28776_chaos_shuffle.log", "ray.exceptions.OutOfMemoryError"),
        # and an NCCL error whose text says "check NCCL warnings" (not NCCL's WARN level).
        ("nccl_error/turing_quickstart_6.log", "ncclSystemError"),
        # The second fresh wave of issue 32 (threads cited in SOURCES.md):
        # preemption in SkyPilot's and submitit's words,
        ("cancelled/skypilot_1500_preempted.log", "Cluster is preempted"),
        ("cancelled/submitit_1701_preempted.log", "this job is preempted"),
        # a CUDA kernel's own assert line, with no backticks or with its "failed" wrapped,
        ("device_assert/deta_22.log", '"index out of bounds" failed'),
        ("device_assert/genhpf_17.log", "Assertion `srcIndex < srcSelectDimSize`"),
        # the shell's SIGKILL glued to a progress bar, NCCL's /dev/shm segments (host memory),
        ("host_oom/langchain_chatchat_35.log", "]Killed"),
        ("host_oom/nccl_525_shm.log", "posix_fallocate failed"),
        ("host_oom/nccl_tests_166_shm.log", "Error while creating shared memory segment"),
        # a loss column glued to its name, a NaN loss on a line that also logs a NaN grad norm,
        # a network's outputs gone NaN,
        ("nan_divergence/byteps_411.log", "IDLoss=nan"),
        ("nan_divergence/dle_543_bert.log", "average_loss : nan"),
        ("nan_divergence/bevdet_265_fp16.log", "loss: nan"),
        ("nan_divergence/jointnlt_18.log", "Network outputs is NAN"),
        # InfiniBand through NCCL's IBP plugin, nccl-tests' own failure report,
        ("nccl_error/nccl_1664_ibp.log", "NET/IBP:Got completion from peer"),
        ("nccl_error/nccl_tests_322.log", "Test NCCL failure"),
        # a Vertex quota, cuBLAS's execution failure in its own words,
        ("capacity_unavailable/vertex_samples_264.log", "The following quotas are exceeded"),
        ("illegal_memory_access/sgan_37_cublas.log", "the GPU program failed to execute"),
        # and Slurm's own records of a job that ended on a signal or could not launch.
        ("other/arjuna_137_wtermsig.log", "WTERMSIG 9"),
        ("other/trixie_58_credential.log", "Job credential expired"),
    ],
)
def test_each_family_on_a_real_log(name: str, words: str) -> None:
    verdict, lines = classify_file(name)
    assert verdict.class_id == name.split("/")[0], verdict
    assert words in verdict.evidence
    assert verdict.line is not None and verdict.evidence in lines[verdict.line - 1]


def test_a_cause_in_a_warning_that_training_outlives_did_not_end_the_run() -> None:
    # NVIDIA/nccl#844: NCCL WARNs an allocation "Cuda failure 'out of memory'" at start-up, then
    # the epochs run on: the warning was survived, so the log is healthy.
    verdict, _ = classify_file("none/nccl_844_warn_then_training.log")
    assert verdict.class_id == "none", verdict
    # The same warning with no training after it is still the cause (test above: NCCL WARN OOM).
    text = (CORPUS / "none" / "nccl_844_warn_then_training.log").read_text()
    cut = text[: text.index("Train Epoch")]
    assert classify_text(cut).class_id == "cuda_oom"
