"""The demo workspace's plan: teams, people and runs built from a seed and a point in time.

`build_plan(seed, now, runs)` is pure: the same seed and `now` give an equal `DemoPlan` (runs
with their attempts, nodes, failures, workload YAML and egress), drawn from one
`random.Random(seed)` and never the global generator. `dashboard.demo.write` writes a plan and
removes demo data; the command `seed_demo` only parses options.

The mix follows what an ML platform team sees in 90 days: most runs on single GPUs or one
8-GPU node, a few 32-64 GPU jobs, about 12% failures (OOM first, then NCCL, import errors,
NaN losses...), retries that sometimes save a run, ~8% of serverless runs placed in another
region than the team's workspace, and a handful of runs queued or running right now.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import yaml

from dashboard.demo.log_context import FAILURES, OOM_ALLOCATIONS
from dashboard.demo.series import TrainingCurve
from runs.choices import GPUS_PER_NODE, AcceleratorType, Region, RunSource, RunStatus

# Plain strings (not the enum members): they go into YAML and JSON as they are.
A10, H100, H100_8, B300_8 = (str(t.value) for t in AcceleratorType)
S, F, C, T = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT
HOUR = 3600
K = TypeVar("K")
DAYS = 90
DEMO_EMAIL_DOMAIN = "demo.airboard.example"
ADMIN_USERNAME = "admin"


@dataclass(frozen=True)
class Team:
    """A demo team: a Django group with a home region and a usage policy."""

    name: str
    home_region: str
    usage_policy: str
    members: tuple[str, ...]
    weight: float


TEAMS = (
    Team("vision", Region.US_WEST_2.value, "vision-gpu-training", ("alice", "bob", "carol"), 0.33),
    Team("nlp", Region.US_EAST_1.value, "nlp-llm-training", ("dave", "erin", "frank", "grace"), 0.45),
    Team("speech", Region.US_EAST_2.value, "speech-asr", ("heidi", "ivan", "judy"), 0.22),
)
PEOPLE = {
    "alice": ("Alice", "Chen"), "bob": ("Bob", "Martinez"), "carol": ("Carol", "Nguyen"),
    "dave": ("Dave", "Patel"), "erin": ("Erin", "O'Brien"), "frank": ("Frank", "Müller"),
    "grace": ("Grace", "Kim"), "heidi": ("Heidi", "Johansson"), "ivan": ("Ivan", "Petrov"),
    "judy": ("Judy", "Okafor"), ADMIN_USERNAME: ("Platform", "Admin"),
}  # fmt: skip
# Internal subnets per region, for node addresses like 10.12.3.45.
SUBNETS: dict[str, int] = {Region.US_WEST_2: 12, Region.US_WEST_1: 14, Region.US_EAST_1: 20, Region.US_EAST_2: 22,
           Region.CA_CENTRAL_1: 30, Region.SA_EAST_1: 40}  # fmt: skip


def email(username: str) -> str:
    return f"{username}@{DEMO_EMAIL_DOMAIN}"


@dataclass(frozen=True)
class Experiment:
    """A project a team keeps re-running: where it lives, what it runs on, how it trains."""

    team: str
    slug: str
    family: str  # nlp, vision, speech: the log format and the throughput metric
    shared: bool
    shapes: tuple[tuple[str, float], ...]
    hours: float  # median duration of a full run
    loss: tuple[float, float]  # start and end of the training loss
    params: tuple[tuple[str, str | int | float], ...]
    repo: str


def _exp(team: str, slug: str, shared: bool, shapes: dict[str, float], hours: float, loss: tuple[float, float],
         repo: str, **params: str | int | float) -> Experiment:  # fmt: skip
    family = {"vision": "vision", "nlp": "nlp", "speech": "speech"}[team]
    return Experiment(team, slug, family, shared, tuple(shapes.items()), hours, loss, tuple(params.items()), repo)


EXPERIMENTS = (
    _exp("vision", "dinov2-pretrain", True, {H100_8: 0.6, B300_8: 0.4}, 20, (6.9, 2.1), "ssl-pretrain",
         lr=1e-3, batch_size=1024, epochs=100, image_size=224, arch="vit_large", weight_decay=0.04),
    _exp("vision", "vit-l16-finetune", False, {H100: 0.5, H100_8: 0.3, A10: 0.2}, 2.5, (4.6, 0.6), "vision-ft",
         lr=5e-5, batch_size=64, epochs=10, image_size=384, label_smoothing=0.1),
    _exp("vision", "sam2-segmentation", False, {H100_8: 0.7, H100: 0.3}, 6, (1.2, 0.25), "segmentation",
         lr=2e-4, batch_size=16, epochs=40, image_size=1024),
    _exp("vision", "yolov8-detect", False, {A10: 0.7, H100: 0.3}, 1.5, (3.2, 0.9), "detection",
         lr=1e-2, batch_size=32, epochs=100, image_size=640, mosaic=True),
    _exp("vision", "clip-vit-b32", True, {H100_8: 1.0}, 10, (5.5, 1.4), "ssl-pretrain",
         lr=5e-4, batch_size=4096, epochs=32, warmup_steps=2000),
    _exp("nlp", "llama3-8b-sft", False, {H100_8: 0.7, B300_8: 0.3}, 5, (2.1, 1.05), "llm-finetune",
         lr=2e-5, batch_size=8, gradient_accumulation_steps=4, epochs=3, max_seq_len=4096, warmup_ratio=0.03),
    _exp("nlp", "llama3-70b-dpo", True, {B300_8: 0.6, H100_8: 0.4}, 18, (0.69, 0.36), "llm-finetune",
         lr=5e-7, batch_size=2, gradient_accumulation_steps=16, epochs=1, beta=0.1, max_seq_len=8192),
    _exp("nlp", "mistral-7b-instruct", False, {H100_8: 0.8, H100: 0.2}, 4, (1.9, 1.1), "llm-finetune",
         lr=1e-5, batch_size=4, gradient_accumulation_steps=8, epochs=2, lora_r=64, lora_alpha=16),
    _exp("nlp", "bert-base-ner", False, {A10: 0.8, H100: 0.2}, 0.5, (2.2, 0.08), "nlp-classic",
         lr=3e-5, batch_size=32, epochs=5, max_seq_len=256),
    _exp("nlp", "qwen2-7b-rag-ft", False, {H100_8: 0.6, H100: 0.4}, 3, (1.7, 0.95), "llm-finetune",
         lr=1e-5, batch_size=4, epochs=2, max_seq_len=8192, lora_r=32),
    _exp("nlp", "t5-large-summarize", False, {H100: 0.5, A10: 0.5}, 2, (2.8, 1.3), "nlp-classic",
         lr=3e-4, batch_size=16, epochs=4, max_source_len=1024),
    _exp("speech", "whisper-large-v3-ft", True, {H100_8: 0.6, H100: 0.4}, 6, (1.8, 0.35), "asr",
         lr=1e-5, batch_size=16, epochs=5, sample_rate=16000, language="multilingual"),
    _exp("speech", "wav2vec2-asr", False, {A10: 0.5, H100: 0.5}, 3, (3.5, 0.3), "asr",
         lr=1e-4, batch_size=32, epochs=30, sample_rate=16000, ctc_loss_reduction="mean"),
    _exp("speech", "conformer-ctc", False, {H100_8: 0.5, A10: 0.5}, 8, (4.1, 0.45), "asr",
         lr=2e-3, batch_size=64, epochs=50, sample_rate=16000, spec_augment=True),
    _exp("speech", "vits-tts", False, {A10: 0.6, H100: 0.4}, 5, (3.0, 1.6), "tts",
         lr=2e-4, batch_size=24, epochs=200, sample_rate=22050),
)  # fmt: skip
EXPERIMENT_BY_SLUG = {e.slug: e for e in EXPERIMENTS}
SECRETS = {"nlp": ("HF_TOKEN", "WANDB_API_KEY"), "vision": ("WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY"),
           "speech": ("HF_TOKEN",)}  # fmt: skip
# Failure kinds with their weights among failed attempts; retried runs fail the transient way.
FAILURE_WEIGHTS = {"cuda_oom": 24, "nccl_timeout": 12, "module_not_found": 10, "nan_loss": 9, "host_oom": 8,
                   "device_assert": 6, "disk_full": 6, "illegal_memory_access": 5, "segfault": 5,
                   "result_too_large": 4, "xid79": 3}  # fmt: skip
TRANSIENT = ("nccl_timeout", "xid79", "host_oom", "segfault", "cuda_oom")
MULTI_NODE_ONLY = ("nccl_timeout", "xid79")
# libyaml's emitter when PyYAML was built with it: the pure-Python one costs ~4 ms a file.
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
NICE_TIMEOUTS = (30, 60, 120, 240, 480, 720, 1440, 2880, 4320)
# Per-GPU throughput by shape: tokens/s for language models, samples/s for vision and speech.
THROUGHPUT = {A10: (900, 110), H100: (3800, 560), H100_8: (3800, 560), B300_8: (8600, 1250)}


@dataclass
class NodePlan:
    index: int
    host: str
    status: str
    exit_code: int | None


@dataclass
class AttemptPlan:
    number: int
    status: str
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    state_message: str
    mlflow_run_id: str
    failure: str | None = None
    failed_node: int = 0
    failed_local_rank: int = 0
    oom_alloc_gib: float = 2.0
    nodes: list[NodePlan] = field(default_factory=list)


@dataclass
class RunPlan:
    """One demo run as it will be stored, plus what its logs and series are drawn from."""

    external_id: str
    source: str
    team: str
    username: str
    experiment: Experiment
    experiment_name: str
    mlflow_run_id: str
    accelerator_type: str
    instance_type: str
    num_accelerators: int
    gpus_per_node: int
    region: str
    home_region: str
    status: str
    state_message: str
    submitted_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    timeout_minutes: int | None
    max_retries: int
    usage_policy_name: str
    parameters: dict[str, Any]
    workload_yaml: str
    curve: TrainingCurve
    attempts: list[AttemptPlan]
    egress: list[tuple[str, str, int, datetime]]  # source region, destination, bytes, ts
    pk: int = field(default=0, compare=False)  # set once written

    @property
    def is_cross_region(self) -> bool:
        return bool(self.region and self.region != self.home_region)


@dataclass
class DemoPlan:
    seed: int
    now: datetime
    runs: list[RunPlan]  # newest submission first


@dataclass(frozen=True)
class Scenario:
    """A run placed on purpose near `now`, so every demo shows live and just-failed runs."""

    slug: str
    shape: str
    num: int
    ago_min: tuple[float, float]  # submitted this many minutes before now
    queue_min: tuple[float, float]
    attempts: tuple[tuple[str, str | None, float, float], ...]  # end status, failure, minutes range
    max_retries: int = 0


SCENARIOS = (
    Scenario("llama3-70b-dpo", B300_8, 64, (2, 6), (20, 60), ((S, None, 1800, 2400),)),
    Scenario("llama3-8b-sft", H100_8, 16, (40, 90), (1, 4), ((S, None, 300, 420),)),
    Scenario("mistral-7b-instruct", H100_8, 8, (65, 85), (1, 3), ((F, "cuda_oom", 45, 55),)),
    Scenario("dinov2-pretrain", H100_8, 32, (300, 540), (5, 15), ((S, None, 1200, 1800),), 1),
    Scenario("wav2vec2-asr", H100, 1, (20, 50), (0.5, 2), ((S, None, 120, 180),)),
    Scenario("vit-l16-finetune", A10, 1, (150, 200), (1, 2), ((S, None, 100, 130),)),
    Scenario("qwen2-7b-rag-ft", H100_8, 16, (480, 720), (2, 6), ((F, "nccl_timeout", 60, 120), (S, None, 180, 240)), 2),
    Scenario("conformer-ctc", H100_8, 8, (840, 1200), (1, 5), ((F, "nan_loss", 180, 360),)),
    Scenario("bert-base-ner", A10, 1, (1440, 2100), (0.2, 1), ((F, "module_not_found", 1, 3),)),
)  # fmt: skip


def rng_for(seed: int | str, *labels: object) -> random.Random:
    """A generator for one purpose: string seeds hash with SHA-512, stable across processes."""
    return random.Random(":".join(map(str, (seed, *labels))))


def build_plan(seed: int, now: datetime, runs: int = 2000) -> DemoPlan:
    """The whole demo: `runs` runs over the `DAYS` before `now`, newest first.

    1. Scenario runs near `now` (queued, running, just failed, retried) come first.
    2. The rest get submission times over 90 days, denser on weekdays and US working hours.
    3. A few runs spread over the range are pinned to a shape or region, so even a small seed
       shows every accelerator type and region.
    """
    rng = rng_for(seed, "plan")
    plans: list[RunPlan] = []
    used_ids: set[str] = set()
    scenarios = SCENARIOS[: min(len(SCENARIOS), runs)]
    for scenario in scenarios:
        submitted = now - timedelta(minutes=rng.uniform(*scenario.ago_min))
        plans.append(_plan_run(rng, now, submitted, used_ids, scenario=scenario))
    times = sorted((_submission_time(rng, now) for _ in range(runs - len(scenarios))), reverse=True)
    targets = [(shape, None) for shape in AcceleratorType.values] + [(None, region) for region in Region.values]
    pins = {len(times) * (2 * i + 1) // (2 * len(targets)): target for i, target in enumerate(targets)}
    for i, submitted in enumerate(times):
        shape, region = pins.get(i, (None, None))
        plans.append(_plan_run(rng, now, submitted, used_ids, shape=shape, region=region))
    plans.sort(key=lambda p: p.submitted_at, reverse=True)
    return DemoPlan(seed=seed, now=now, runs=plans)


def _submission_time(rng: random.Random, now: datetime) -> datetime:
    """A time in the last 90 days: weekdays and 13-01 UTC (US working hours) are busier."""
    for _ in range(50):
        ago = rng.uniform(0, DAYS * 86400)
        ts = now - timedelta(seconds=ago)
        weight = (1.0 if ts.weekday() < 5 else 0.3) * (1.0 if ts.hour >= 13 or ts.hour < 1 else 0.35)
        weight *= 0.6 + 0.4 * (1 - ago / (DAYS * 86400))  # the teams grew over the quarter
        if rng.random() < weight:
            return ts
    return ts


def _pick(rng: random.Random, weighted: Mapping[K, float] | Iterable[tuple[K, float]]) -> K:
    items = list(weighted.items()) if isinstance(weighted, Mapping) else list(weighted)
    return rng.choices([k for k, _ in items], weights=[w for _, w in items])[0]


def _plan_run(
    rng: random.Random,
    now: datetime,
    submitted: datetime,
    used_ids: set[str],
    *,
    scenario: Scenario | None = None,
    shape: str | None = None,
    region: str | None = None,
) -> RunPlan:
    """One run: pinned by a scenario, a shape or a region where given, drawn from `rng` otherwise."""
    # 1. Who and what.
    if scenario:
        exp = EXPERIMENT_BY_SLUG[scenario.slug]
    elif shape:
        exp = rng.choice([e for e in EXPERIMENTS if shape in dict(e.shapes)])
    elif region and any(t.home_region == region for t in TEAMS):
        exp = rng.choice([e for e in EXPERIMENTS if _team(e.team).home_region == region])
    else:
        team_name = _pick(rng, {t.name: t.weight for t in TEAMS})
        exp = rng.choice([e for e in EXPERIMENTS if e.team == team_name])
    team = _team(exp.team)
    username = rng.choice(team.members[:1] * 2 + team.members)  # the first member runs the most
    shape = scenario.shape if scenario else shape or _pick(rng, exp.shapes)
    source = RunSource.SERVERLESS if scenario or region else _pick(rng, {"serverless": 85, "classic": 12, "local": 3})
    num, per_node, instance = _compute(rng, shape, source)
    if scenario:
        num = scenario.num
    run_region = region or team.home_region
    if source == RunSource.SERVERLESS and not region and rng.random() < 0.08:
        run_region = _pick(rng, {r: (1 if r in ("sa-east-1", "ca-central-1") else 3) for r in Region.values
                                 if r != team.home_region})  # fmt: skip
    if source == RunSource.LOCAL:
        shape, num, per_node, run_region = "", 1, 1, ""
    # 2. How it went: the attempts as (end status, failure, seconds), then cut at `now`. The
    # training's length (and its curve) is a function of the run's id (`run_curve`).
    run_id = _external_id(rng, source, used_ids, exp, _planned_range(scenario))
    planned = planned_seconds(run_id, exp)
    max_retries = scenario.max_retries if scenario else int(_pick(rng, {0: 45, 1: 25, 2: 20, 3: 10}))
    if scenario:
        specs = [(status, kind, rng.uniform(lo, hi) * 60) for status, kind, lo, hi in scenario.attempts]
        if specs[-1][0] == S:
            specs[-1] = (S, None, planned)
        timeout = next((t for t in NICE_TIMEOUTS if t * 60 >= planned * 1.3), None)
    else:
        specs, timeout = _attempt_specs(rng, planned, max_retries, num // max(per_node, 1) > 1 or num >= 8)
    queue = rng.uniform(*scenario.queue_min) * 60 if scenario else rng.uniform(5, 240 if num < 8 else 1500)
    curve = run_curve(run_id, exp, shape, num)
    attempts = _timeline(rng, now, submitted + timedelta(seconds=queue), specs, run_region, num, per_node)
    last = attempts[-1]
    _messages(rng, attempts, team, username, timeout, curve, per_node)
    parameters = dict(exp.params)
    parameters["lr"] = float(f"{float(parameters['lr']) * rng.choice([0.5, 1, 1, 1, 2]):.3g}")
    parameters["seed"] = rng.choice([0, 42, 1234, 3407])
    exp_name = (
        f"/Workspace/Shared/{team.name}/{exp.slug}" if exp.shared else f"/Workspace/Users/{email(username)}/{exp.slug}"
    )
    run = RunPlan(
        external_id=run_id, source=source, team=team.name, username=username, experiment=exp,
        experiment_name=exp_name, mlflow_run_id=last.mlflow_run_id, accelerator_type=shape,
        instance_type=instance, num_accelerators=num, gpus_per_node=per_node, region=run_region,
        home_region=team.home_region if source != RunSource.LOCAL else "", status=last.status,
        state_message=last.state_message, submitted_at=submitted, started_at=attempts[0].started_at,
        ended_at=last.ended_at, timeout_minutes=timeout, max_retries=max_retries,
        usage_policy_name=team.usage_policy, parameters=parameters, workload_yaml="", curve=curve,
        attempts=attempts, egress=[],
    )  # fmt: skip
    if source == RunSource.SERVERLESS:
        run.workload_yaml = workload_yaml(rng, run)
    if run.is_cross_region and run.started_at:
        run.egress = _egress(rng, run)
    return run


def _team(name: str) -> Team:
    return next(t for t in TEAMS if t.name == name)


def _compute(rng: random.Random, shape: str, source: str) -> tuple[int, int, str]:
    """(num_accelerators, gpus_per_node, instance_type) valid for the shape and source."""
    per_node = GPUS_PER_NODE[shape]
    if source == RunSource.CLASSIC:
        if shape == A10:
            per_node = int(_pick(rng, {1: 1, 4: 2}))
            return per_node, per_node, "g5.2xlarge" if per_node == 1 else "g5.12xlarge"
        instance = {H100: "p5.4xlarge", H100_8: "p5.48xlarge", B300_8: "p6-b300.48xlarge"}[shape]
        # Two nodes only of the 8-GPU shapes: the single-H100 shape is one GPU (VALID_COUNTS in the tests).
        return per_node * (int(_pick(rng, {1: 70, 2: 30})) if per_node > 1 else 1), per_node, instance
    if shape == A10:
        return int(_pick(rng, {1: 60, 2: 20, 3: 5, 4: 15})), 1, ""
    if shape == H100:
        return 1, 1, ""
    return int(_pick(rng, {8: 55, 16: 25, 32: 13, 64: 7})), per_node, ""


def _attempt_specs(
    rng: random.Random, planned: float, max_retries: int, distributed: bool
) -> tuple[list[tuple[str, str | None, float]], int | None]:
    """The attempts a finished run made, as (end status, failure kind, seconds), and its timeout."""
    outcome = _pick(rng, {S: 78, F: 12, C: 6, T: 4})
    timeout = None if rng.random() < 0.1 else next((t for t in NICE_TIMEOUTS if t * 60 >= planned * 1.3), None)
    kinds = {k: w for k, w in FAILURE_WEIGHTS.items() if distributed or k not in MULTI_NODE_ONLY}
    if outcome == T:
        timeout = max([t for t in NICE_TIMEOUTS if t * 60 < planned] or [30])
        return [(T, None, timeout * 60 + rng.uniform(2, 40))], timeout
    if outcome == C:
        return [(C, None, planned * rng.uniform(0.02, 0.7))], timeout
    if outcome == F:
        kind = _pick(rng, kinds)
        # A deterministic bug fails every retry the same way; a flaky node may fail differently.
        tries = [kind] + [kind if kind not in TRANSIENT else _pick(rng, kinds) for _ in range(max_retries)]
        return [(F, k, _failure_seconds(rng, k, planned)) for k in tries], timeout
    specs: list[tuple[str, str | None, float]] = []
    if max_retries and rng.random() < 0.3:
        for _ in range(rng.randint(1, min(2, max_retries))):
            kind = _pick(rng, {k: w for k, w in kinds.items() if k in TRANSIENT})
            specs.append((F, kind, _failure_seconds(rng, kind, planned)))
    return [*specs, (S, None, planned)], timeout


def _failure_seconds(rng: random.Random, kind: str | None, planned: float) -> float:
    """How long an attempt lasts before this failure: imports die at once, OOM early, results at the end."""
    if kind == "module_not_found":
        return rng.uniform(40, 150)
    if kind == "cuda_oom":
        return min(planned, rng.uniform(120, 1500)) if rng.random() < 0.7 else planned * rng.uniform(0.1, 0.9)
    if kind == "result_too_large":
        return planned * rng.uniform(0.97, 1.0)
    return max(90.0, planned * rng.uniform(0.05, 0.9))


def _planned_range(scenario: Scenario | None) -> tuple[float, float]:
    """The training lengths (s) a run may have: a scenario's run trains as long as its last attempt says."""
    if scenario is None:
        return 0.0, float("inf")
    status, _, low, high = scenario.attempts[-1]
    # A run that fails trains for longer than it lasts: its curve is cut, not finished.
    return (low * 60, high * 60) if status == S else (high * 60, float("inf"))


def _external_id(rng: random.Random, source: str, used: set[str], exp: Experiment, planned: tuple[float, float]) -> str:
    """A new run id of the source's shape whose training length (`planned_seconds`) lies in `planned`."""
    tries = 0
    while True:
        value = _new_id(rng, source)
        tries += 1
        # A scenario's range holds 10-40% of the draws; after 2,000 misses take the id as it is.
        if value not in used and (planned[0] <= planned_seconds(value, exp) <= planned[1] or tries > 2000):
            used.add(value)
            return value


def _new_id(rng: random.Random, source: str) -> str:
    if source == RunSource.SERVERLESS:
        return str(rng.randrange(10**14, 10**15))  # like a job run id: a 15-digit number
    if source == RunSource.CLASSIC:
        return f"{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}-{rng.randrange(10**6):06d}-{rng.getrandbits(32):08x}"
    return f"local-{rng.getrandbits(48):012x}"


def planned_seconds(external_id: str, exp: Experiment) -> float:
    """How long a full run of `exp` trains: drawn from the run's id alone (see `run_curve`)."""
    rng = random.Random(f"planned:{external_id}")
    return min(max(rng.lognormvariate(0, 0.7) * exp.hours * HOUR, 240.0), 52 * HOUR)


def run_curve(external_id: str, exp: Experiment, shape: str, num: int) -> TrainingCurve:
    """The training curve of a run, a function of what its row stores (id, experiment, shape, count).

    The seed draws a run's metrics and logs from it, and the live demo continues them from it:
    the same steps, loss, learning-rate schedule and throughput on both sides of the handover.
    """
    rng = random.Random(f"curve:{external_id}")
    return training_curve(rng, exp, shape, num, planned_seconds(external_id, exp))


def training_curve(rng: random.Random, exp: Experiment, shape: str, num: int, planned: float) -> TrainingCurve:
    """The curve of a run of `exp` on `num` GPUs of `shape` planned for `planned` s (`run_curve` draws one)."""
    tokens, samples = THROUGHPUT.get(shape, (900, 110))
    per_gpu = tokens if exp.family == "nlp" else samples
    step_seconds = round(rng.uniform(0.4, 2.5), 3)
    return TrainingCurve(
        total_steps=max(100, int(planned / step_seconds)),
        step_seconds=step_seconds,
        loss_start=exp.loss[0] * rng.uniform(0.95, 1.05),
        loss_end=exp.loss[1] * rng.uniform(0.9, 1.15),
        peak_lr=float(dict(exp.params)["lr"]),
        warmup_steps=max(10, int(planned / step_seconds * rng.uniform(0.01, 0.05))),
        throughput_key="tokens_per_second" if exp.family == "nlp" else "samples_per_second",
        throughput=per_gpu * num * rng.uniform(0.75, 1.05),
    )


def _timeline(
    rng: random.Random,
    now: datetime,
    first_start: datetime,
    specs: list[tuple[str, str | None, float]],
    region: str,
    num: int,
    per_node: int,
) -> list[AttemptPlan]:
    """Lay the attempts end to end from `first_start`, cutting at `now` (running or queued)."""
    attempts: list[AttemptPlan] = []
    ts = first_start
    for number, (status, kind, seconds) in enumerate(specs, start=1):
        attempt = AttemptPlan(
            number, status, ts, ts + timedelta(seconds=seconds), None, "", f"{rng.getrandbits(128):032x}"
        )
        attempts.append(attempt)
        if ts > now:
            attempt.status, attempt.started_at, attempt.ended_at = RunStatus.QUEUED, None, None
            break
        nodes = max(1, num // per_node)
        if attempt.ended_at and attempt.ended_at > now:
            attempt.status, attempt.ended_at = RunStatus.RUNNING, None
        elif kind:
            attempt.failure = kind
            attempt.failed_node = rng.randrange(nodes)
            attempt.failed_local_rank = rng.randrange(per_node)
            attempt.oom_alloc_gib = rng.choice(OOM_ALLOCATIONS)
            attempt.exit_code = FAILURES[kind].exit_code
        else:
            exit_codes: dict[str, int] = {S: 0, C: 143, T: 143}
            attempt.exit_code = exit_codes[status]
        for index in range(nodes):
            failed_here = attempt.failure is not None and index == attempt.failed_node
            code = attempt.exit_code if failed_here or attempt.failure is None else 143  # the others get SIGTERM
            attempt.nodes.append(NodePlan(index, _host(rng, region), attempt.status, code))
        if attempt.status == RunStatus.RUNNING:
            break
        assert attempt.ended_at is not None  # every attempt but a running one has ended
        ts = attempt.ended_at + timedelta(seconds=rng.uniform(40, 180))
    return attempts


def _host(rng: random.Random, region: str) -> str:
    if not region:
        return f"192.168.1.{rng.randint(10, 250)}"
    return f"10.{SUBNETS[region]}.{rng.randint(0, 63)}.{rng.randint(2, 254)}"


def _messages(
    rng: random.Random,
    attempts: list[AttemptPlan],
    team: Team,
    username: str,
    timeout: int | None,
    curve: TrainingCurve,
    per_node: int,
) -> None:
    """The state message each finished attempt carries, as the source would report it."""
    for attempt in attempts:
        if attempt.failure and attempt.started_at and attempt.ended_at:
            attempt.state_message = FAILURES[attempt.failure].message.format(
                alloc=attempt.oom_alloc_gib,
                rank=attempt.failed_node * per_node + attempt.failed_local_rank,
                host=attempt.nodes[attempt.failed_node].host,
                step=curve.step_at((attempt.ended_at - attempt.started_at).total_seconds()),
            )
        elif attempt.status == RunStatus.TIMED_OUT:
            attempt.state_message = f"Run timed out after {timeout} minutes (timeout_minutes) and was terminated"
        elif attempt.status == RunStatus.CANCELLED:
            who = rng.choice([username, *team.members])
            attempt.state_message = f"Run cancelled by {email(who)}"
    last = attempts[-1]
    if last.status == S and len(attempts) > 1:
        last.state_message = f"Succeeded on attempt {last.number} after {last.number - 1} failed attempt(s)"


def workload_yaml(rng: random.Random, run: RunPlan) -> str:
    """The `databricks air run` file this run was submitted with: secrets only as scope/key refs."""
    exp = run.experiment
    script = f"$CODE_SOURCE_PATH/train.py --config configs/{exp.slug}.yaml"
    command = f"torchrun --nproc_per_node={run.gpus_per_node} {script}" if run.gpus_per_node > 1 else f"python {script}"
    doc: dict[str, object] = {
        # The CLI's experiment_name is the Jobs task key (no slashes); the folder goes apart.
        "experiment_name": exp.slug,
        "mlflow_experiment_directory": run.experiment_name.rsplit("/", 1)[0],
        "compute": {"accelerator_type": run.accelerator_type, "num_accelerators": run.num_accelerators},
    }
    if rng.random() < 0.1:
        image = f"123456789012.dkr.ecr.us-west-2.amazonaws.com/{run.team}/trainer:2025.{rng.randint(1, 12):02d}"
        doc["environment"] = {"docker_image": {"url": image}}
    else:
        deps = ["torch==2.5.1", "mlflow>=2.19"]
        deps += {"nlp": ["transformers==4.46.3", "peft==0.13.2", "flash-attn==2.7.0.post2"],
                 "vision": ["timm==1.0.11", "torchvision==0.20.1"],
                 "speech": ["torchaudio==2.5.1", "transformers==4.46.3"]}[exp.family]  # fmt: skip
        doc["environment"] = {"version": rng.choice([4, 5]), "dependencies": deps}
    # The CLI's only code source: a snapshot of a local checkout, pinned to a branch or commit.
    snapshot: dict[str, object] = {"root_path": f"./{exp.repo}"}
    if rng.random() < 0.6:
        snapshot["git"] = {"branch": "main"} if rng.random() < 0.7 else {"commit": f"{rng.getrandbits(160):040x}"}
    doc["code_source"] = {"type": "snapshot", "snapshot": snapshot}
    doc["command"] = command
    doc["parameters"] = run.parameters
    doc["env_variables"] = {"NCCL_DEBUG": "INFO", "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "/local_disk0/hf"}
    doc["secrets"] = {name: f"{run.team}-secrets/{name.lower().replace('_', '-')}" for name in SECRETS[exp.family]}
    doc["max_retries"] = run.max_retries
    if run.timeout_minutes:
        doc["timeout_minutes"] = run.timeout_minutes
    doc["usage_policy_name"] = run.usage_policy_name
    if rng.random() < 0.3:
        doc["mlflow_run_name"] = f"{exp.slug}-{rng.choice(['baseline', 'lr-sweep', 'ablation', 'bigger-batch', 'v2'])}"
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _egress(rng: random.Random, run: RunPlan) -> list[tuple[str, str, int, datetime]]:
    """Cross-region data: the dataset pulled at the start, checkpoints written home at the end."""
    gib = 1024**3
    size = rng.uniform(20, 900) if run.num_accelerators >= 8 else rng.uniform(1, 120)
    assert run.started_at is not None  # _plan_run asks only for a started run's
    records = [(run.home_region, run.region, int(size * gib), run.started_at + timedelta(minutes=2))]
    if run.ended_at:
        records.append((run.region, run.home_region, int(rng.uniform(0.5, 60) * gib), run.ended_at))
    return records
