"""The small, batch-first adapter over pynvml (nvidia-ml-py): one `sample_all(now)` per tick.

Units leave this module as GpuSample stores them: percent, bytes, watts, Celsius, MHz, KB/s.
NVML answers power in milliwatts; everything else is already in those units.

A field the GPU does not report (NVMLError_NotSupported, or a function the driver lacks) is
None, never 0: a consumer card without ECC has *unknown* ECC errors, not zero, and a chart
must show a gap rather than a fake flat line. A GPU that falls off the bus
(NVMLError_GpuIsLost) yields one `gpu_lost` event and is dropped from every later tick, since
each further call on it only fails again (and can take seconds to do so).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

MILLIWATTS_PER_WATT = 1000.0
KIB_PER_MIB = 1024.0
# GPM metrics read each tick, in this order: SM and tensor activity (percent), NVLink TX and RX
# over all links (MiB/s; NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC is 61, _RX_PER_SEC 60).
GPM_METRICS = (
    "NVML_GPM_METRIC_SM_UTIL",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
    "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
)
# Xid events read per tick at most: a storm of them must not stall sampling.
MAX_EVENTS_PER_TICK = 64


def load_pynvml() -> ModuleType:
    """The one place the agent imports pynvml; tests replace it with tests/fake_pynvml.py."""
    return importlib.import_module("pynvml")


class NvmlUnavailable(Exception):
    """No usable NVML here (no library, no driver, no GPU); str() is the one line to print."""


@dataclass
class Gpu:
    """One GPU the sampler still reads."""

    index: int
    uuid: str
    name: str
    handle: Any
    # Two GPM sample buffers [previous, current] on GPUs where GPM is supported (Hopper+).
    gpm_samples: list[Any] | None = None
    gpm_primed: bool = False


def _text(value: Any) -> str:
    # nvidia-ml-py decodes to str in Python 3; older releases returned bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def describe_init_error(nv: ModuleType, exc: Exception) -> str:
    """A one-line reason NVML could not start, naming the NVML error class."""
    name = type(exc).__name__
    if isinstance(exc, nv.NVMLError_LibraryNotFound):
        return f"no NVIDIA driver found ({name})"
    if isinstance(exc, nv.NVMLError_DriverNotLoaded):
        return f"the NVIDIA driver is not loaded ({name})"
    if isinstance(exc, nv.NVMLError_NoPermission):
        return f"no permission to use NVML ({name})"
    return f"NVML could not start ({name}: {exc})"


class NvmlSampler:
    """Reads every GPU of this node once per tick; use as a context manager or open()/close()."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nv = nvml if nvml is not None else load_pynvml()
        self._gpus: list[Gpu] = []
        self._events: list[dict[str, Any]] = []
        self._event_set: Any = None
        self._warned: set[tuple[int, str]] = set()
        self._open = False

    # --- lifecycle -------------------------------------------------------------------------

    def open(self) -> NvmlSampler:
        """Initialise NVML and list the GPUs; raises NvmlUnavailable with a one-line reason."""
        nv = self._nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlUnavailable(describe_init_error(nv, exc)) from None
        self._open = True
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(f"NVML could not count GPUs ({type(exc).__name__}: {exc})") from None
        if count == 0:
            self.close()
            raise NvmlUnavailable("no NVIDIA GPU found (nvmlDeviceGetCount() is 0)")
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                gpu = Gpu(index, _text(nv.nvmlDeviceGetUUID(handle)), _text(nv.nvmlDeviceGetName(handle)), handle)
            except nv.NVMLError as exc:
                logger.warning("GPU %d cannot be opened (%s); it is not sampled", index, type(exc).__name__)
                if isinstance(exc, nv.NVMLError_GpuIsLost):
                    self._events.append(_gpu_lost_event(index, "", datetime.now(UTC), exc))
                continue
            self._setup_gpm(gpu)
            self._gpus.append(gpu)
        self._setup_events()
        return self

    def close(self) -> None:
        """Free GPM buffers and the event set, then shut NVML down; errors here are ignored."""
        if not self._open:
            return
        nv = self._nv
        for gpu in self._gpus:
            self._free_gpm(gpu)
        if self._event_set is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
        self._open = False

    def __enter__(self) -> NvmlSampler:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def gpus(self) -> list[Gpu]:
        return list(self._gpus)

    # --- one tick --------------------------------------------------------------------------

    def sample_all(self, now: datetime) -> list[dict[str, Any]]:
        """One sample dict per GPU still on the bus, all stamped `now`; Xid events are polled too."""
        samples = []
        for gpu in list(self._gpus):
            try:
                samples.append(self._sample(gpu, now))
            except self._nv.NVMLError_GpuIsLost as exc:
                self._lose(gpu, now, exc)
        self._poll_events(now)
        return samples

    def take_events(self) -> list[dict[str, Any]]:
        """Events (gpu_lost, xid) seen since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def _sample(self, gpu: Gpu, now: datetime) -> dict[str, Any]:
        nv, h = self._nv, gpu.handle
        util = self._field(gpu, "utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        memory = self._field(gpu, "memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        power_mw = self._field(gpu, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
        limit_mw = self._field(gpu, "power_limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
        gpm = self._field(gpu, "gpm", lambda: self._gpm(gpu)) or (None, None, None, None)
        sm_active, tensor_active, nvlink_tx_mib, nvlink_rx_mib = gpm
        ecc = nv.NVML_VOLATILE_ECC  # since the driver loaded: a rise means new errors on this boot
        return {
            "gpu": gpu.index,
            "gpu_uuid": gpu.uuid,
            "ts": now.isoformat(),
            "utilization_gpu": _float(util.gpu) if util is not None else None,
            "utilization_memory": _float(util.memory) if util is not None else None,
            "memory_used_bytes": int(memory.used) if memory is not None else None,
            "memory_total_bytes": int(memory.total) if memory is not None else None,
            "power_watts": power_mw / MILLIWATTS_PER_WATT if power_mw is not None else None,
            "power_limit_watts": limit_mw / MILLIWATTS_PER_WATT if limit_mw is not None else None,
            "temperature_c": _float(
                self._field(gpu, "temperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            ),
            "sm_clock_mhz": _float(
                self._field(gpu, "sm_clock", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            ),
            "mem_clock_mhz": _float(
                self._field(gpu, "mem_clock", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
            ),
            "sm_active": sm_active,
            "tensor_active": tensor_active,
            "throttle_reasons": self._field(gpu, "throttle_reasons", lambda: self._throttle_reasons(h)),
            "ecc_corrected": self._field(
                gpu, "ecc", lambda: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, ecc)
            ),
            "ecc_uncorrected": self._field(
                gpu, "ecc", lambda: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, ecc)
            ),
            # KB/s over the driver's last ~20 ms window, stored as reported.
            "pcie_tx_kbps": _float(
                self._field(gpu, "pcie", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES))
            ),
            "pcie_rx_kbps": _float(
                self._field(gpu, "pcie", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))
            ),
            "processes": self._field(gpu, "processes", lambda: self._processes(h)),
            # GPM's NVLink rates are MiB/s over the tick, all links together; stored in KB/s like PCIe.
            # Whole KB/s, the resolution NVML gives PCIe: GPM's MiB/s is a ratio of counters over the
            # interval (a full double), and its last bits are noise that the compacted tier would keep.
            "nvlink_tx_kbps": float(round(nvlink_tx_mib * KIB_PER_MIB)) if nvlink_tx_mib is not None else None,
            "nvlink_rx_kbps": float(round(nvlink_rx_mib * KIB_PER_MIB)) if nvlink_rx_mib is not None else None,
        }

    def _field(self, gpu: Gpu, name: str, read: Callable[[], Any]) -> Any:
        """Call one NVML reader: None when the GPU cannot say; GpuIsLost propagates to drop the GPU."""
        nv = self._nv
        try:
            return read()
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as exc:
            quiet = isinstance(exc, nv.NVMLError_NotSupported | nv.NVMLError_FunctionNotFound)
            if not quiet and (gpu.index, name) not in self._warned:
                # Anything else (no permission, unknown) is unexpected: say so once per field.
                self._warned.add((gpu.index, name))
                logger.warning("GPU %d: %s unreadable (%s: %s); stored as missing", gpu.index, name,
                               type(exc).__name__, exc)  # fmt: skip
            return None

    def _throttle_reasons(self, handle: Any) -> int:
        nv = self._nv
        # "Clocks event reasons" is the newer name; drivers before it answer FunctionNotFound.
        newer = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if newer is not None:
            try:
                return int(newer(handle))
            except nv.NVMLError_FunctionNotFound:
                pass
        return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def _processes(self, handle: Any) -> list[dict[str, Any]]:
        procs = self._nv.nvmlDeviceGetComputeRunningProcesses(handle)
        # usedGpuMemory is bytes, or None where the driver cannot tell (WDDM).
        return [
            {"pid": int(p.pid), "used_memory_bytes": int(p.usedGpuMemory) if p.usedGpuMemory is not None else None}
            for p in procs
        ]

    # --- GPM (Hopper and newer) -------------------------------------------------------------

    def _setup_gpm(self, gpu: Gpu) -> None:
        nv = self._nv
        try:
            if not nv.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice:
                return
            gpu.gpm_samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
        except (nv.NVMLError, AttributeError):
            gpu.gpm_samples = None  # an older driver or nvidia-ml-py: SM/tensor activity stay missing

    def _gpm(self, gpu: Gpu) -> tuple[float | None, ...] | None:
        """GPM_METRICS between the previous tick's GPM sample and this one: SM-active and
        tensor-active percent, NVLink TX and RX MiB/s; a metric this GPU lacks (no NVLink) is None."""
        if gpu.gpm_samples is None:
            return None
        nv = self._nv
        previous, current = gpu.gpm_samples
        nv.nvmlGpmSampleGet(gpu.handle, current)
        gpu.gpm_samples = [current, previous]
        if not gpu.gpm_primed:
            gpu.gpm_primed = True  # GPM metrics are rates: the first tick has nothing to compare with
            return None
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = previous
        request.sample2 = current
        for i, name in enumerate(GPM_METRICS):
            request.metrics[i].metricId = getattr(nv, name)
        nv.nvmlGpmMetricsGet(request)
        values = [
            float(metric.value) if metric.nvmlReturn == nv.NVML_SUCCESS else None
            for metric in (request.metrics[i] for i in range(len(GPM_METRICS)))
        ]
        sm, tensor, nvlink_tx, nvlink_rx = values
        return (
            _percent(sm) if sm is not None else None,
            _percent(tensor) if tensor is not None else None,
            max(nvlink_tx, 0.0) if nvlink_tx is not None else None,
            max(nvlink_rx, 0.0) if nvlink_rx is not None else None,
        )

    def _free_gpm(self, gpu: Gpu) -> None:
        for sample in gpu.gpm_samples or []:
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlGpmSampleFree(sample)
        gpu.gpm_samples = None

    # --- events: Xid and lost GPUs ----------------------------------------------------------

    def _setup_events(self) -> None:
        nv = self._nv
        try:
            event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError:
            return
        registered = False
        for gpu in self._gpus:
            try:
                if nv.nvmlDeviceGetSupportedEventTypes(gpu.handle) & nv.nvmlEventTypeXidCriticalError:
                    nv.nvmlDeviceRegisterEvents(gpu.handle, nv.nvmlEventTypeXidCriticalError, event_set)
                    registered = True
            except nv.NVMLError as exc:
                logger.info("GPU %d: Xid events unavailable (%s)", gpu.index, type(exc).__name__)
        if registered:
            self._event_set = event_set
        else:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(event_set)

    def _poll_events(self, now: datetime) -> None:
        """Read pending Xid events without waiting (timeout 0)."""
        if self._event_set is None:
            return
        nv = self._nv
        for i in range(MAX_EVENTS_PER_TICK):
            try:
                data = nv.nvmlEventSetWait(self._event_set, 0)
            except nv.NVMLError_Timeout:
                return  # nothing pending
            except nv.NVMLError as exc:
                logger.warning("reading Xid events failed (%s: %s)", type(exc).__name__, exc)
                return
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            gpu = self._gpu_of(data.device)
            xid = int(data.eventData)
            # Events share the tick's time; a microsecond apart keeps two Xids of one tick distinct.
            self._events.append(
                {
                    "kind": "xid",
                    "gpu": gpu.index if gpu else None,
                    "gpu_uuid": gpu.uuid if gpu else "",
                    "ts": (now + timedelta(microseconds=i)).isoformat(),
                    "message": f"Xid {xid} on GPU {gpu.index if gpu else '?'}",
                    "details": {"xid": xid},
                }
            )

    def _gpu_of(self, device: Any) -> Gpu | None:
        # ctypes handles do not compare by value: match the event's device by its index.
        try:
            index = self._nv.nvmlDeviceGetIndex(device)
        except self._nv.NVMLError:
            return None
        return next((g for g in self._gpus if g.index == index), None)

    def _lose(self, gpu: Gpu, now: datetime, exc: Exception) -> None:
        logger.error("GPU %d (%s) is lost (%s); it is no longer sampled", gpu.index, gpu.uuid, type(exc).__name__)
        self._gpus.remove(gpu)
        self._free_gpm(gpu)
        self._events.append(_gpu_lost_event(gpu.index, gpu.uuid, now, exc))


def _gpu_lost_event(index: int, uuid: str, now: datetime, exc: Exception) -> dict[str, Any]:
    label = f"GPU {index} ({uuid})" if uuid else f"GPU {index}"
    return {
        "kind": "gpu_lost",
        "gpu": index,
        "gpu_uuid": uuid,
        "ts": now.isoformat(),
        "message": f"{label} fell off the bus ({type(exc).__name__})",
        "details": {"error": type(exc).__name__},
    }


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def _percent(value: float) -> float:
    # GPM rates are ratios of counters and can land a hair outside 0..100.
    return min(max(float(value), 0.0), 100.0)
