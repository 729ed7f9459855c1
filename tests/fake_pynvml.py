"""A stand-in for nvidia-ml-py's `pynvml` module, driven per test. Tests only.

It follows nvidia-ml-py 13.615.71 exactly where the agent can tell: every constant, struct
and error class *is* the library's own (re-exported from the real `pynvml`, which imports
fine without a driver), so `NVMLError(NVML_ERROR_NOT_SUPPORTED)` really is an
`NVMLError_NotSupported`, and values come back as the same ctypes structs
(`c_nvmlUtilization_t`, `c_nvmlMemory_t`, `c_nvmlEventData_t`, `c_nvmlGpmMetricsGet_t`) in
the same units (mW, bytes, MHz, KB/s). Device, event-set and GPM-sample handles are real
ctypes pointers to the library's opaque structs, so they compare by identity as real ones do.

    state = fake_pynvml.configure([FakeGpu(), FakeGpu(not_supported={"nvmlDeviceGetTotalEccErrors"})])

A GPU's tick is how many times its utilisation has been read: the agent reads it once per
GPU per tick, first. `lost_from_tick`, `xids` and `over_time` are keyed by that tick (0-based).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml as _real

# The library's own constants, structs and NVMLError hierarchy (NVMLError_NotSupported, ...).
for _name in dir(_real):
    if _name.startswith(("NVML", "nvmlEventType", "nvmlClocks", "c_nvml", "struct_c_nvml")):
        globals()[_name] = getattr(_real, _name)
NVMLError = _real.NVMLError
nvmlStructToFriendlyObject = _real.nvmlStructToFriendlyObject

GIB = 1024**3


@dataclass
class FakeGpu:
    """One simulated GPU; attribute values are in NVML's units."""

    uuid: str = ""
    name: str = "NVIDIA H100 80GB HBM3"
    utilization_gpu: int = 97  # percent
    utilization_memory: int = 41
    memory_total: int = 80 * GIB  # bytes
    memory_used: int = 60 * GIB
    power_mw: int = 650_500  # milliwatts
    power_limit_mw: int = 700_000
    temperature_c: int = 71
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clocks_event_reasons: int = 0x4  # nvmlClocksEventReasonSwPowerCap
    ecc_corrected: int = 3
    ecc_uncorrected: int = 0
    pcie_tx_kbps: int = 12_000  # KB/s
    pcie_rx_kbps: int = 34_000
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory bytes)
    gpm_supported: bool = False
    gpm_sm_util: float = 88.5  # percent
    gpm_tensor_util: float = 61.25
    # NVLink over all links, MiB/s (NVML_GPM_METRIC_NVLINK_TOTAL_TX/RX_PER_SEC); None: no NVLink
    # on this GPU, and the metric answers NVML_ERROR_NOT_SUPPORTED as on a PCIe-only card.
    gpm_nvlink_tx_mibps: float | None = 180_000.0
    gpm_nvlink_rx_mibps: float | None = 175_500.5
    # Function names (e.g. "nvmlDeviceGetTotalEccErrors") that raise NVMLError_NotSupported.
    not_supported: set[str] = field(default_factory=set)
    # Function names missing from this driver (NVMLError_FunctionNotFound).
    not_found: set[str] = field(default_factory=set)
    lost_from_tick: int | None = None
    xids: dict[int, list[int]] = field(default_factory=dict)  # tick -> Xid codes raised then
    over_time: dict[str, list[Any]] = field(default_factory=dict)  # attribute -> value per tick
    tick: int = -1

    def value(self, attribute: str) -> Any:
        series = self.over_time.get(attribute)
        if series:
            return series[min(max(self.tick, 0), len(series) - 1)]
        return getattr(self, attribute)


@dataclass
class FakeState:
    """What the fake driver holds: its GPUs, handles, registered events and GPM samples."""

    gpus: list[FakeGpu]
    init_error: int | None = None  # e.g. NVML_ERROR_LIBRARY_NOT_FOUND: nvmlInit raises it
    initialized: bool = False
    handles: dict[int, Any] = field(default_factory=dict)  # address -> ctypes handle
    handle_index: dict[int, int] = field(default_factory=dict)  # address -> GPU index
    registered: set[int] = field(default_factory=set)  # GPU indexes with Xid events registered
    pending_events: list[Any] = field(default_factory=list)
    gpm_samples: dict[int, tuple[Any, tuple[float | None, ...] | None]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)


_state = FakeState(gpus=[])


def configure(gpus: list[FakeGpu] | None = None, init_error: int | None = None) -> FakeState:
    """Replace the fake driver's state: these GPUs (UUIDs filled in), or an nvmlInit error."""
    global _state
    gpus = gpus if gpus is not None else [FakeGpu()]
    for index, gpu in enumerate(gpus):
        gpu.uuid = gpu.uuid or f"GPU-00000000-0000-0000-0000-{index:012d}"
    _state = FakeState(gpus=gpus, init_error=init_error)
    return _state


def state() -> FakeState:
    return _state


def _raise(code: int) -> None:
    raise NVMLError(code)  # NVMLError.__new__ picks the NVMLError_* subclass, as in pynvml


def _check_init() -> None:
    if not _state.initialized:
        _raise(_real.NVML_ERROR_UNINITIALIZED)


def _gpu(handle: Any, function: str) -> FakeGpu:
    _check_init()
    _state.calls.append(function)
    gpu = _state.gpus[_state.handle_index[ctypes.addressof(handle.contents)]]
    if gpu.lost_from_tick is not None and gpu.tick >= gpu.lost_from_tick:
        _raise(_real.NVML_ERROR_GPU_IS_LOST)
    if function in gpu.not_found:
        _raise(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
    if function in gpu.not_supported:
        _raise(_real.NVML_ERROR_NOT_SUPPORTED)
    return gpu


# --- init and devices ---------------------------------------------------------------------


def nvmlInitWithFlags(flags: int) -> None:
    if _state.init_error is not None:
        _raise(_state.init_error)
    _state.initialized = True


def nvmlInit() -> None:
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:
    _check_init()
    _state.initialized = False


def nvmlDeviceGetCount() -> int:
    _check_init()
    return len(_state.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> Any:
    _check_init()
    if not 0 <= index < len(_state.gpus):
        _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    handle = ctypes.pointer(_real.struct_c_nvmlDevice_t())
    address = ctypes.addressof(handle.contents)
    _state.handles[address] = handle  # keep it alive, so the address stays unique
    _state.handle_index[address] = index
    return handle


def nvmlDeviceGetIndex(handle: Any) -> int:
    _gpu(handle, "nvmlDeviceGetIndex")
    return _state.handle_index[ctypes.addressof(handle.contents)]


def nvmlDeviceGetUUID(handle: Any) -> str:
    return _gpu(handle, "nvmlDeviceGetUUID").uuid  # str: @convertStrBytes decodes in Python 3


def nvmlDeviceGetName(handle: Any) -> str:
    return _gpu(handle, "nvmlDeviceGetName").name


# --- per-tick readings --------------------------------------------------------------------


def nvmlDeviceGetUtilizationRates(handle: Any) -> Any:
    gpu = _state.gpus[_state.handle_index[ctypes.addressof(handle.contents)]]
    gpu.tick += 1  # the agent's first read of a GPU each tick
    for xid in gpu.xids.get(gpu.tick, []) if gpu.tick >= 0 else []:
        _queue_xid(handle, gpu, xid)
    gpu = _gpu(handle, "nvmlDeviceGetUtilizationRates")
    return _real.c_nvmlUtilization_t(gpu=gpu.value("utilization_gpu"), memory=gpu.value("utilization_memory"))


def nvmlDeviceGetMemoryInfo(handle: Any, version: int | None = None) -> Any:
    gpu = _gpu(handle, "nvmlDeviceGetMemoryInfo")
    total, used = gpu.value("memory_total"), gpu.value("memory_used")
    return _real.c_nvmlMemory_t(total=total, free=total - used, used=used)


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    return _gpu(handle, "nvmlDeviceGetPowerUsage").value("power_mw")


def nvmlDeviceGetEnforcedPowerLimit(handle: Any) -> int:
    return _gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").value("power_limit_mw")


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    gpu = _gpu(handle, "nvmlDeviceGetTemperature")
    if sensor != _real.NVML_TEMPERATURE_GPU:
        _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    return gpu.value("temperature_c")


def nvmlDeviceGetClockInfo(handle: Any, type: int) -> int:
    gpu = _gpu(handle, "nvmlDeviceGetClockInfo")
    clocks = {_real.NVML_CLOCK_SM: "sm_clock_mhz", _real.NVML_CLOCK_MEM: "mem_clock_mhz"}
    if type not in clocks:
        _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    return gpu.value(clocks[type])


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:
    return _gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").value("clocks_event_reasons")


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    return _gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").value("clocks_event_reasons")


def nvmlDeviceGetTotalEccErrors(handle: Any, errorType: int, counterType: int) -> int:
    gpu = _gpu(handle, "nvmlDeviceGetTotalEccErrors")
    if counterType not in (_real.NVML_VOLATILE_ECC, _real.NVML_AGGREGATE_ECC):
        _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    if errorType == _real.NVML_MEMORY_ERROR_TYPE_CORRECTED:
        return gpu.value("ecc_corrected")
    if errorType == _real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
        return gpu.value("ecc_uncorrected")
    _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    return 0


def nvmlDeviceGetPcieThroughput(device: Any, counter: int) -> int:
    gpu = _gpu(device, "nvmlDeviceGetPcieThroughput")
    if counter == _real.NVML_PCIE_UTIL_TX_BYTES:
        return gpu.value("pcie_tx_kbps")
    if counter == _real.NVML_PCIE_UTIL_RX_BYTES:
        return gpu.value("pcie_rx_kbps")
    _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    return 0


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[Any]:
    gpu = _gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
    procs = []
    for pid, used in gpu.value("processes"):
        # As pynvml builds them: a friendly object from c_nvmlProcessInfo_v3_t, None when unknown.
        info = _real.c_nvmlProcessInfo_v3_t(pid=pid, usedGpuMemory=used if used is not None else 0)
        obj = nvmlStructToFriendlyObject(info)
        if used is None:
            obj.usedGpuMemory = None
        procs.append(obj)
    return procs


# --- events -------------------------------------------------------------------------------


def nvmlEventSetCreate() -> Any:
    _check_init()
    event_set = ctypes.pointer(_real.struct_c_nvmlEventSet_t())
    _state.handles[ctypes.addressof(event_set.contents)] = event_set
    return event_set


def nvmlDeviceGetSupportedEventTypes(handle: Any) -> int:
    _gpu(handle, "nvmlDeviceGetSupportedEventTypes")
    return _real.nvmlEventTypeXidCriticalError | _real.nvmlEventTypeSingleBitEccError


def nvmlDeviceRegisterEvents(handle: Any, eventTypes: int, eventSet: Any) -> None:
    _gpu(handle, "nvmlDeviceRegisterEvents")
    if eventTypes & _real.nvmlEventTypeXidCriticalError:
        _state.registered.add(_state.handle_index[ctypes.addressof(handle.contents)])


def _queue_xid(handle: Any, gpu: FakeGpu, xid: int) -> None:
    if _state.handle_index[ctypes.addressof(handle.contents)] in _state.registered:
        _state.pending_events.append(
            _real.c_nvmlEventData_t(device=handle, eventType=_real.nvmlEventTypeXidCriticalError, eventData=xid)
        )


def nvmlEventSetWait(eventSet: Any, timeoutms: int) -> Any:
    _check_init()
    if not _state.pending_events:
        _raise(_real.NVML_ERROR_TIMEOUT)  # as the library does when nothing arrived in time
    return _state.pending_events.pop(0)


def nvmlEventSetFree(eventSet: Any) -> None:
    _check_init()


# --- GPM ----------------------------------------------------------------------------------


def nvmlGpmQueryDeviceSupport(device: Any) -> Any:
    gpu = _gpu(device, "nvmlGpmQueryDeviceSupport")
    support = _real.c_nvmlGpmSupport_t()
    support.version = _real.NVML_GPM_SUPPORT_VERSION
    support.isSupportedDevice = int(gpu.gpm_supported)
    return support


def nvmlGpmSampleAlloc() -> Any:
    _check_init()
    sample = ctypes.pointer(_real.struct_c_nvmlGpmSample_t())
    _state.gpm_samples[ctypes.addressof(sample.contents)] = (sample, None)
    return sample


# FakeGpu attributes a GPM sample holds, in the order nvmlGpmMetricsGet reads them back.
GPM_VALUES = ("gpm_sm_util", "gpm_tensor_util", "gpm_nvlink_tx_mibps", "gpm_nvlink_rx_mibps")


def nvmlGpmSampleGet(device: Any, gpmSample: Any) -> Any:
    gpu = _gpu(device, "nvmlGpmSampleGet")
    if not gpu.gpm_supported:
        _raise(_real.NVML_ERROR_NOT_SUPPORTED)
    address = ctypes.addressof(gpmSample.contents)
    _state.gpm_samples[address] = (gpmSample, tuple(gpu.value(name) for name in GPM_VALUES))
    return gpmSample


def nvmlGpmMetricsGet(metricsGet: Any) -> Any:
    """Fills each requested metric with the later sample's value (a real GPU computes the rate)."""
    _check_init()
    if metricsGet.version != _real.NVML_GPM_METRICS_GET_VERSION:
        _raise(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    first = _state.gpm_samples.get(ctypes.addressof(metricsGet.sample1.contents))
    second = _state.gpm_samples.get(ctypes.addressof(metricsGet.sample2.contents))
    if not first or not second or first[1] is None or second[1] is None:
        _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
    sm_util, tensor_util, nvlink_tx, nvlink_rx = second[1]
    values = {
        _real.NVML_GPM_METRIC_SM_UTIL: sm_util,
        _real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: tensor_util,
        _real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: nvlink_tx,
        _real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: nvlink_rx,
    }
    for i in range(metricsGet.numMetrics):
        metric = metricsGet.metrics[i]
        if values.get(metric.metricId) is not None:
            metric.value, metric.nvmlReturn = values[metric.metricId], _real.NVML_SUCCESS
        else:
            metric.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
    return metricsGet


def nvmlGpmSampleFree(gpmSample: Any) -> None:
    _check_init()
    _state.gpm_samples.pop(ctypes.addressof(gpmSample.contents), None)
