"""Numbers for the demo seed: GPU telemetry (1 Hz and per-minute) and MLflow metric curves.

Pure functions of a `random.Random` and a plan; nothing here touches the database. The shapes
follow what NVML and MLflow show for real training: utilization in the 90s with dips at eval
and checkpoint, memory that ramps up while the model loads and then stays flat, power near its
limit under load, a loss that falls fast then slowly, a learning rate with warmup and cosine
decay. Failures leave their signature: memory climbing to the total before a CUDA OOM, GPUs
pinned at 100% while drawing little power during an NCCL hang, a loss that explodes to NaN.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from runs.choices import AcceleratorType

MIB = 1024**2

# Failure kinds whose telemetry looks different in the minutes before the end.
OOM = "cuda_oom"
NCCL_TIMEOUT = "nccl_timeout"
NAN_LOSS = "nan_loss"
# How long a failure's signature lasts: the NCCL watchdog's default timeout is 10 minutes.
SIGNATURE_SECONDS = 600


@dataclass(frozen=True)
class GpuProfile:
    """What one GPU of a shape reports: memory, power limit, clocks, and torch's capacity."""

    memory_total_bytes: int
    power_limit_watts: float
    idle_watts: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float
    torch_capacity_gib: float
    mem_clock_mhz: float
    has_gpm: bool  # Hopper and newer report SM and tensor activity (NVML GPM)
    # NVLink bandwidth each way, GB/s (H100 SXM: NVLink 4, 900 GB/s total; B300: NVLink 5,
    # 1.8 TB/s); 0 where the shape has none. Drawn only on multi-GPU nodes, where GPUs talk.
    nvlink_gb_s: float = 0.0


_H100 = GpuProfile(81_559 * MIB, 700.0, 72.0, 1980.0, 345.0, 79.11, 2619.0, True, 450.0)
PROFILES: dict[str, GpuProfile] = {
    AcceleratorType.A10_1: GpuProfile(23_028 * MIB, 150.0, 16.0, 1695.0, 210.0, 22.19, 6251.0, False),
    AcceleratorType.H100_1: _H100,
    AcceleratorType.H100_8: _H100,
    AcceleratorType.B300_8: GpuProfile(275_040 * MIB, 1100.0, 150.0, 2032.0, 390.0, 268.41, 3996.0, True, 900.0),
}
# NVML clocks-event reasons (nvmlClocksEventReasons): idle, and the software power cap.
THROTTLE_IDLE = 0x1
THROTTLE_SW_POWER_CAP = 0x4
# Share of the NVLink bandwidth a data-parallel step keeps busy at full load (gradient
# all-reduce between the compute bursts), each way; RX a little under TX.
NVLINK_SHARE = 0.3
NVLINK_RX_OF_TX = 0.97
KB_PER_GB = 1e9 / 1024  # GpuSample stores KB/s (1024 bytes), as NVML's PCIe counter does


def nvlink_kbps(profile: GpuProfile, util: float, power_factor: float, gpus: int) -> tuple[float, float] | None:
    """(TX, RX) NVLink KB/s at this load, or None on a single GPU or a shape without NVLink.

    No random draws: the seeded demo stays the same run for run. A hung collective (power
    factor low) moves almost nothing; eval (forward only) moves little.
    """
    if gpus < 2 or not profile.nvlink_gb_s:
        return None
    tx = profile.nvlink_gb_s * NVLINK_SHARE * (util / 100.0) * max(power_factor - 0.3, 0.0) / 0.7 * KB_PER_GB
    return round(tx, 1), round(tx * NVLINK_RX_OF_TX, 1)


@dataclass(frozen=True)
class Activity:
    """What a node's GPUs did during one attempt; every series is a function of this."""

    start: datetime
    end: datetime  # the attempt's end, or now while it runs
    failure: str | None
    memory_fraction: float  # steady-state share of GPU memory in use
    eval_every_s: int
    checkpoint_every_s: int
    warmup_s: int

    @classmethod
    def for_attempt(
        cls, external_id: str, attempt: int, start: datetime, end: datetime, failure: str | None
    ) -> Activity:
        """The attempt's own activity, drawn from the run's id and the attempt's number alone.

        The seed and the live demo both call this, so the live demo continues a seeded run with
        its memory footprint and its eval and checkpoint phases, not with another run's.
        """
        return cls.make(random.Random(f"activity:{external_id}:{attempt}"), start, end, failure)

    @classmethod
    def make(cls, rng: random.Random, start: datetime, end: datetime, failure: str | None) -> Activity:
        return cls(
            start=start,
            end=end,
            failure=failure,
            memory_fraction=rng.uniform(0.78, 0.93),
            eval_every_s=rng.choice([900, 1200, 1800, 3600]),
            checkpoint_every_s=rng.choice([1800, 3600, 7200]),
            warmup_s=rng.randint(60, 200),
        )

    def level(self, elapsed: float) -> tuple[float, float, float]:
        """(utilization %, memory fraction, power factor) the workload asks for at `elapsed`.

        Power factor scales the power a given utilization draws: ~1 for dense math, low for
        kernels that spin (a hung NCCL collective shows 100% utilization at a quarter power).
        """
        remaining = (self.end - self.start).total_seconds() - elapsed
        if elapsed < self.warmup_s:
            share = elapsed / self.warmup_s
            # Loading weights and compiling: memory arrives in steps, the SMs mostly wait.
            return 8.0 + 30.0 * share * share, self.memory_fraction * min(1.0, 0.05 + share), 1.0
        if self.failure == NCCL_TIMEOUT and remaining < SIGNATURE_SECONDS:
            return 100.0, self.memory_fraction, 0.22
        memory = self.memory_fraction
        if self.failure == OOM and remaining < SIGNATURE_SECONDS:
            # Fragmentation or a longer batch: usage creeps up to the whole card, then OOM.
            creep = 1.0 - remaining / SIGNATURE_SECONDS
            memory = self.memory_fraction + (0.995 - self.memory_fraction) * creep**1.5
        since_ckpt = elapsed % self.checkpoint_every_s
        if elapsed > self.checkpoint_every_s and since_ckpt < 45:
            return 4.0, memory, 1.0  # torch.save: the GPUs idle while the host writes
        if elapsed > self.eval_every_s and elapsed % self.eval_every_s < 120:
            return 62.0, memory, 0.8  # eval: forward passes only, smaller batches
        return 95.0, memory, 1.0


def node_skew(external_id: str, node_index: int) -> float:
    """Percentage points a node's busy utilization sits off node 0's: a worse host, a straggling rank.

    One draw per (run, node), no other input: the seed and the live demo give a node the same
    character, so the node-skew table reads the same before and after the handover.
    """
    if node_index == 0:
        return 0.0
    return random.Random(f"skew:{external_id}:{node_index}").uniform(-6.0, 1.0)


def steady_temperature(profile: GpuProfile, util: float, power_factor: float) -> float:
    """The temperature a GPU settles at under a load: where `_gpu_fields` moves it to, noise aside."""
    load = (max(0.0, min(100.0, util)) / 100.0) ** 1.25 * power_factor * 0.975  # 0.975: the mean power draw
    power = min(profile.idle_watts + (profile.power_limit_watts - profile.idle_watts) * load, profile.power_limit_watts)
    return 33.0 + 47.0 * power / profile.power_limit_watts


def _gpu_fields(
    rng: random.Random,
    profile: GpuProfile,
    util: float,
    memory: float,
    power_factor: float,
    temp: float,
    gpus: int = 1,
) -> tuple[dict[str, float | int | None], float]:
    """One GPU's sample fields for a requested level; returns them and the new temperature."""
    util = max(0.0, min(100.0, util))
    load = (util / 100.0) ** 1.25 * power_factor
    power = profile.idle_watts + (profile.power_limit_watts - profile.idle_watts) * load * rng.uniform(0.93, 1.02)
    power = min(power, profile.power_limit_watts)
    # Temperature lags power: move a tenth of the way to the steady temperature each second.
    target = 33.0 + 47.0 * power / profile.power_limit_watts
    temp += (target - temp) * 0.1 + rng.uniform(-0.3, 0.3)
    throttle = 0
    if util < 10:
        clock, throttle = profile.idle_sm_clock_mhz, THROTTLE_IDLE
    elif power > 0.97 * profile.power_limit_watts and rng.random() < 0.3:
        clock = profile.max_sm_clock_mhz - rng.choice([105.0, 150.0, 225.0])
        throttle = THROTTLE_SW_POWER_CAP
    else:
        clock = profile.max_sm_clock_mhz
    used = int(profile.memory_total_bytes * min(memory, 0.999))
    # SM and tensor activity tell real work from a spinning kernel: a hung collective keeps
    # "utilization" at 100% with the SMs nearly idle and the tensor cores off.
    sm_active = tensor_active = None
    if profile.has_gpm:
        sm_active = round(max(0.0, util * 0.82 * power_factor**2 + rng.uniform(-3, 3)), 1)
        tensor_active = round(max(0.0, util * 0.48 * (power_factor - 0.3) / 0.7 + rng.uniform(-2, 2)), 1)
    fields = {
        "utilization_gpu": round(util, 1),
        "utilization_memory": round(max(0.0, min(100.0, util * 0.42 + rng.uniform(-4, 4))), 1),
        "memory_used_bytes": used,
        "memory_total_bytes": profile.memory_total_bytes,
        "power_watts": round(power, 1),
        "power_limit_watts": profile.power_limit_watts,
        "temperature_c": round(temp, 1),
        "sm_clock_mhz": clock,
        "mem_clock_mhz": profile.mem_clock_mhz if util >= 10 else 405.0,
        "sm_active": sm_active,
        "tensor_active": tensor_active,
        "throttle_reasons": throttle,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
    }
    nvlink = nvlink_kbps(profile, util, power_factor, gpus)
    if nvlink is not None:
        fields["nvlink_tx_kbps"], fields["nvlink_rx_kbps"] = nvlink
    return fields, temp


def raw_samples(
    rng: random.Random,
    profile: GpuProfile,
    activity: Activity,
    window_start: datetime,
    gpus: int,
    skew: float = 0.0,
) -> Iterator[tuple[int, datetime, dict[str, float | int | None]]]:
    """1 Hz samples (gpu_index, ts, fields) for every GPU from window_start to the activity's end.

    The GPUs start warm, at the temperature the workload holds them at when the window opens:
    a window that continues an earlier one (the live demo's next minute, the raw window after
    the seed's rollups) carries on from where that one left off instead of starting cold.
    `skew` shifts the node's busy utilization (`node_skew`).
    """
    ts = window_start.replace(microsecond=0)
    util0, _, power_factor0 = activity.level(max((ts - activity.start).total_seconds(), 0.0))
    warm = steady_temperature(profile, util0 + skew if util0 > 50 else util0, power_factor0)
    temps = [warm + rng.uniform(-1.5, 1.5) for _ in range(gpus)]
    offsets = [rng.uniform(-1.5, 1.0) + skew for _ in range(gpus)]
    while ts < activity.end:
        elapsed = (ts - activity.start).total_seconds()
        util, memory, power_factor = activity.level(elapsed)
        for gpu in range(gpus):
            level = util + offsets[gpu] + rng.uniform(-2.5, 2.5) if util > 50 else util + rng.uniform(-3, 3)
            roll = rng.random()
            if roll < 0.002:
                level = rng.uniform(0, 15)  # a one-second stall: dataloader, GC, a slow rank
            elif roll < 0.003:
                level = 100.0
            fields, temps[gpu] = _gpu_fields(rng, profile, level, memory, power_factor, temps[gpu], gpus)
            yield gpu, ts, fields
        ts += timedelta(seconds=1)


def minute_rollups(
    rng: random.Random,
    profile: GpuProfile,
    activity: Activity,
    first_minute: datetime,
    stop: datetime,
    gpus: int,
    skew: float = 0.0,
) -> Iterator[tuple[int, datetime, dict[str, float | int]]]:
    """Per-minute rollups (gpu_index, minute, fields) shaped like GpuMinute, first_minute to stop.

    `skew` shifts the node's busy utilization, as in `raw_samples`.

    Each minute looks at the workload four times (every 15 s), so eval and checkpoint dips
    show up in the minimum and the average as they would after folding 60 real samples. Built
    with a few draws per GPU-minute rather than 60 simulated samples: this writes ~300k rows.
    """
    span = profile.power_limit_watts - profile.idle_watts
    offsets = [(rng.uniform(-1.5, 1.0) + skew, rng.uniform(-3.0, 4.0)) for _ in range(gpus)]
    minute = first_minute.replace(second=0, microsecond=0)
    while minute < stop:
        covered = min(minute + timedelta(minutes=1), activity.end) - max(minute, activity.start)
        base = (minute - activity.start).total_seconds()
        probes = [activity.level(max(base + offset, 0.0)) for offset in (0, 15, 30, 45)]
        memory = max(p[1] for p in probes)
        for gpu, (util_offset, temp_offset) in enumerate(offsets):
            jitter = util_offset + rng.uniform(-2.0, 2.0)
            utils = [max(0.0, min(100.0, u + jitter if u > 50 else u)) for u, _, _ in probes]
            draw = rng.uniform(0.93, 1.0)
            powers = [
                profile.idle_watts + span * (u / 100) ** 1.25 * pf * draw
                for u, (_, _, pf) in zip(utils, probes, strict=True)
            ]
            avg_power = sum(powers) / 4
            temp = 33.0 + 47.0 * avg_power / profile.power_limit_watts + temp_offset
            busy = [u for u in utils if u >= 10]
            clock_min = (
                profile.idle_sm_clock_mhz
                if len(busy) < 4
                else profile.max_sm_clock_mhz
                - (rng.choice((0.0, 0.0, 105.0, 150.0)) if avg_power > 0.95 * profile.power_limit_watts else 0.0)
            )
            clock_max = profile.max_sm_clock_mhz if busy else profile.idle_sm_clock_mhz
            util_min = min(utils) if rng.random() > 0.05 or min(utils) < 50 else rng.uniform(0, 20)  # a stall
            used = profile.memory_total_bytes * min(memory, 0.999)
            # SM and tensor activity on GPM GPUs, by `_gpu_fields`' rule without its noise (no
            # extra draws: the seeded demo stays the same run for run).
            gpm: dict[str, float] = {}
            if profile.has_gpm:
                sm = [u * 0.82 * pf**2 for u, (_, _, pf) in zip(utils, probes, strict=True)]
                tensor = [max(0.0, u * 0.48 * (pf - 0.3) / 0.7) for u, (_, _, pf) in zip(utils, probes, strict=True)]
                for name, values in (("sm_active", sm), ("tensor_active", tensor)):
                    gpm |= {f"{name}_min": round(min(values), 2), f"{name}_avg": round(sum(values) / 4, 2),
                            f"{name}_max": round(max(values), 2)}  # fmt: skip
            links = [nvlink_kbps(profile, u, pf, gpus) for u, (_, _, pf) in zip(utils, probes, strict=True)]
            if all(link is not None for link in links):
                for i, name in enumerate(("nvlink_tx_kbps", "nvlink_rx_kbps")):
                    values = [link[i] for link in links if link is not None]  # all are
                    gpm |= {f"{name}_min": min(values), f"{name}_avg": round(sum(values) / 4, 1),
                            f"{name}_max": max(values)}  # fmt: skip
            yield (
                gpu,
                minute,
                {
                    **gpm,
                    "samples": max(1, min(60, int(covered.total_seconds()))),
                    "memory_total_bytes": profile.memory_total_bytes,
                    "power_limit_watts": profile.power_limit_watts,
                    "utilization_gpu_min": round(util_min, 2),
                    "utilization_gpu_avg": round(sum(utils) / 4, 2),
                    "utilization_gpu_max": round(max(utils), 2),
                    "utilization_memory_min": round(min(utils) * 0.38, 2),
                    "utilization_memory_avg": round(sum(utils) / 4 * 0.42, 2),
                    "utilization_memory_max": round(max(utils) * 0.46, 2),
                    "memory_used_bytes_min": float(int(used * 0.995)),
                    "memory_used_bytes_avg": float(int(used * 0.998)),
                    "memory_used_bytes_max": float(int(used)),
                    "power_watts_min": round(min(powers) * 0.97, 2),
                    "power_watts_avg": round(avg_power, 2),
                    "power_watts_max": round(min(max(powers) * 1.02, profile.power_limit_watts), 2),
                    "temperature_c_min": round(temp - 1.5, 2),
                    "temperature_c_avg": round(temp, 2),
                    "temperature_c_max": round(temp + 1.5, 2),
                    "sm_clock_mhz_min": clock_min,
                    "sm_clock_mhz_avg": (clock_min + clock_max) / 2 if clock_min != clock_max else clock_max,
                    "sm_clock_mhz_max": clock_max,
                },
            )
        minute += timedelta(minutes=1)


@dataclass(frozen=True)
class TrainingCurve:
    """The loss and learning-rate schedule of one training job, shared by metrics and logs."""

    total_steps: int
    step_seconds: float
    loss_start: float
    loss_end: float
    peak_lr: float
    warmup_steps: int
    throughput_key: str  # tokens_per_second or samples_per_second
    throughput: float

    def step_at(self, elapsed_s: float) -> int:
        return max(0, min(self.total_steps, int(elapsed_s / self.step_seconds)))

    def lr(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return self.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))

    def loss(self, rng: random.Random, step: int) -> float:
        progress = step / self.total_steps
        mean = self.loss_end + (self.loss_start - self.loss_end) * math.exp(-6.0 * progress)
        return max(0.01, mean * (1 + rng.gauss(0, 0.025)))

    def log_every(self) -> int:
        """Steps between logged points: about 120 points over the whole job, a round number."""
        raw = max(1, self.total_steps // 120)
        magnitude = 10 ** int(math.log10(raw))
        return max(10, int(math.ceil(raw / magnitude) * magnitude))


@dataclass(frozen=True)
class MetricValue:
    key: str
    step: int
    ts: datetime
    value: float | None  # None: MLflow logged NaN


def metric_points(
    rng: random.Random, curve: TrainingCurve, start: datetime, end: datetime, failure: str | None
) -> list[MetricValue]:
    """The MLflow metrics one attempt logged between start and end (its end, or now)."""
    last_step = curve.step_at((end - start).total_seconds())
    every = curve.log_every()
    steps = list(range(every, last_step + 1, every))
    eval_every = every * 10
    points: list[MetricValue] = []
    diverge_from = len(steps) - 4 if failure == NAN_LOSS else None
    for i, step in enumerate(steps):
        ts = start + timedelta(seconds=step * curve.step_seconds)
        loss: float | None = curve.loss(rng, step)
        grad_norm: float | None = rng.lognormvariate(0, 0.25) / (1 + 2 * step / curve.total_steps)
        if rng.random() < 0.02:
            grad_norm = (grad_norm or 1.0) * rng.uniform(5, 20)  # a spike the clipping absorbs
        if diverge_from is not None and i >= diverge_from:
            # Divergence: the loss climbs for a few logs, then NaN, then the script stops.
            blowup = i - diverge_from
            loss = None if blowup >= 2 else (loss or 1.0) * (3.0 + 25.0 * blowup)
            grad_norm = None if blowup >= 2 else rng.uniform(50, 5000)
        throughput = curve.throughput * rng.uniform(0.95, 1.03)
        points += [
            MetricValue("loss", step, ts, None if loss is None else round(loss, 5)),
            MetricValue("learning_rate", step, ts, curve.lr(step)),
            MetricValue("grad_norm", step, ts, None if grad_norm is None else round(grad_norm, 4)),
            MetricValue(curve.throughput_key, step, ts, round(throughput, 1)),
        ]
        if step % eval_every == 0 and loss is not None:
            eval_loss = loss * rng.uniform(1.02, 1.08)
            points.append(MetricValue("eval_loss", step, ts + timedelta(seconds=30), round(eval_loss, 5)))
    return points
