"""How a stored GPU index names a GPU: plain GPUs, and MIG instances as GPUs of their own.

The importers store a MIG instance under its own index; charts, the fleet grid and stall
notices read it back as `GPU 0 MIG 7`.
"""

from __future__ import annotations

# MIG instances as GPUs of their own: GPU g, instance i -> MIG_INDEX_BASE + g * MIG_SLOTS + i.
# GPU_I_ID is below 16 on every MIG-capable GPU (A100/H100: at most 7 instances, ids < 15).
MIG_INDEX_BASE = 1000
MIG_SLOTS = 100


def mig_gpu_index(gpu: int, instance: int) -> int:
    """The GpuSample index of MIG instance `instance` (GPU_I_ID) of GPU `gpu`."""
    if not 0 <= instance < MIG_SLOTS:
        raise ValueError(f"MIG instance id {instance} out of range")
    return MIG_INDEX_BASE + gpu * MIG_SLOTS + instance


def gpu_label(index: int) -> str:
    """How a stored GPU index reads on a chart: `GPU 3`, or `GPU 0 MIG 7` for a MIG instance."""
    if index < MIG_INDEX_BASE:
        return f"GPU {index}"
    gpu, instance = divmod(index - MIG_INDEX_BASE, MIG_SLOTS)
    return f"GPU {gpu} MIG {instance}"
