"""What GPUs an instance type carries (AWS, Azure and GCP names): the one table.

Read by the clusters page, run costs (a CPU-only cluster's hours are never GPU time) and advice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runs.models.clusters import Cluster

import re
from dataclasses import dataclass

# Instance families -> (GPU model, GPUs per instance by size). AWS names first, then Azure's
# sizes by exact name, then GCP's machine types.
_AWS_GPUS: dict[str, tuple[str, dict[str, int], int]] = {
    # family: (model, {size: gpus}, default gpus for sizes not listed)
    "g5": ("A10", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
    "g6": ("L4", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
    # G6e: xlarge to 16xlarge carry one L40S, 12xlarge and 24xlarge four, 48xlarge eight (AWS's
    # G6e instance table; as meta-pytorch/torchx `torchx/specs/named_resources_aws.py` lists them).
    "g6e": ("L40S", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
    "g4dn": ("T4", {"12xlarge": 4, "metal": 8}, 1),
    "p3": ("V100", {"8xlarge": 4, "16xlarge": 8}, 1),
    "p3dn": ("V100", {}, 8),
    "p4d": ("A100", {}, 8),
    "p4de": ("A100", {}, 8),
    "p5": ("H100", {}, 8),
    "p5e": ("H200", {}, 8),
    "p5en": ("H200", {}, 8),
}
_AWS = re.compile(r"^(?P<family>[a-z]+\d+[a-z]*)\.(?P<size>[a-z0-9]+)$")
_MODELS = ("H100", "H200", "A100", "A10", "L4", "T4", "V100", "B200", "B300")
# Azure GPU sizes Databricks offers, by exact name (lower case: the docs spell some in capitals),
# from Azure's size tables (NCv3, NCasT4_v3, NC A10 v4, NC A100 v4, NCads H100 v5,
# NDasrA100_v4, NDm A100 v4, ND H100 v5) as microsoft/aspire at
# 5bd693ae1897dee5e2ce71c2cc08879c1c7eff51 `src/Aspire.Hosting.Azure.Kubernetes/AksNodeVmSizes.cs`
# lists them. Older names do not carry the model (NC6s_v3, ND96asr_v4) and the vCPU prefix is
# no GPU count (NC64as_T4_v3 holds 4, NC80adis_H100_v5 2): the name alone gives neither.
_AZURE_GPUS: dict[str, tuple[str, int]] = {
    "standard_nc6s_v3": ("V100", 1),
    "standard_nc12s_v3": ("V100", 2),
    "standard_nc24s_v3": ("V100", 4),
    "standard_nc24rs_v3": ("V100", 4),
    "standard_nc4as_t4_v3": ("T4", 1),
    "standard_nc8as_t4_v3": ("T4", 1),
    "standard_nc16as_t4_v3": ("T4", 1),
    "standard_nc64as_t4_v3": ("T4", 4),
    "standard_nc8ads_a10_v4": ("A10", 1),
    "standard_nc16ads_a10_v4": ("A10", 1),
    "standard_nc32ads_a10_v4": ("A10", 2),
    "standard_nc24ads_a100_v4": ("A100", 1),
    "standard_nc48ads_a100_v4": ("A100", 2),
    "standard_nc96ads_a100_v4": ("A100", 4),
    "standard_nd96asr_v4": ("A100", 8),
    "standard_nd96amsr_a100_v4": ("A100", 8),
    "standard_nc40ads_h100_v5": ("H100", 1),
    "standard_nc80adis_h100_v5": ("H100", 2),
    "standard_nd96isr_h100_v5": ("H100", 8),
}
# Azure sizes not in the table that name their model (a newer series): 8 GPUs for ND96, else the
# count the NC prefix means in the A100 v4 series; a guess, kept only for names that say GPU.
_AZURE_COUNT = {"ND96": 8, "ND40": 8, "NC96": 4, "NC48": 2, "NC24": 1, "NC12": 1, "NC6": 1}
# GCP: a2-highgpu-1g (A100 x1), a3-highgpu-8g (H100 x8): the count ends the name.
_GCP = re.compile(r"^(?P<family>a2|a3)-\w+-(?P<count>\d+)g$")
_GCP_MODELS = {"a2": "A100", "a3": "H100"}
# GCP G2 (L4) names give vCPUs, not GPUs: g2-standard-24 holds 2, -48 4, -96 8, the rest 1
# (Google Cloud's G2 machine types table, cloud.google.com/compute/docs/gpus).
_GCP_G2 = {"4": 1, "8": 1, "12": 1, "16": 1, "24": 2, "32": 1, "48": 4, "96": 8}
_GCP_G2_NAME = re.compile(r"g2-standard-(\d+)")


@dataclass(frozen=True)
class GpuSpec:
    """The GPUs one instance type carries."""

    model: str
    count: int


def instance_gpus(instance_type: str) -> GpuSpec | None:
    """GPU model and count of an instance type, or None for a CPU (or unknown) type."""
    name = (instance_type or "").strip()
    if match := _AWS.match(name):
        entry = _AWS_GPUS.get(match["family"])
        if entry:
            model, sizes, default = entry
            return GpuSpec(model, sizes.get(match["size"], default))
        return None
    if match := _GCP.match(name):
        return GpuSpec(_GCP_MODELS[match["family"]], int(match["count"]))
    if match := _GCP_G2_NAME.fullmatch(name):
        count = _GCP_G2.get(match[1])
        return GpuSpec("L4", count) if count else None
    if known := _AZURE_GPUS.get(name.lower()):
        return GpuSpec(*known)
    if name.startswith("Standard_N"):
        named = next((m for m in _MODELS if f"_{m}" in name or f"{m}_" in name), None)
        if named:
            prefix = re.match(r"Standard_(N[CD]\d+)", name)
            return GpuSpec(named, _AZURE_COUNT.get(prefix[1] if prefix else "", 1))
    return None


def is_gpu_instance(instance_type: str) -> bool:
    """True when the instance type carries GPUs we recognise."""
    return instance_gpus(instance_type) is not None


def cluster_gpus(cluster: Cluster, workers: int) -> int:
    """GPUs the cluster holds while up with `workers` workers: the driver's (when a GPU type) plus each worker's."""
    driver = instance_gpus(cluster.driver_node_type_id or cluster.node_type_id)
    worker = instance_gpus(cluster.node_type_id)
    return (driver.count if driver else 0) + workers * (worker.count if worker else 0)
