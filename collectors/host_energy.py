"""Host CPU and RAM power and energy through codecarbon, shipped to ``POST /api/v1/host-energy``.

codecarbon is used for its hardware classes only (``codecarbon.external.hardware.CPU`` and
``codecarbon.external.ram.RAM``), not for an ``EmissionsTracker``: the agent needs watts and
joules, while carbon is worked out on the server from the host's site (country, US state or
cloud region, or a measured override). So codecarbon never looks up a location, online or
offline, and never writes emissions files. It is imported lazily, on the channel's own thread:
importing it initialises NVML and loads pandas, and its CPU lookup takes seconds.

How each figure is obtained is recorded with it, in the server's vocabulary
(greenops/carbon/api.py), choosing as codecarbon's own ResourceTracker does:

* CPU ``rapl``: Linux RAPL energy counters (``/sys/class/powercap/intel-rapl``) are readable:
  measured energy;
* CPU ``cpu_load``: the CPU model is in codecarbon's TDP table: TDP x sockets, scaled by the
  machine's CPU load (codecarbon's load curve, at least 10 % of TDP);
* CPU ``tdp``: the same TDP, but psutil cannot read the load: half the TDP;
* CPU ``constant``: the model is unknown to codecarbon: its generic figure (4 W per thread),
  scaled by load where psutil works. The lowest-quality figure, and labelled so;
* RAM ``model``: codecarbon 3's estimate from the installed memory (about 5 W per DIMM).

Energy per interval: RAPL counter deltas for ``rapl``; otherwise the power x the interval.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import platform
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple, Protocol

from collectors import __version__
from collectors import batch as wire

log = logging.getLogger(__name__)

HOST_ENERGY_PATH = "/api/v1/host-energy"
J_PER_KWH = 3.6e6
DEFAULT_INTERVAL_S = 15.0  # codecarbon's own default measure_power_secs
TRACKING_MODE = "machine"  # the whole host: GPU hosts are accounted per host, not per process


class HostReading(NamedTuple):
    cpu_power_w: float | None
    cpu_energy_j: float | None
    ram_power_w: float | None
    ram_energy_j: float | None


class HostEnergySource(Protocol):
    kind: str  # "codecarbon" or "simulated": the batch's "source"
    version: str  # codecarbon's version
    cpu_method: str
    ram_method: str

    def start(self) -> None: ...

    def read(self, dt_s: float) -> HostReading: ...


def codecarbon_installed() -> bool:
    """Without importing it (the import itself initialises NVML)."""
    return importlib.util.find_spec("codecarbon") is not None


def load_codecarbon() -> SimpleNamespace:
    """The few codecarbon modules the agent uses, imported now."""
    return SimpleNamespace(
        version=importlib.import_module("codecarbon._version").__version__,
        hardware=importlib.import_module("codecarbon.external.hardware"),
        ram=importlib.import_module("codecarbon.external.ram"),
        cpu=importlib.import_module("codecarbon.core.cpu"),
        util=importlib.import_module("codecarbon.core.util"),
    )


@dataclass(frozen=True)
class CpuPlan:
    """How codecarbon will be asked for the CPU's power: its CPU mode and our method label."""

    mode: str  # codecarbon's: "intel_rapl", "cpu_load" or "constant"
    method: str  # ours: rapl, cpu_load, tdp, constant
    model: str | None
    tdp_w: float | None  # the whole machine's TDP, all sockets


def plan_cpu(cc: Any, system: str | None = None) -> CpuPlan:
    """Mirror of codecarbon's ResourceTracker.set_CPU_tracking for a Linux GPU host.

    ``cc`` is :func:`load_codecarbon`'s namespace (tests pass a fake one).
    """
    system = system or platform.system()
    if system == "Linux" and cc.cpu.is_rapl_available():
        return CpuPlan("intel_rapl", "rapl", None, None)
    load_mode = cc.hardware.MODE_CPU_LOAD if cc.cpu.is_psutil_available() else "constant"
    model = cc.util.detect_cpu_model()
    per_socket_w = None
    if model:
        # The TDP table lookup without TDP()'s fall-backs, so we know whether it matched.
        per_socket_w = cc.cpu.TDP.__new__(cc.cpu.TDP)._get_cpu_power_from_registry(model)
    if per_socket_w:
        tdp_w = float(per_socket_w) * max(1, int(cc.util.count_physical_cpus() or 1))
        method = "cpu_load" if load_mode == cc.hardware.MODE_CPU_LOAD else "tdp"
        return CpuPlan(load_mode, method, model, tdp_w)
    # Unknown model: codecarbon's generic per-thread figure.
    tdp_w = float(cc.util.count_cpus() * cc.cpu.DEFAULT_POWER_PER_CORE)
    return CpuPlan(load_mode, "constant", model, tdp_w)


class CodecarbonSource:
    """CPU and RAM power and energy from codecarbon's hardware objects.

    ``cpu`` and ``ram`` are codecarbon ``CPU``/``RAM`` objects, or anything with their
    ``measure_power_and_energy(last_duration)`` returning (power with ``.W``, energy with
    ``.kWh``).
    """

    kind = "codecarbon"

    def __init__(self, cpu: Any, ram: Any, cpu_method: str, version: str,
                 ram_method: str = "model") -> None:
        self.cpu = cpu
        self.ram = ram
        self.cpu_method = cpu_method
        self.ram_method = ram_method
        self.version = version

    @classmethod
    def detect(cls, cc: Any | None = None) -> CodecarbonSource:
        cc = cc or load_codecarbon()
        plan = plan_cpu(cc)
        if plan.mode == "intel_rapl":
            cpu = cc.hardware.CPU.from_utils(output_dir=".", mode="intel_rapl",
                                             tracking_mode=TRACKING_MODE)
        else:
            cpu = cc.hardware.CPU.from_utils(".", plan.mode, plan.model or "Unknown",
                                             plan.tdp_w, tracking_mode=TRACKING_MODE)
        ram = cc.ram.RAM(tracking_mode=TRACKING_MODE)
        log.info("CPU/RAM energy via codecarbon %s: CPU %s%s, RAM %s", cc.version, plan.method,
                 f" ({plan.model}, {plan.tdp_w:g} W TDP)" if plan.tdp_w else "", "model")
        return cls(cpu, ram, plan.method, cc.version)

    def start(self) -> None:
        self.cpu.start()  # RAPL: the first counter reading; load: the CPU-times baseline
        self.ram.start()

    def read(self, dt_s: float) -> HostReading:
        cpu_p, cpu_e = self.cpu.measure_power_and_energy(last_duration=dt_s)
        ram_p, ram_e = self.ram.measure_power_and_energy(last_duration=dt_s)
        return HostReading(
            float(cpu_p.W), float(cpu_e.kWh) * J_PER_KWH,  # codecarbon counts in kWh
            float(ram_p.W), float(ram_e.kWh) * J_PER_KWH,
        )


COLUMNS = ("ts", "cpu_power_w", "cpu_energy_j", "ram_power_w", "ram_energy_j",
           "cpu_method", "ram_method")


def build_host_energy_batch(columns: dict[str, list], source: HostEnergySource,
                            batch_id: str | None = None) -> dict:
    doc: dict[str, Any] = {
        "batch_id": batch_id or str(uuid.uuid4()),
        "agent_version": __version__,
        "sent_at": time.time(),
        "source": source.kind,
        "tracking_mode": TRACKING_MODE,
        "samples": columns,
    }
    if source.kind == "codecarbon":
        doc["codecarbon_version"] = source.version
    return doc


class HostEnergyChannel:
    """Reads CPU/RAM power every ``interval_s`` on its own thread; the agent's loop calls
    :meth:`seal` to spool what was read. ``factory`` builds the source on that thread."""

    name = "CPU/RAM energy"

    def __init__(
        self,
        factory: Callable[[], HostEnergySource],
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("host energy interval must be positive")
        self.factory = factory
        self.interval_s = interval_s
        self.clock = clock
        self.monotonic = monotonic
        self.source: HostEnergySource | None = None
        self.columns: dict[str, list] = {name: [] for name in COLUMNS}
        self._last_mono: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> bool:
        """Build and start the source; False (logged once) when that is impossible."""
        try:
            source = self.factory()
            source.start()
        except Exception as exc:  # ImportError, a codecarbon bug, unreadable /proc...
            log.warning("CPU/RAM energy is off: codecarbon could not start (%s)", exc)
            return False
        self.source = source
        self._last_mono = self.monotonic()
        return True

    def read_once(self) -> None:
        """One reading: the energy since the previous one, stamped with its end."""
        assert self.source is not None and self._last_mono is not None
        mono = self.monotonic()
        dt_s, self._last_mono = mono - self._last_mono, mono
        if dt_s <= 0:
            return
        r = self.source.read(dt_s)
        ts = self.clock()
        with self._lock:
            c = self.columns
            c["ts"].append(ts)
            c["cpu_power_w"].append(r.cpu_power_w)
            c["cpu_energy_j"].append(r.cpu_energy_j)
            c["ram_power_w"].append(r.ram_power_w)
            c["ram_energy_j"].append(r.ram_energy_j)
            c["cpu_method"].append(self.source.cpu_method)
            c["ram_method"].append(self.source.ram_method)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="greenops-host-energy",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if not self.open():
            return
        while not self._stop.wait(self.interval_s):
            try:
                self.read_once()
            except Exception:  # one failed reading must not end CPU/RAM accounting
                log.exception("CPU/RAM reading failed; continuing")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # Short: the thread may still be inside codecarbon's start-up; it is a daemon.
            self._thread.join(0.5)

    def seal(self, spool: Any) -> int:
        with self._lock:
            n = len(self.columns["ts"])
            if n == 0 or self.source is None:
                return 0
            columns, self.columns = self.columns, {name: [] for name in COLUMNS}
        doc = build_host_energy_batch(columns, self.source)
        spool.put(doc["batch_id"], wire.encode(doc), n, path=HOST_ENERGY_PATH)
        return 1
