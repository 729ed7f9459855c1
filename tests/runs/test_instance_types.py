"""GPUs per instance type, checked against the clouds' own size tables.

Sources of the expected counts:
- Azure: microsoft/aspire at 5bd693ae1897dee5e2ce71c2cc08879c1c7eff51,
  `src/Aspire.Hosting.Azure.Kubernetes/AksNodeVmSizes.cs` (generated from Azure's VM size list:
  "Standard_NC64as_T4_v3 -- 64 vCPUs -- 440 GB RAM -- 4 GPU(s)"), matching Azure's NCv3,
  NCasT4_v3, NC A100 v4, NCads H100 v5 and NDasrA100_v4 size pages.
- AWS G6e: the EC2 G6e instance table, as meta-pytorch/torchx `torchx/specs/named_resources_aws.py`
  (PR #969, "feat: add aws_g6e instances") encodes it.
- GCP G2: Google Cloud's G2 machine types table (cloud.google.com/compute/docs/gpus).
- The Databricks cluster spec: NVIDIA/spark-rapids-examples,
  `examples/ML+DL-Examples/Spark-DL/dl_inference/databricks/setup/start_cluster.sh`.
"""

from __future__ import annotations

import pytest

from runs.collectors.jobs_records import RunKind, classify, spec_gpus
from runs.models.instance_types import GpuSpec, instance_gpus


@pytest.mark.parametrize(
    ("name", "model", "count"),
    [
        # Azure: old names carry no model, and the vCPU prefix is no GPU count.
        ("Standard_NC6s_v3", "V100", 1),
        ("Standard_NC12s_v3", "V100", 2),
        ("Standard_NC24s_v3", "V100", 4),
        ("Standard_ND96asr_v4", "A100", 8),
        ("Standard_NC8as_T4_v3", "T4", 1),
        ("Standard_NC64as_T4_v3", "T4", 4),
        ("Standard_NC48ads_A100_v4", "A100", 2),
        ("Standard_NC40ads_H100_v5", "H100", 1),
        ("Standard_NC80adis_H100_v5", "H100", 2),
        ("Standard_ND96isr_H100_v5", "H100", 8),
        ("Standard_NC40ADS_H100_V5", "H100", 1),  # as Hugging Face's Azure hardware table spells it
        # AWS G6e (L40S).
        ("g6e.xlarge", "L40S", 1),
        ("g6e.16xlarge", "L40S", 1),
        ("g6e.12xlarge", "L40S", 4),
        ("g6e.48xlarge", "L40S", 8),
        # GCP G2 (L4): the number is vCPUs.
        ("g2-standard-12", "L4", 1),
        ("g2-standard-24", "L4", 2),
        ("g2-standard-48", "L4", 4),
        ("g2-standard-96", "L4", 8),
        # Unchanged families.
        ("g5.12xlarge", "A10", 4),
        ("a2-megagpu-16g", "A100", 16),
    ],
)
def test_gpu_instance_types_carry_their_real_gpu_count(name: str, model: str, count: int) -> None:
    assert instance_gpus(name) == GpuSpec(model, count)


@pytest.mark.parametrize("name", ["Standard_DS3_v2", "Standard_D4ds_v5", "i3.xlarge", "n2-standard-8", "g2-standard-7"])
def test_cpu_and_unknown_types_have_no_gpus(name: str) -> None:
    assert instance_gpus(name) is None


def test_the_spark_rapids_databricks_cluster_is_a_gpu_cluster() -> None:
    # start_cluster.sh's Azure cluster: V100 workers, a T4 driver.
    spec = {
        "spark_version": "13.3.x-gpu-ml-scala2.12",
        "node_type_id": "Standard_NC6s_v3",
        "driver_node_type_id": "Standard_NC8as_T4_v3",
        "num_workers": 8,
    }
    record = {
        "run_id": 1,
        "job_clusters": [{"job_cluster_key": "gpu", "new_cluster": spec}],
        "tasks": [{"task_key": "t", "run_id": 2, "job_cluster_key": "gpu"}],
    }
    assert spec_gpus(spec) == 1 + 8 * 1
    assert classify(record, {}) == RunKind.CLASSIC
