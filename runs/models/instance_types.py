"""What GPUs an instance type carries (AWS, Azure and GCP names): the one table.

Read by the clusters page, run costs (a CPU-only cluster's hours are never GPU time) and advice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runs.models.clusters import Cluster

import re
from dataclasses import dataclass

# Instance families -> (GPU model, GPUs per instance by size). AWS names first; Azure and GCP
# names carry the model in the name and the count is read from the size where it can be.
_AWS_GPUS: dict[str, tuple[str, dict[str, int], int]] = {
    # family: (model, {size: gpus}, default gpus for sizes not listed)
    "g5": ("A10", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
    "g6": ("L4", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}, 1),
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
# Azure: Standard_ND96isr_H100_v5 (8), Standard_NC24ads_A100_v4 (1); GCP: a3-highgpu-8g (H100 x8).
_AZURE_COUNT = {"ND96": 8, "ND40": 8, "NC96": 4, "NC48": 2, "NC24": 1, "NC12": 1, "NC6": 1}
_GCP = re.compile(r"^(?P<family>a2|a3|g2)-\w+-(?P<count>\d+)g$")
_GCP_MODELS = {"a2": "A100", "a3": "H100", "g2": "L4"}


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
    if name.startswith("Standard_N"):
        model = next((m for m in _MODELS if f"_{m}" in name or f"{m}_" in name), None)
        if model:
            prefix = re.match(r"Standard_(N[CD]\d+)", name)
            return GpuSpec(model, _AZURE_COUNT.get(prefix[1] if prefix else "", 1))
    return None


def is_gpu_instance(instance_type: str) -> bool:
    """True when the instance type carries GPUs we recognise."""
    return instance_gpus(instance_type) is not None


def cluster_gpus(cluster: Cluster, workers: int) -> int:
    """GPUs the cluster holds while up with `workers` workers: the driver's (when a GPU type) plus each worker's."""
    driver = instance_gpus(cluster.driver_node_type_id or cluster.node_type_id)
    worker = instance_gpus(cluster.node_type_id)
    return (driver.count if driver else 0) + workers * (worker.count if worker else 0)
