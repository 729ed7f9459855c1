"""Demo classic GPU clusters and runs that trigger every advice rule (`runs.clusters.advice`).

Deterministic: the same `now` writes the same rows (no randomness at all), each marked
`is_demo`, with `demo-cluster-` / `demo-adv-` ids. `write_demo_clusters` runs inside the
seed's transaction after the demo teams exist; `remove_demo_clusters` runs first in a reset
(a cluster protects its team from deletion).

What each object is for:

- vision-photon-a10 (g5.12xlarge, Photon, standard access, 14.3 ML): photon_on_gpu,
  uc_without_dedicated (has a run), and a what-if as GPU_1xA10.
- vision-custom-image (g5.xlarge single node, custom image on 15.4 ML): custom_image_on_ml_runtime.
- nlp-shared-a100 (p4d.24xlarge, standard access, reads "main.nlp.corpus"): uc_without_dedicated,
  "no serverless equivalent"; its run uses HorovodRunner (horovod_runner).
- speech-old-fgac (p5.48xlarge, dedicated, 14.3 ML, reads a materialized view): fgac_old_runtime.
- vision-h100-dedicated (p5.48xlarge, dedicated, 15.4 ML): a clean cluster with busy and idle
  telemetry, priced as GPU_8xH100 in the what-if.
- Serverless runs: torchrun on GPU_1xH100, databricks_genai, a 4 GiB pickle error, 8 GPUs at
  ~20% utilization, and a 12-day CLI run with no checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import Group

from runs.choices import AcceleratorType, RunSource, RunStatus
from runs.models import Attempt, Cluster, ClusterEvent, GpuMinute, LogChunk, Node, Run

CLUSTER_PREFIX = "demo-cluster-"
RUN_PREFIX = "demo-adv-"


@dataclass(frozen=True)
class DemoCluster:
    """One demo cluster's fields, and how long ago it started and stopped (hours)."""

    name: str
    team: str
    fields: dict[str, Any]
    started_hours_ago: float
    ran_hours: float | None  # None: still running


@dataclass(frozen=True)
class DemoRun:
    """One demo run: its fields, log text, and GPU-minutes as (minutes, utilization) blocks."""

    slug: str
    team: str
    fields: dict[str, Any]
    started_hours_ago: float
    ran_hours: float | None
    cluster: str | None = None
    log: str = "Starting training\n"
    minutes: tuple[tuple[int, float], ...] = ()
    gpus: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


GPU_ML_14 = "14.3.x-gpu-ml-scala2.12"
GPU_ML_15 = "15.4.x-gpu-ml-scala2.12"
CLUSTERS = (
    DemoCluster("vision-photon-a10", "vision", {
        "spark_version": GPU_ML_14, "node_type_id": "g5.12xlarge", "driver_node_type_id": "g5.xlarge",
        "num_workers": 2, "data_security_mode": "USER_ISOLATION", "runtime_engine": "PHOTON", "region": "us-west-2",
    }, started_hours_ago=30, ran_hours=6),
    DemoCluster("vision-custom-image", "vision", {
        "spark_version": GPU_ML_15, "node_type_id": "g5.xlarge", "driver_node_type_id": "g5.xlarge",
        "single_node": True, "data_security_mode": "SINGLE_USER", "single_user_name": "alice@demo.airboard.example",
        "runtime_engine": "STANDARD", "docker_image": "registry.example.com/vision/train:cuda12", "region": "us-west-2",
    }, started_hours_ago=20, ran_hours=3),
    DemoCluster("nlp-shared-a100", "nlp", {
        "spark_version": GPU_ML_15, "node_type_id": "p4d.24xlarge", "driver_node_type_id": "p4d.24xlarge",
        "num_workers": 1, "data_security_mode": "USER_ISOLATION", "runtime_engine": "STANDARD", "region": "us-east-1",
        "raw": {"spark_conf": {"airboard.demo.source_table": "'main.nlp.corpus'"}},
    }, started_hours_ago=50, ran_hours=10),
    DemoCluster("speech-old-fgac", "speech", {
        "spark_version": GPU_ML_14, "node_type_id": "p5.48xlarge", "driver_node_type_id": "p5.48xlarge",
        "single_node": True, "data_security_mode": "SINGLE_USER", "single_user_name": "speech-ml",
        "runtime_engine": "STANDARD", "region": "us-east-2",
    }, started_hours_ago=12, ran_hours=2),
    DemoCluster("vision-h100-dedicated", "vision", {
        "spark_version": GPU_ML_15, "node_type_id": "p5.48xlarge", "driver_node_type_id": "p5.48xlarge",
        "single_node": True, "data_security_mode": "SINGLE_USER", "single_user_name": "vision-ml",
        "runtime_engine": "STANDARD", "region": "us-west-2",
    }, started_hours_ago=8, ran_hours=4),
)  # fmt: skip

_H100_8 = {"accelerator_type": AcceleratorType.H100_8.value, "num_accelerators": 8, "gpus_per_node": 8}
RUNS = (
    DemoRun("photon-etl", "vision", {"source": RunSource.CLASSIC, "num_accelerators": 4, "gpus_per_node": 4},
            started_hours_ago=29, ran_hours=2, cluster="vision-photon-a10"),
    DemoRun("horovod", "nlp", {"source": RunSource.CLASSIC, "num_accelerators": 8, "gpus_per_node": 8},
            started_hours_ago=49, ran_hours=3, cluster="nlp-shared-a100",
            log="from sparkdl import HorovodRunner\nhr = HorovodRunner(np=8)\nhr.run(train)\n"),
    DemoRun("fgac", "speech", {"source": RunSource.CLASSIC, "num_accelerators": 8, "gpus_per_node": 8},
            started_hours_ago=11, ran_hours=1, cluster="speech-old-fgac",
            log="Reading materialized view main.speech.daily_features\n"),
    DemoRun("h100-busy-idle", "vision", {"source": RunSource.CLASSIC, "num_accelerators": 8, "gpus_per_node": 8},
            started_hours_ago=7, ran_hours=2, cluster="vision-h100-dedicated",
            minutes=((90, 85.0), (30, 1.0)), gpus=8),
    DemoRun("torchrun-1xh100", "vision", {
        "accelerator_type": AcceleratorType.H100_1.value, "num_accelerators": 1, "gpus_per_node": 1,
        "workload_yaml": "experiment_name: /Workspace/Users/alice/ddp\ncompute:\n  accelerator_type: GPU_1xH100\n"
                         "  num_accelerators: 1\ncommand: torchrun --nproc_per_node=8 train.py\n",
    }, started_hours_ago=5, ran_hours=1),
    DemoRun("genai-finetune", "nlp", {
        "accelerator_type": AcceleratorType.A10_1.value, "num_accelerators": 1, "gpus_per_node": 1,
        "parameters": {"entrypoint": "from databricks_genai import finetuning"},
    }, started_hours_ago=26, ran_hours=1),
    DemoRun("pickle-4gib", "nlp", {**_H100_8}, started_hours_ago=40, ran_hours=0.5,
            log="OverflowError: cannot serialize a bytes object larger than 4 GiB\n"),
    DemoRun("low-util-8gpu", "speech", {**_H100_8}, started_hours_ago=10, ran_hours=2,
            minutes=((60, 18.0),), gpus=8),
    DemoRun("no-checkpoint-12d", "vision", {
        "accelerator_type": AcceleratorType.A10_1.value, "num_accelerators": 1, "gpus_per_node": 1,
        "status": RunStatus.RUNNING,
    }, started_hours_ago=12 * 24, ran_hours=None, log="epoch 1 step 100 loss 2.31\n"),
)  # fmt: skip


def remove_demo_clusters() -> dict[str, int]:
    """Delete the demo clusters (their events cascade); demo runs go with the other demo runs."""
    clusters = Cluster.objects.filter(is_demo=True)
    count = clusters.count()
    Run.objects.filter(cluster__in=clusters, is_demo=True).delete()
    clusters.delete()
    return {"clusters": count}


def write_demo_clusters(now: datetime) -> dict[str, int]:
    """Write the demo clusters, their events and the advice-triggering runs; returns counts.

    1. Clusters with STARTING/RUNNING/TERMINATED events from their planned uptime.
    2. Runs (one attempt, one node) on them or serverless, with a log chunk each.
    3. GPU-minutes as planned blocks, every GPU of the node, from the run's start.
    """
    teams = {name: Group.objects.get_or_create(name=name)[0] for name in {c.team for c in CLUSTERS}}
    teams |= {name: Group.objects.get_or_create(name=name)[0] for name in {r.team for r in RUNS} - set(teams)}
    clusters: dict[str, Cluster] = {}
    events: list[ClusterEvent] = []
    for plan in CLUSTERS:
        start = now - timedelta(hours=plan.started_hours_ago)
        end = start + timedelta(hours=plan.ran_hours) if plan.ran_hours is not None else None
        cluster = Cluster.objects.create(
            team=teams[plan.team], cluster_id=CLUSTER_PREFIX + plan.name, name=plan.name,
            creator=f"{plan.team}-lead@demo.airboard.example", state="TERMINATED" if end else "RUNNING",
            start_time=start, terminated_time=end, is_demo=True, **plan.fields,
        )  # fmt: skip
        clusters[plan.name] = cluster
        events += [ClusterEvent(cluster=cluster, ts=start, kind="STARTING"),
                   ClusterEvent(cluster=cluster, ts=start + timedelta(minutes=5), kind="RUNNING")]  # fmt: skip
        if end is not None:
            events.append(ClusterEvent(cluster=cluster, ts=end, kind="TERMINATED"))
    ClusterEvent.objects.bulk_create(events)

    minutes: list[GpuMinute] = []
    for spec in RUNS:
        start = now - timedelta(hours=spec.started_hours_ago)
        end = start + timedelta(hours=spec.ran_hours) if spec.ran_hours is not None else None
        run_cluster = clusters.get(spec.cluster) if spec.cluster else None
        fields = {
            "status": RunStatus.SUCCEEDED,
            "region": run_cluster.region if run_cluster else "us-west-2",
        } | spec.fields
        if run_cluster is not None:
            fields["instance_type"] = run_cluster.node_type_id
        run = Run.objects.create(
            team=teams[spec.team], external_id=RUN_PREFIX + spec.slug, experiment_name=f"/Workspace/demo/{spec.slug}",
            submitted_at=start - timedelta(minutes=3), started_at=start, ended_at=end, cluster=run_cluster,
            creator=f"{spec.team}-lead@demo.airboard.example", is_demo=True, **fields,
        )  # fmt: skip
        attempt = Attempt.objects.create(run=run, number=1, status=run.status, started_at=start, ended_at=end)
        node = Node.objects.create(attempt=attempt, index=0, host="10.12.0.1", status=run.status)
        LogChunk.objects.create(node=node, seq=0, text=spec.log, line_count=spec.log.count("\n"))
        at = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for count, util in spec.minutes:
            for _ in range(count):
                for gpu in range(spec.gpus):
                    minutes.append(GpuMinute(
                        run=run, node=node, gpu_index=gpu, minute=at, samples=60, utilization_gpu_min=util,
                        utilization_gpu_avg=util, utilization_gpu_max=util,
                    ))  # fmt: skip
                at += timedelta(minutes=1)
    GpuMinute.objects.bulk_create(minutes, batch_size=1000)
    return {"clusters": len(clusters), "cluster events": len(events), "advice runs": len(RUNS)}


# Kept for the tests and the README: which demo object triggers which rule.
TRIGGERS = {
    "photon_on_gpu": "vision-photon-a10",
    "custom_image_on_ml_runtime": "vision-custom-image",
    "uc_without_dedicated": "nlp-shared-a100",
    "fgac_old_runtime": "speech-old-fgac",
    "distributed_on_single_gpu_shape": RUN_PREFIX + "torchrun-1xh100",
    "horovod_runner": RUN_PREFIX + "horovod",
    "databricks_genai": RUN_PREFIX + "genai-finetune",
    "dataset_as_argument": RUN_PREFIX + "pickle-4gib",
    "low_util_multi_gpu": RUN_PREFIX + "low-util-8gpu",
    "no_checkpoint_near_cap": RUN_PREFIX + "no-checkpoint-12d",
}
