"""Issue 32: the families written for the sixth wave's misses, each on a real cited line.

Every log named below is in the corpus (tests/data/failures/SOURCES.md cites its thread). Each
family is a mechanism, so a test also checks a wording next to it that no log of the corpus has
(another cloud's or tool's words) and a line the family must leave alone.
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
        # mozilla/translations#964: a GCP spot VM's preemption notice.
        ("cancelled/translations_964_spot_preempted.log", "termination is imminent"),
        # akash-network/support#275, substratusai/runbooks#92: Kubernetes' ephemeral storage limit.
        ("disk_full/akash_275_ephemeral.log", "ephemeral local storage usage exceeds"),
        ("disk_full/substratus_92_ephemeral.log", "ephemeral local storage usage exceeds"),
        # wandb/server#14: HTTP 507 from a server out of storage.
        ("disk_full/wandb_server_14_507.log", "507 Server Error: Insufficient Storage"),
        # deepspeedai/DeepSpeed#4889, #5192, #889: an op's build failing (ninja, the linker, a header).
        ("dependency_error/deepspeed_4889_nvcc_failed.log", "FAILED: multi_tensor_adam.cuda.o"),
        ("dependency_error/deepspeed_5192_prebuild_ld.log", "ld: cannot find"),
        ("dependency_error/deepspeed_889_cuda_profiler_api.log", "cuda_profiler_api.h: No such file"),
        # OpenRLHF/OpenRLHF#922: vLLM's engine without the attribute an older caller wants.
        ("dependency_error/openrlhf_922_llmengine_model_executor.log", "no attribute 'model_executor'"),
        # hiyouga/LlamaFactory#10764: Windows' spawn cannot pickle a closure.
        ("pickling_error/llamafactory_10764_windows_closure.log", "Can't get local object"),
        # ray-project/ray#23109: WinError 1455 in German.
        ("host_oom/ray_23109_paging_file_de.log", "Auslagerungsdatei ist zu klein"),
        # pytorch/xla#2569: a TPU's HBM allocator refusing.
        ("cuda_oom/xla_2569_v2_32_hbm.log", "Resource exhausted: Attempting to allocate"),
        # OSC/ondemand#3253: slurmctld refusing the account.
        ("capacity_unavailable/ondemand_3253_submit_account.log", "Invalid account or account/partition"),
        # pytorch/pytorch#69197: torchrun's c10d store connect timing out.
        ("nccl_timeout/pytorch_69197_c10d_connect.log", "connect() timed out"),
        # NVIDIA/nccl#905: an InfiniBand port's async error event.
        ("nccl_error/nccl_905_ib_port_error.log", "Got async event : port error"),
    ],
)
def test_sixth_wave_families_on_their_real_lines(name: str, words: str) -> None:
    verdict = classify_lines(read(name))
    assert verdict.class_id == name.split("/")[0]
    assert words in verdict.evidence


@pytest.mark.parametrize(
    ("line", "class_id"),
    [
        # The same mechanisms in words no corpus log has.
        ("Spot instance interruption notice received: instance i-0abc will be terminated", "cancelled"),
        ("Your low-priority node was preempted by Azure Batch", "cancelled"),
        ("OSError: [Errno 122] Disk quota exceeded: '/scratch/ckpt/step_100.pt'", "disk_full"),
        ("Warning  Evicted  kubelet  The node was low on resource: ephemeral-storage.", "disk_full"),
        ("collect2: error: ld returned 1 exit status", "dependency_error"),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "nccl_timeout"),
    ],
)
def test_the_families_read_other_wordings_of_their_mechanism(line: str, class_id: str) -> None:
    assert classify_lines([line]).class_id == class_id


def test_a_task_that_may_have_been_preempted_is_not_a_preemption() -> None:
    # jax-ml/jax#23599: XLA's coordination service lists preemption among the possible causes.
    verdict = classify_lines(read("nccl_timeout/jax_23599_heartbeat.log"))
    assert verdict.class_id == "nccl_timeout"


def test_an_nccl_info_line_is_no_collective_failure() -> None:
    # modelscope/DiffSynth-Studio#1272: NCCL's normal shutdown at INFO, then glibc's heap abort.
    verdict = classify_lines(read("other/diffsynth_1272_corrupted_chunks.log"))
    assert verdict.class_id == "other"
    assert "NCCL INFO" not in verdict.evidence
    info = "host:1:2 [1] NCCL INFO [Service thread] Connection closed by localRank 0"
    assert classify_lines([info]).class_id == "none"
    assert classify_lines(["host:1:2 [1] NCCL WARN NET/Socket : Connection closed by remote peer"]).class_id == (
        "nccl_error"
    )


@pytest.mark.parametrize(
    ("name", "words"),
    [
        # Azure/azure-databricks-client#22: a cluster's state message, Driver down.
        ("other/azure_databricks_client_22_driver_down.log", "Driver down"),
        # Unakar/Logic-RL#18: a Ray actor whose worker exited with SYSTEM_ERROR.
        ("other/logic_rl_18_actor_died.log", "SYSTEM_ERROR"),
        # ray-project/ray#23857: a raylet marked dead.
        ("other/ray_23857_node_dead.log", "marked as dead"),
        # deepspeedai/DeepSpeed#4571: the launcher killing its workers (at INFO level).
        ("host_oom/deepspeed_4571_cpu_offload_killed.log", "Killing subprocess"),
    ],
)
def test_an_abnormal_end_no_rule_names_is_an_unrecognised_failure(name: str, words: str) -> None:
    verdict = classify_lines(read(name))
    assert verdict.class_id == "other"
    assert words in verdict.evidence


@pytest.mark.parametrize(
    "tail",
    [
        ["epoch 3 done", "Training finished. 0 errors, 0 failures."],
        ["[INFO] worker 2 failed health check once, retried", "Saved checkpoint to out/final"],
        ["UserWarning: this will raise an exception in a future version", "done"],
        ["W1130 12:13:49 api.py:723] agent unable to reach peer, retrying", "finished"],
    ],
)
def test_a_healthy_end_with_failure_words_below_error_level_stays_healthy(tail: list[str]) -> None:
    assert classify_lines(tail).class_id == "none"
