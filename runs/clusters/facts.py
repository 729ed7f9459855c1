"""Classic GPU clusters: what their GPUs are and how they are set up (access mode, Photon, runtime).

What a cluster cost (uptime, busy and idle GPU-hours, the serverless what-if) is billing's:
`billing.engine.cluster_costs` and `team_totals` (billing/costs/clusters.py). These are the
facts the clusters page and the advice read beside it.
"""

from __future__ import annotations

import re

from runs.models import Cluster
from runs.models.instance_types import GpuSpec, instance_gpus, is_gpu_instance

__all__ = ["GpuSpec", "instance_gpus", "is_gpu_instance"]


# Access modes that dedicate a cluster to one user or group (old and new API names).
DEDICATED_MODES = {"SINGLE_USER", "DATA_SECURITY_MODE_DEDICATED", "DEDICATED"}
STANDARD_MODES = {"USER_ISOLATION", "DATA_SECURITY_MODE_STANDARD", "STANDARD"}


def access_mode(cluster: Cluster) -> str:
    """The access mode in words: dedicated (to whom), standard, or the raw mode."""
    mode = (cluster.data_security_mode or "").upper()
    if mode in DEDICATED_MODES:
        return f"dedicated to {cluster.single_user_name}" if cluster.single_user_name else "dedicated"
    if mode in STANDARD_MODES:
        return "standard (shared)"
    return mode.lower().replace("_", " ") if mode else "not set"


def is_photon(cluster: Cluster) -> bool:
    """Photon asked for, by the engine field or a '-photon-' runtime version."""
    return (cluster.runtime_engine or "").upper() == "PHOTON" or "photon" in (cluster.spark_version or "").lower()


def is_ml_runtime(cluster: Cluster) -> bool:
    """The cluster asks for the ML runtime ('15.4.x-gpu-ml-scala2.12', '14.3.x-cpu-ml-...')."""
    version = (cluster.spark_version or "").lower()
    return "-ml-" in version or "gpu-ml" in version


def runtime_version(cluster: Cluster) -> tuple[int, int] | None:
    """(major, minor) of the runtime version, or None when it does not parse."""
    match = re.match(r"^(\d+)\.(\d+)", cluster.spark_version or "")
    return (int(match[1]), int(match[2])) if match else None
