"""GPU readings from NVIDIA dcgm-exporter's Prometheus page (``[[scrape]] kind = "dcgm"``).

Most Kubernetes GPU clusters already run dcgm-exporter (the GPU Operator deploys it). Its page
carries what NVML cannot give -- DCGM's profiling fields: how many cycles the SMs had a warp
(``DCGM_FI_PROF_SM_ACTIVE``), how full they were (``..._SM_OCCUPANCY``), how busy the tensor
pipes and the memory interface were (``..._PIPE_TENSOR_ACTIVE``, ``..._DRAM_ACTIVE``), and PCIe
and NVLink traffic as rates -- and the device fields NVML also has. Two ways to use it:

* **Beside NVML** (:class:`DcgmOverlay`): NVML stays the source of every device figure and of
  energy; the profiling fields are added from the latest scrape, matched to NVML's GPU index by
  UUID (dcgm-exporter's ``gpu`` label is DCGM's own numbering, which need not be NVML's). A
  scrape thread reads the page every ``scrape_interval``; a page older than
  ``STALE_INTERVALS`` scrape intervals is not used (the fields go null, not stale).
* **Alone** (:class:`DcgmSource`), for a host where the agent has no NVML access (a container
  without the driver mounted): every figure comes from the page, energy from
  ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` -- millijoules since boot, the same kind of counter
  as NVML's -- through the same accounting (collectors/energy.py: a counter that went down was
  reset, and that interval falls back to power). dcgm-exporter refreshes its values every
  collect interval (``-c``, 30 s by default) whatever the scrape rate, so a GPU whose values
  have not changed since its last reading gives no reading (``None``): a repeated counter
  would book 0 J for one interval and a double share for the next.

Units as the exporter gives them (etc/default-counters.csv, etc/dcp-metrics-included.csv of
NVIDIA/dcgm-exporter): ratios 0-1 for DCGM_FI_PROF_{SM_ACTIVE,SM_OCCUPANCY,PIPE_TENSOR_ACTIVE,
DRAM_ACTIVE} (stored as % like util_pct), bytes/s for DCGM_FI_PROF_{PCIE,NVLINK}_{TX,RX}_BYTES
(stored as KiB/s like NVML's PCIe figure), W for DCGM_FI_DEV_POWER_USAGE, MiB for
DCGM_FI_DEV_FB_USED, % for DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_MEM_COPY_UTIL (NVML's
utilization.memory). A field the exporter does not list for a GPU is null: DCGM leaves out
what a GPU does not support, and the CSV decides what is exported.

Series of one GPU that differ only in Kubernetes labels (``pod``, ``namespace``, ``container``:
one series per pod when GPUs are shared) carry the GPU's one value; the pods are kept as who
uses the GPU. Series of a MIG instance (a non-empty ``GPU_I_ID``) describe a slice, not the
GPU, and are not mixed into the GPU's figures.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collectors import prometheus as prom
from collectors.every import run_every
from collectors.sources import GpuInfo, GpuSource, Reading

log = logging.getLogger(__name__)

DEFAULT_URL = "http://localhost:9400/metrics"
STALE_INTERVALS = 3.0  # overlay: a page older than this many scrape intervals is not used
KIB = 1024.0

# exporter metric -> (Reading field, factor to the stored unit). First listed wins when two
# names feed one field (DCGM renamed throttle reasons "clocks event reasons").
METRICS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_kib_s", 1.0 / KIB),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_kib_s", 1.0 / KIB),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active_pct", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active_pct", 100.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_kib_s", 1.0 / KIB),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_kib_s", 1.0 / KIB),
}
# What only DCGM measures: added to NVML's readings by the overlay. NVLink comes from NVML
# where NVML reports it; the overlay fills it from DCGM otherwise.
PROFILE = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
FILL_IF_MISSING = ("nvlink_tx_kib_s", "nvlink_rx_kib_s")
FB_FREE, FB_RESERVED = "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"
_INT_FIELDS = {"energy_mj", "throttle_reasons"}
# DCGM marks a value it does not have with a "blank" sentinel near the top of the field's type
# (dcgm_structs.h: DCGM_INT32_BLANK 0x7ffffff0, DCGM_INT64_BLANK 0x7ffffffffffffff0,
# DCGM_FP64_BLANK 140737488355328.0), and the exporter prints it as a number, e.g.
# DCGM_FI_DEV_MEMORY_TEMP 9223372036854775794 in its README. A value outside these physical
# bounds (the server's own, greenops/telemetry/wire.py) is such a sentinel: null, because one
# out-of-range figure would make the server refuse the whole batch.
_PCT = (0.0, 100.0)
BOUNDS: dict[str, tuple[float, float]] = {
    "util_pct": _PCT, "mem_util_pct": _PCT, "sm_active_pct": _PCT, "sm_occupancy_pct": _PCT,
    "tensor_active_pct": _PCT, "dram_active_pct": _PCT,
    "mem_used_mib": (0.0, 16 * 1024 * 1024.0), "power_w": (0.0, 10_000.0),
    "power_limit_w": (0.0, 10_000.0), "temp_c": (-50.0, 150.0),
    "sm_clock_mhz": (0.0, 10_000.0), "mem_clock_mhz": (0.0, 100_000.0),
    "pcie_tx_kib_s": (0.0, 1e9), "pcie_rx_kib_s": (0.0, 1e9),
    "nvlink_tx_kib_s": (0.0, 1e10), "nvlink_rx_kib_s": (0.0, 1e10),
    "energy_mj": (0.0, float(0x7FFFFFFFFFFFFFF0 - 1)), "throttle_reasons": (0.0, 2.0**32 - 1),
}
K8S_LABELS = ("namespace", "pod", "container")

Fetch = Callable[[str, float], str]


class DcgmUnavailable(RuntimeError):
    """dcgm-exporter cannot be read (down, wrong URL, not its page)."""


@dataclass
class DcgmGpu:
    """One GPU as one page shows it."""

    uuid: str
    gpu: int | None  # the exporter's ``gpu`` label
    model: str
    values: dict[str, float] = field(default_factory=dict)  # Reading field -> stored unit
    memory_total_mib: float | None = None
    pods: set[tuple[str, str, str]] = field(default_factory=set)  # (namespace, pod, container)


def parse_page(expo: prom.Exposition, keep: Callable[[prom.Labels], bool] = lambda _: True
               ) -> dict[str, DcgmGpu]:
    """The exporter's page, per GPU UUID. A series without a UUID label cannot be matched to
    a GPU and is skipped; NaN is a value DCGM did not have (null)."""
    gpus: dict[str, DcgmGpu] = {}
    free: dict[str, float] = {}
    reserved: dict[str, float] = {}
    for metric in (*METRICS, FB_FREE, FB_RESERVED):
        for labels, value in expo.series(metric).items():
            uuid = prom.label(labels, "UUID")
            if not uuid or not keep(labels) or prom.label(labels, "GPU_I_ID"):
                continue
            gpu = gpus.get(uuid)
            if gpu is None:
                index = prom.label(labels, "gpu")
                gpu = gpus[uuid] = DcgmGpu(
                    uuid=uuid,
                    gpu=int(index) if index is not None and index.isdigit() else None,
                    model=prom.label(labels, "modelName") or "unknown",
                )
            pod = tuple(prom.label(labels, k) or "" for k in K8S_LABELS)
            if pod[1]:
                gpu.pods.add(pod)  # type: ignore[arg-type]
            if not math.isfinite(value):
                continue  # NaN: DCGM had no value
            if metric in (FB_FREE, FB_RESERVED):
                if 0 <= value <= BOUNDS["mem_used_mib"][1]:
                    (free if metric == FB_FREE else reserved)[uuid] = value
                continue
            name, factor = METRICS[metric]
            value *= factor
            lo, hi = BOUNDS[name]
            if hi < value <= hi * 1.01 and hi == 100.0:
                value = hi  # a ratio a hair over 1 (rounding in DCGM) is a full 100 %
            if not lo <= value <= hi:
                continue  # a blank sentinel, not a measurement
            # One value per GPU: the same device value repeats on every pod's series.
            gpu.values.setdefault(name, value)
    for uuid, gpu in gpus.items():
        used = gpu.values.get("mem_used_mib")
        if used is not None and uuid in free:
            gpu.memory_total_mib = used + free[uuid] + reserved.get(uuid, 0.0)
    return gpus


def reading(values: dict[str, float]) -> Reading:
    """A Reading from one GPU's page values; what the page lacks is None."""
    out: dict[str, Any] = {}
    for name in Reading._fields:
        v = values.get(name)
        out[name] = int(round(v)) if v is not None and name in _INT_FIELDS else v
    return Reading(**out)


class DcgmScraper:
    """Reads one dcgm-exporter page whole (the fetch refuses a page cut short)."""

    def __init__(self, url: str = DEFAULT_URL, labels: tuple[tuple[str, str], ...] = (),
                 fetch: Fetch | None = None, timeout_s: float = 5.0) -> None:
        from collectors.scrape import http_fetch

        self.url = url
        self.labels = labels
        self.fetch = fetch or http_fetch
        self.timeout_s = timeout_s
        self.failures = 0

    def _keep(self, labels: prom.Labels) -> bool:
        return all(prom.label(labels, k) == v for k, v in self.labels)

    def scrape(self) -> dict[str, DcgmGpu]:
        """The page per GPU UUID; raises DcgmUnavailable when it cannot be read whole."""
        import http.client

        try:
            page = parse_page(prom.parse(self.fetch(self.url, self.timeout_s)), self._keep)
        except (OSError, http.client.HTTPException, ValueError) as exc:  # ParseError included
            self.failures += 1
            raise DcgmUnavailable(f"cannot read dcgm-exporter at {self.url}: {exc}") from exc
        if not page:
            self.failures += 1
            raise DcgmUnavailable(f"{self.url} lists no GPU with a UUID label: is it "
                                  "dcgm-exporter's /metrics?")
        self.failures = 0
        return page


class DcgmSource:
    """Every GPU figure from dcgm-exporter: for hosts where the agent has no NVML. The agent
    should poll it no faster than the exporter refreshes (cli runs it at scrape_interval)."""

    kind = "dcgm"

    def __init__(self, scraper: DcgmScraper, refresh_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scraper = scraper
        self.refresh_s = refresh_s  # one fetch serves every GPU read within this span
        self.clock = clock
        self._page = scraper.scrape()  # raises DcgmUnavailable: nothing to run on
        self._fetched_at = clock()
        self._last: dict[int, dict[str, float]] = {}
        ordered = sorted(self._page.values(),
                         key=lambda g: (g.gpu is None, g.gpu if g.gpu is not None else 0, g.uuid))
        used = {g.gpu for g in ordered if g.gpu is not None}
        spare = (i for i in range(1024) if i not in used)
        self._uuid: dict[int, str] = {}
        self._gpus: list[GpuInfo] = []
        for g in ordered:
            # The exporter's gpu label, unless missing or already taken by another UUID.
            index = g.gpu if g.gpu is not None and g.gpu not in self._uuid else next(spare)
            self._uuid[index] = g.uuid
            # No power limit here, even where DCGM_FI_DEV_POWER_MGMT_LIMIT is exported: the
            # energy accountant would hold each counter delta to limit x dt, and the exporter's
            # refresh cadence makes dt (the agent's) differ from the span the delta covers.
            # The limit still goes with every sample as power_limit_w.
            self._gpus.append(GpuInfo(index=index, uuid=g.uuid, name=g.model,
                                      power_limit_w=None, memory_total_mib=(
                                          int(g.memory_total_mib)
                                          if g.memory_total_mib is not None else None)))

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def pods(self) -> dict[int, set[tuple[str, str, str]]]:
        """Per GPU index, the Kubernetes pods the latest page attributes it to."""
        return {i: set(self._page[u].pods) for i, u in self._uuid.items() if u in self._page}

    def _refresh(self) -> None:
        now = self.clock()
        if now - self._fetched_at < self.refresh_s:
            return
        self._fetched_at = now
        try:
            self._page = self.scraper.scrape()
        except DcgmUnavailable as exc:
            # The previous page stays: its values are unchanged, so no GPU gives a reading
            # until a good page comes (a gap, never a repeated or zero figure).
            if self.scraper.failures in (1, 10) or self.scraper.failures % 100 == 0:
                log.warning("%s (%d in a row); no GPU readings until it answers", exc,
                            self.scraper.failures)

    def read(self, index: int) -> Reading | None:
        self._refresh()
        gpu = self._page.get(self._uuid[index])
        if gpu is None or not gpu.values:
            return None  # the exporter stopped listing this GPU
        if self._last.get(index) == gpu.values:
            return None  # the exporter has not refreshed since this GPU's last reading
        self._last[index] = gpu.values
        return reading(gpu.values)

    def close(self) -> None:
        pass


class DcgmOverlay:
    """NVML's readings plus DCGM's profiling fields, matched by GPU UUID. The page is read on
    a thread every ``interval_s`` (started by :meth:`start`, stopped by :meth:`close`), so a
    slow exporter never delays a GPU read."""

    def __init__(self, source: GpuSource, scraper: DcgmScraper, interval_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.kind = source.kind
        self.scraper = scraper
        self.interval_s = interval_s
        self.clock = clock
        self._by_index: dict[int, dict[str, float]] = {}
        self._pods: dict[int, set[tuple[str, str, str]]] = {}
        self._at = -math.inf
        self._uuids = {g.uuid: g.index for g in source.gpus()}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unmatched_logged = False

    def gpus(self) -> list[GpuInfo]:
        return self.source.gpus()

    def refresh(self) -> bool:
        """Read the page once; False if it could not be read (the last page ages out)."""
        try:
            page = self.scraper.scrape()
        except DcgmUnavailable as exc:
            if self.scraper.failures in (1, 10) or self.scraper.failures % 100 == 0:
                log.warning("%s (%d in a row); profiling fields are null meanwhile", exc,
                            self.scraper.failures)
            return False
        by_index: dict[int, dict[str, float]] = {}
        pods: dict[int, set[tuple[str, str, str]]] = {}
        for uuid, gpu in page.items():
            index = self._uuids.get(uuid)
            if index is None:
                if not self._unmatched_logged:
                    self._unmatched_logged = True
                    log.warning("dcgm-exporter lists GPU %s, which NVML does not show on this "
                                "host; its figures are not used (another node's exporter?)",
                                uuid)
                continue
            by_index[index] = gpu.values
            pods[index] = gpu.pods
        with self._lock:
            self._by_index, self._pods, self._at = by_index, pods, self.clock()
        return True

    def pods(self) -> dict[int, set[tuple[str, str, str]]]:
        with self._lock:
            return {i: set(p) for i, p in self._pods.items()}

    def read(self, index: int) -> Reading | None:
        r = self.source.read(index)
        if r is None:
            return None
        with self._lock:
            fresh = self.clock() - self._at <= STALE_INTERVALS * self.interval_s
            values = self._by_index.get(index) if fresh else None
        if not values:
            return r
        extra = {k: values[k] for k in PROFILE if k in values}
        for k in FILL_IF_MISSING:
            if getattr(r, k) is None and k in values:
                extra[k] = values[k]
        return r._replace(**extra) if extra else r

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="greenops-dcgm", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        run_every(self.interval_s, self._stop, self.refresh, "dcgm-exporter scrape")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self.source.close()


def open_gpu_source(nvml_lib: str | None, target: Any | None, scrape_interval: float,
                    fetch: Fetch | None = None) -> GpuSource:
    """NVML; NVML plus dcgm-exporter's profiling fields when a dcgm target is configured; or
    dcgm-exporter alone when NVML is unavailable or sees no GPU. Raises NvmlUnavailable (no
    target) or DcgmUnavailable (a target that cannot be read)."""
    from collectors.sources import NvmlSource, NvmlUnavailable, load_nvml_lib

    timeout_s = min(10.0, max(0.5, scrape_interval / 2))
    try:
        nvml: GpuSource | None = NvmlSource(load_nvml_lib(nvml_lib))
        why = "NVML sees no GPU"
    except NvmlUnavailable as exc:
        if target is None:
            raise
        nvml, why = None, str(exc)
    if target is None:
        assert nvml is not None
        return nvml
    scraper = DcgmScraper(target.url, target.labels, fetch, timeout_s)
    if nvml is not None and nvml.gpus():
        overlay = DcgmOverlay(nvml, scraper, scrape_interval)
        if not overlay.refresh():
            log.warning("dcgm-exporter at %s did not answer; NVML alone until it does",
                        target.url)
        overlay.start()
        return overlay
    if nvml is not None:
        nvml.close()
    log.info("%s; every GPU figure comes from dcgm-exporter at %s", why, target.url)
    return DcgmSource(scraper, refresh_s=scrape_interval / 2)


def bounded(name: str, value: float | None) -> float | None:
    """The value where it is physically plausible for the field (BOUNDS), else None: a broken
    reading is unknown, never stored (every source of the agent checks its readings here)."""
    lo, hi = BOUNDS[name]
    return value if value is not None and lo <= value <= hi else None
