"""GPU sources: the protocol the agent samples, and the NVML implementation.

A source hands out one :class:`Reading` per GPU per tick. Every metric may be ``None``:
not every GPU supports every NVML query (energy counters need Volta or newer, some
boards hide power), and a missing metric must never stop the others from being sampled.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple, Protocol

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuInfo:
    """Static facts about one GPU, sent once per start in the inventory."""

    index: int
    uuid: str
    name: str
    power_limit_w: float | None
    memory_total_mib: int | None
    # nvmlDeviceGetMaxClockInfo: what the clocks of each sample are compared with.
    max_sm_clock_mhz: float | None = None
    max_mem_clock_mhz: float | None = None
    # What the device is (issue 33): "gpu", "ai-asic" (Inferentia, Trainium) or "edge-soc"
    # (Jetson), and who made it ("nvidia", "amd", "aws"). None: the server derives both from
    # the model name (NVML and dcgm-exporter leave them out: their devices are NVIDIA GPUs).
    kind: str | None = None
    vendor: str | None = None


class Reading(NamedTuple):
    """One reading of one GPU. A NamedTuple, not a dataclass: it is built every tick."""

    util_pct: float | None
    mem_used_mib: float | None
    power_w: float | None
    energy_mj: int | None  # NVML total-energy counter: mJ since the driver was loaded
    temp_c: float | None
    sm_clock_mhz: float | None
    # Bottleneck metrics (issue 14). Defaults keep older sources (simulated, fakes) valid.
    mem_util_pct: float | None = None  # % of time device memory was read or written
    mem_clock_mhz: float | None = None
    pcie_tx_kib_s: float | None = None  # NVML reports PCIe throughput in KB/s (1024 bytes)
    pcie_rx_kib_s: float | None = None
    throttle_reasons: int | None = None  # nvmlClocksThrottleReason* bitmask
    power_limit_w: float | None = None  # the enforced limit: a cap set at run time shows here
    # Profiling metrics (DCGM's DCGM_FI_PROF_*; NVML has no equivalent): % of the time, 0-100.
    sm_active_pct: float | None = None  # cycles an SM had at least one warp assigned
    sm_occupancy_pct: float | None = None  # resident warps / the SM's maximum
    tensor_active_pct: float | None = None  # cycles the tensor (HMMA) pipe was active
    dram_active_pct: float | None = None  # cycles the memory interface was busy
    nvlink_tx_kib_s: float | None = None  # all links together, KiB/s (1024 bytes)
    nvlink_rx_kib_s: float | None = None


ALL_LINKS = 0xFFFFFFFF  # an NVLink field's scopeId for the sum over every link (nvml.h)
# nvmlFieldValue_t.valueType -> the member of its value union that holds the number.
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}

# nvmlClocksThrottleReason* bits (nvml.h). Power: SW power cap + HW power brake; thermal: SW
# and HW thermal slowdown. The server reads these bits the same way (telemetry/store.py).
THROTTLE_POWER_MASK = 0x4 | 0x80
THROTTLE_THERMAL_MASK = 0x20 | 0x40


class GpuSource(Protocol):
    kind: str  # "nvml" or "simulated": goes into every batch's "source" field

    def gpus(self) -> list[GpuInfo]: ...

    def read(self, index: int) -> Reading | None: ...  # None: nothing new to report

    def close(self) -> None: ...


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this host (no driver, no library, or init failed)."""


# NVML error codes, used when the lib object does not define the constant itself.
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_DRIVER_NOT_LOADED = 9
_NVML_ERROR_LIBRARY_NOT_FOUND = 12
_NVML_ERROR_FUNCTION_NOT_FOUND = 13


def _text(value: bytes | str) -> str:
    # pynvml before 11.x returned bytes for names and UUIDs; newer versions return str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def load_nvml_lib(dotted: str | None = None) -> Any:
    """Import pynvml, or a module with the same function names (for tests and benchmarks)."""
    name = dotted or "pynvml"
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if dotted:
            raise NvmlUnavailable(f"cannot import NVML module {dotted!r} ({exc})") from exc
        raise NvmlUnavailable("the nvidia-ml-py package (pynvml) is not installed") from exc


class NvmlSource:
    """Reads GPUs through NVML. ``lib`` is pynvml or any object with its function names."""

    kind = "nvml"

    def __init__(self, lib: ModuleType | Any | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib if lib is not None else load_nvml_lib()
        self._clock = clock  # the time between NVLink counter reads
        self._nvml_error: type[BaseException] = getattr(self._lib, "NVMLError", Exception)
        self._not_supported = {
            getattr(self._lib, "NVML_ERROR_NOT_SUPPORTED", _NVML_ERROR_NOT_SUPPORTED),
            getattr(self._lib, "NVML_ERROR_FUNCTION_NOT_FOUND", _NVML_ERROR_FUNCTION_NOT_FOUND),
        }
        try:
            self._lib.nvmlInit()
        except self._nvml_error as exc:
            code = getattr(exc, "value", None)
            no_driver = {
                getattr(self._lib, "NVML_ERROR_DRIVER_NOT_LOADED", _NVML_ERROR_DRIVER_NOT_LOADED),
                getattr(self._lib, "NVML_ERROR_LIBRARY_NOT_FOUND", _NVML_ERROR_LIBRARY_NOT_FOUND),
            }
            what = "NVIDIA driver not found" if code in no_driver else "NVML failed to start"
            raise NvmlUnavailable(f"{what} (NVML: {exc})") from exc
        except OSError as exc:  # a broken libnvidia-ml.so can surface as an OSError
            raise NvmlUnavailable(f"NVIDIA driver not found (NVML: {exc})") from exc
        self._closed = False
        self._temp_sensor = getattr(self._lib, "NVML_TEMPERATURE_GPU", 0)
        self._sm_clock = getattr(self._lib, "NVML_CLOCK_SM", 1)
        self._mem_clock = getattr(self._lib, "NVML_CLOCK_MEM", 2)
        self._pcie_tx = getattr(self._lib, "NVML_PCIE_UTIL_TX_BYTES", 0)
        self._pcie_rx = getattr(self._lib, "NVML_PCIE_UTIL_RX_BYTES", 1)
        # Renamed "clocks event reasons" in NVML 12.x; older pynvml has only the first name.
        self._throttle_fn = getattr(self._lib, "nvmlDeviceGetCurrentClocksThrottleReasons",
                                    None) or getattr(
            self._lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        # NVLink data throughput (nvml.h): cumulative KiB counters; scopeId UINT_MAX asks for
        # the sum over all links. Older pynvml takes bare field ids only (a TypeError here).
        self._get_fields = getattr(self._lib, "nvmlDeviceGetFieldValues", None)
        self._nvlink_ids = [
            (getattr(self._lib, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138), ALL_LINKS),
            (getattr(self._lib, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139), ALL_LINKS),
        ]
        self._nvlink_prev: dict[int, tuple[float, int, int]] = {}  # index -> (mono, tx, rx)
        self._get_procs = getattr(self._lib, "nvmlDeviceGetComputeRunningProcesses", None)
        # Per GPU, the metrics NVML said are unsupported: never asked again, because a
        # failing NVML call can cost milliseconds and the answer will not change.
        self._unsupported: dict[int, set[str]] = {}
        self._handles: dict[int, Any] = {}
        self._gpus = self._discover()

    def _discover(self) -> list[GpuInfo]:
        lib = self._lib
        gpus: list[GpuInfo] = []
        count = self._call(-1, "count", lib.nvmlDeviceGetCount) or 0
        for index in range(count):
            try:
                handle = lib.nvmlDeviceGetHandleByIndex(index)
            except self._nvml_error as exc:
                # A GPU that fell off the bus must not keep the others from being monitored.
                log.warning("GPU %d: cannot get an NVML handle (%s); skipping it", index, exc)
                continue
            self._handles[index] = handle
            self._unsupported[index] = set()
            uuid = self._call(index, "uuid", lib.nvmlDeviceGetUUID, handle)
            name = self._call(index, "name", lib.nvmlDeviceGetName, handle)
            get_limit = getattr(lib, "nvmlDeviceGetPowerManagementLimit", None)
            limit_mw = self._call(index, "power_limit", get_limit, handle)
            mem = self._call(index, "memory_info", lib.nvmlDeviceGetMemoryInfo, handle)
            get_max = getattr(lib, "nvmlDeviceGetMaxClockInfo", None)
            max_sm = self._call(index, "max_sm_clock", get_max, handle, self._sm_clock)
            max_mem = self._call(index, "max_mem_clock", get_max, handle, self._mem_clock)
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(uuid) if uuid is not None else f"unknown-{index}",
                    name=_text(name) if name is not None else "unknown",
                    power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
                    memory_total_mib=int(mem.total // MIB) if mem is not None else None,
                    max_sm_clock_mhz=float(max_sm) if max_sm is not None else None,
                    max_mem_clock_mhz=float(max_mem) if max_mem is not None else None,
                )
            )
        return gpus

    def _call(self, index: int, metric: str, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """Call one NVML function; an error becomes None (gpustat-style), never a crash."""
        unsupported = self._unsupported.get(index)
        if unsupported is not None and metric in unsupported:
            return None
        if fn is None:  # an old pynvml without this function
            if unsupported is not None:
                unsupported.add(metric)
            return None
        try:
            return fn(*args)
        except self._nvml_error as exc:
            if getattr(exc, "value", None) in self._not_supported and unsupported is not None:
                unsupported.add(metric)
                log.info("GPU %d: %s not supported by NVML; not asking again", index, metric)
            else:
                # Transient (GPU busy, timeout, lost): None now, ask again next tick.
                log.debug("GPU %d: %s failed (%s)", index, metric, exc)
            return None

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def driver_version(self) -> str | None:
        """The NVIDIA driver's version (benchmarks start a new baseline when it changes)."""
        fn = getattr(self._lib, "nvmlSystemGetDriverVersion", None)
        value = self._call(-1, "driver_version", fn)
        return _text(value) if value is not None else None

    def max_sm_clock_mhz(self, index: int) -> float | None:
        fn = getattr(self._lib, "nvmlDeviceGetMaxClockInfo", None)
        value = self._call(index, "max_sm_clock", fn, self._handles[index], self._sm_clock)
        return float(value) if value is not None else None

    def unsupported(self, index: int) -> frozenset[str]:
        return frozenset(self._unsupported.get(index, ()))

    def read(self, index: int) -> Reading:
        lib, handle, call = self._lib, self._handles[index], self._call
        util = call(index, "util_pct", lib.nvmlDeviceGetUtilizationRates, handle)
        mem = call(index, "mem_used_mib", lib.nvmlDeviceGetMemoryInfo, handle)
        power_mw = call(index, "power_w", lib.nvmlDeviceGetPowerUsage, handle)
        energy_mj = call(
            index, "energy_mj", getattr(lib, "nvmlDeviceGetTotalEnergyConsumption", None), handle
        )
        temp = call(index, "temp_c", lib.nvmlDeviceGetTemperature, handle, self._temp_sensor)
        clock = call(index, "sm_clock_mhz", lib.nvmlDeviceGetClockInfo, handle, self._sm_clock)
        # Each bottleneck metric is its own call with its own "unsupported" memory: a board
        # without PCIe counters still reports its throttle reasons.
        mem_clock = call(index, "mem_clock_mhz", lib.nvmlDeviceGetClockInfo, handle,
                         self._mem_clock)
        get_pcie = getattr(lib, "nvmlDeviceGetPcieThroughput", None)
        tx = call(index, "pcie_tx_kib_s", get_pcie, handle, self._pcie_tx)
        rx = call(index, "pcie_rx_kib_s", get_pcie, handle, self._pcie_rx)
        throttle = call(index, "throttle_reasons", self._throttle_fn, handle)
        limit_mw = call(index, "power_limit_w",
                        getattr(lib, "nvmlDeviceGetEnforcedPowerLimit", None), handle)
        nvlink_tx, nvlink_rx = self._nvlink(index, handle)
        return Reading(
            float(util.gpu) if util is not None else None,
            mem.used / MIB if mem is not None else None,
            power_mw / 1000.0 if power_mw is not None else None,  # NVML reports mW
            int(energy_mj) if energy_mj is not None else None,
            float(temp) if temp is not None else None,
            float(clock) if clock is not None else None,
            # The memory figure comes with the same utilization call as util_pct.
            float(util.memory) if util is not None and hasattr(util, "memory") else None,
            float(mem_clock) if mem_clock is not None else None,
            float(tx) if tx is not None else None,
            float(rx) if rx is not None else None,
            int(throttle) if throttle is not None else None,
            limit_mw / 1000.0 if limit_mw is not None else None,
            nvlink_tx_kib_s=nvlink_tx,
            nvlink_rx_kib_s=nvlink_rx,
        )

    def _nvlink(self, index: int, handle: Any) -> tuple[float | None, float | None]:
        """NVLink TX/RX in KiB/s since this GPU's previous read: the counters' increase over
        the monotonic time between reads. None on the first read, after a counter went down
        (a reset), and for a GPU without NVLink (remembered, like any unsupported metric)."""
        unsupported = self._unsupported.get(index)
        if unsupported is None or "nvlink" in unsupported:
            return None, None
        if self._get_fields is None:
            unsupported.add("nvlink")
            return None, None
        try:
            values = self._get_fields(handle, self._nvlink_ids)
        except TypeError:  # a pynvml that cannot pass a scopeId
            unsupported.add("nvlink")
            log.info("GPU %d: this pynvml cannot ask NVLink throughput per scope; not "
                     "asking again", index)
            return None, None
        except self._nvml_error as exc:
            if getattr(exc, "value", None) in self._not_supported:
                unsupported.add("nvlink")
            return None, None
        mono = self._clock()
        counters = []
        for v in values:
            ret = getattr(v, "nvmlReturn", 0)
            if ret in self._not_supported:
                unsupported.add("nvlink")  # no NVLink on this board (a PCIe card)
                log.info("GPU %d: NVLink throughput not supported; not asking again", index)
                return None, None
            if ret != 0:
                return None, None  # transient: ask again next tick
            counters.append(int(getattr(v.value, _VALUE_ATTR.get(v.valueType, "ullVal"))))
        tx, rx = counters
        prev = self._nvlink_prev.get(index)
        self._nvlink_prev[index] = (mono, tx, rx)
        if prev is None or mono <= prev[0] or tx < prev[1] or rx < prev[2]:
            return None, None
        dt = mono - prev[0]
        return (tx - prev[1]) / dt, (rx - prev[2]) / dt

    def processes(self, index: int) -> list[tuple[int, float | None]] | None:
        """The compute processes on a GPU: (pid, used GPU memory in MiB or None where the
        driver does not say, e.g. under MIG or without permission). None: not known."""
        procs = self._call(index, "processes", self._get_procs, self._handles[index])
        if procs is None:
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            # pynvml gives None for NVML_VALUE_NOT_AVAILABLE; older builds the raw sentinel.
            ok = isinstance(used, int) and 0 <= used < (1 << 63) - 1
            out.append((int(p.pid), used / MIB if ok else None))
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._lib.nvmlShutdown()
        except self._nvml_error as exc:
            log.debug("nvmlShutdown failed: %s", exc)
