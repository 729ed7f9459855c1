"""Statuses and kinds used by runs/, as TextChoices (never bare strings)."""

from django.db import models


class RunSource(models.TextChoices):
    SERVERLESS = "serverless", "Serverless GPU workload"
    CLASSIC = "classic", "Classic GPU cluster"
    LOCAL = "local", "Local"


class RunOrigin(models.TextChoices):
    """Who wrote a run first; only that writer may change it afterwards (SECURITY.md, "Ownership")."""

    COLLECTOR = "collector", "Run source collector"
    KEY = "key", "API key"
    OPERATOR = "operator", "Operator command (launch, demo)"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"

    @classmethod
    def active(cls) -> list[str]:
        return [cls.QUEUED, cls.RUNNING]

    @classmethod
    def failed(cls) -> list[str]:
        """Ended badly: what the failure classifier and the failures pages read."""
        return [cls.FAILED, cls.TIMED_OUT]

    @classmethod
    def finished(cls) -> list[str]:
        return [cls.SUCCEEDED, cls.FAILED, cls.CANCELLED, cls.TIMED_OUT]


class AcceleratorType(models.TextChoices):
    A10_1 = "GPU_1xA10", "1x A10 (24 GB)"
    H100_1 = "GPU_1xH100", "1x H100 (80 GB)"
    H100_8 = "GPU_8xH100", "8x H100 (80 GB each)"
    B300_8 = "GPU_8xB300", "8x B300"


# GPUs a node of each shape carries, and its GPU memory in GB (from the runtime documentation).
GPUS_PER_NODE: dict[str, int] = {
    AcceleratorType.A10_1: 1,
    AcceleratorType.H100_1: 1,
    AcceleratorType.H100_8: 8,
    AcceleratorType.B300_8: 8,
}


def accelerator_count_problem(accelerator_type: str, num_accelerators: int) -> str:
    """Why num_accelerators does not fit the shape, or '' when it does.

    GPU_1xA10 takes any positive count, GPU_1xH100 exactly one, and the 8-GPU shapes whole
    nodes (multiples of 8): multi-GPU distributed training runs only on the 8-GPU shapes.
    """
    per_node = GPUS_PER_NODE[AcceleratorType(accelerator_type)]
    if accelerator_type == AcceleratorType.H100_1 and num_accelerators != 1:
        return f"{accelerator_type} takes exactly 1 accelerator, got {num_accelerators}"
    if num_accelerators % per_node:
        return (
            f"{accelerator_type} takes a multiple of {per_node} accelerators "
            f"({per_node} GPUs a node), got {num_accelerators}"
        )
    return ""


class Region(models.TextChoices):
    """Regions where serverless GPUs run."""

    # Labelled by their ids: people know "us-west-2", and Django's default label is "Us West 2".
    US_WEST_2 = "us-west-2", "us-west-2"
    US_WEST_1 = "us-west-1", "us-west-1"
    US_EAST_1 = "us-east-1", "us-east-1"
    US_EAST_2 = "us-east-2", "us-east-2"
    CA_CENTRAL_1 = "ca-central-1", "ca-central-1"
    SA_EAST_1 = "sa-east-1", "sa-east-1"


class TelemetrySource(models.TextChoices):
    NVML = "nvml", "NVML agent"
    MLFLOW = "mlflow", "MLflow system metrics"
    NVIDIA_SMI = "nvidia-smi", "nvidia-smi import"
    DCGM = "dcgm", "DCGM exporter import"
    PROMETHEUS = "prometheus", "Prometheus (dcgm-exporter)"
    API = "api", "API"
    DEMO = "demo", "Demo data"


class BatchKind(models.TextChoices):
    GPU_SAMPLES = "gpu_samples", "GPU samples"
    METRICS = "metrics", "MLflow metric points"


class BatchStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class CancelOutcome(models.TextChoices):
    """What asking a run to stop did (runs/cancel.py); policy actions record the same values."""

    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped (no cancel method configured)"


class RunEventKind(models.TextChoices):
    GPU_LOST = "gpu_lost", "GPU fell off the bus"
    XID = "xid", "Xid error"
    ECC = "ecc", "ECC error"
    CANCEL_REQUESTED = "cancel_requested", "Cancel requested"
    CANCELLED = "cancelled", "Cancelled"
    TIMEOUT = "timeout", "Timed out"
    SIGNAL = "signal", "Stopped by a signal"
    NOTE = "note", "Note"


class CollectorKind(models.TextChoices):
    MLFLOW = "mlflow", "MLflow metrics"
    RUNS = "runs", "Run source"
    LOGS = "logs", "Log source"
    AGENT = "agent", "GPU node agent"
    PROMETHEUS = "prometheus", "Prometheus source"


class PostMortemStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    IN_REVIEW = "in_review", "In review"
    DONE = "done", "Done"


class StallKind(models.TextChoices):
    """What `runs.telemetry.stalls` flags on a running run."""

    HUNG = "hung", "Busy but doing no work (hung collective?)"
    NO_PROCESS = "no_process", "Billed GPU with no process on it"
