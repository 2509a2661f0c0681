"""What the host around the GPUs is doing: CPU utilisation, network and disk bytes per second,
and which processes (or Kubernetes pods) hold each GPU -- a small stream beside the GPU samples
(``POST /api/v1/host-samples``), so a GPU that waits on its input shows next to a saturated
NIC, disk or CPU.

Everything is read from /proc and /sys, standard library only (the agent does not depend on
psutil): each reading is the change of the kernel's cumulative counters since the previous
reading, divided by the monotonic time between them.

* CPU: /proc/stat's ``cpu`` line; busy = all jiffies but idle and iowait (guest time is already
  inside user/nice), utilisation = busy / all over the interval, in % of all CPUs.
* Network: /proc/net/dev's byte counters, summed over physical interfaces (those with a
  ``/sys/class/net/<if>/device``), so a Kubernetes node's veth pairs and bridges do not count
  every byte twice; where /sys says nothing, every interface but ``lo``.
* Disk: /proc/diskstats' sectors read and written (512 bytes each, whatever the device's block
  size) of whole physical disks (``/sys/block/<dev>/device``): partitions, device-mapper, md,
  loop and zram devices sit on top of those and would count the same bytes again.

A counter that went down (an interface or disk removed, a wrap) gives no figure for that
interval -- unknown, not 0. The first reading only sets the baseline.

GPU processes come from the GPU source at a lower rate (every ``PROCESS_EVERY`` readings):
NVML's compute processes with their GPU memory, and, from dcgm-exporter, the pods a GPU is
attributed to.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from collectors import __version__
from collectors import batch as wire
from collectors.every import run_every

log = logging.getLogger(__name__)

HOST_SAMPLES_PATH = "/api/v1/host-samples"
DEFAULT_INTERVAL_S = 15.0
PROCESS_EVERY = 4  # readings between process snapshots: once a minute at the default rate
SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors (Documentation/admin-guide/iostats)
COLUMNS = ("ts", "interval_s", "cpu_util_pct", "net_rx_bytes_s", "net_tx_bytes_s",
           "disk_read_bytes_s", "disk_write_bytes_s")
MAX_PROCESSES = 512  # per snapshot; the server refuses more


class Counters(NamedTuple):
    """The kernel's cumulative counters at one moment; None where unreadable."""

    cpu_busy: int | None
    cpu_total: int | None
    net_rx: int | None
    net_tx: int | None
    disk_read: int | None
    disk_write: int | None


def _cpu(proc: Path) -> tuple[int | None, int | None]:
    try:
        with (proc / "stat").open() as fh:
            first = fh.readline().split()
    except OSError:
        return None, None
    if not first or first[0] != "cpu":
        return None, None
    # user nice system idle iowait irq softirq steal (guest, guest_nice are inside user, nice)
    jiffies = [int(x) for x in first[1:9]]
    total = sum(jiffies)
    idle = jiffies[3] + (jiffies[4] if len(jiffies) > 4 else 0)
    return total - idle, total


def _physical(sys_dir: Path, name: str) -> bool | None:
    """True/False when /sys says whether ``name`` has a backing device; None when /sys is not
    there to ask (then the caller falls back to its name rule)."""
    if not sys_dir.is_dir():
        return None
    return (sys_dir / name / "device").exists()


def _net(proc: Path, sys_net: Path) -> tuple[int | None, int | None]:
    try:
        lines = (proc / "net" / "dev").read_text().splitlines()[2:]
    except OSError:
        return None, None
    rx = tx = 0
    for line in lines:
        name, _, rest = line.partition(":")
        name = name.strip()
        fields = rest.split()
        if len(fields) < 9 or name == "lo":
            continue
        if _physical(sys_net, name) is False:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


def _disk(proc: Path, sys_block: Path) -> tuple[int | None, int | None]:
    try:
        lines = (proc / "diskstats").read_text().splitlines()
    except OSError:
        return None, None
    read = written = 0
    for line in lines:
        f = line.split()
        if len(f) < 10:
            continue
        name = f[2]
        physical = _physical(sys_block, name)
        if physical is False or (physical is None and name.startswith(
                ("loop", "ram", "zram", "dm-", "md", "sr"))):
            continue
        read += int(f[5]) * SECTOR_BYTES
        written += int(f[9]) * SECTOR_BYTES
    return read, written


def read_counters(proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> Counters:
    busy, total = _cpu(proc)
    rx, tx = _net(proc, sys / "class" / "net")
    rd, wr = _disk(proc, sys / "block")
    return Counters(busy, total, rx, tx, rd, wr)


def _rate(cur: int | None, prev: int | None, dt: float) -> float | None:
    if cur is None or prev is None or cur < prev:
        return None  # unreadable, or the counter went down (device removed, wrap)
    return (cur - prev) / dt


def rates(prev: Counters, cur: Counters, dt_s: float) -> dict[str, float | None]:
    """One reading: utilisation and bytes/s over the ``dt_s`` seconds between two counters."""
    cpu = None
    if None not in (prev.cpu_total, cur.cpu_total, prev.cpu_busy, cur.cpu_busy):
        d_total = cur.cpu_total - prev.cpu_total  # type: ignore[operator]
        d_busy = cur.cpu_busy - prev.cpu_busy  # type: ignore[operator]
        if d_total > 0 and 0 <= d_busy <= d_total:
            cpu = 100.0 * d_busy / d_total
    return {
        "cpu_util_pct": cpu,
        "net_rx_bytes_s": _rate(cur.net_rx, prev.net_rx, dt_s),
        "net_tx_bytes_s": _rate(cur.net_tx, prev.net_tx, dt_s),
        "disk_read_bytes_s": _rate(cur.disk_read, prev.disk_read, dt_s),
        "disk_write_bytes_s": _rate(cur.disk_write, prev.disk_write, dt_s),
    }


@dataclass
class GpuProcess:
    gpu_index: int
    pid: int | None = None
    name: str | None = None
    used_memory_mib: float | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None


def process_name(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The command name of a pid, where this agent can see it (not from another PID
    namespace: a containerised agent sees only its own)."""
    try:
        return (proc / str(pid) / "comm").read_text().strip()[:128] or None
    except OSError:
        return None


def gpu_processes(source: Any, indexes: list[int], proc: Path = Path("/proc")
                  ) -> list[GpuProcess] | None:
    """Who holds each GPU, from what the source can tell: NVML's compute processes
    (``processes(index)``) and dcgm-exporter's pods (``pods()``). None: the source knows
    neither."""
    out: list[GpuProcess] = []
    known = False
    by_pid = getattr(source, "processes", None)
    if by_pid is None and hasattr(source, "source"):  # the DCGM overlay wraps NVML
        by_pid = getattr(source.source, "processes", None)
    if by_pid is not None:
        for index in indexes:
            procs = by_pid(index)
            if procs is None:
                continue
            known = True
            out.extend(GpuProcess(index, pid, process_name(pid, proc), used)
                       for pid, used in procs)
    pods = getattr(source, "pods", None)
    if pods is not None:
        known = True
        for index, entries in sorted(pods().items()):
            out.extend(GpuProcess(index, namespace=ns or None, pod=pod, container=ctr or None)
                       for ns, pod, ctr in sorted(entries))
    return out[:MAX_PROCESSES] if known else None


def build_host_batch(columns: dict[str, list], processes: dict | None,
                     batch_id: str | None = None) -> dict:
    doc: dict[str, Any] = {"batch_id": batch_id or str(uuid.uuid4()),
                           "agent_version": __version__, "sent_at": time.time(),
                           "samples": columns}
    if processes is not None:
        doc["processes"] = processes
    return doc


class HostActivityChannel:
    """Reads the host's counters every ``interval_s`` on its own thread and, every
    ``PROCESS_EVERY`` readings, who holds each GPU; :meth:`seal` spools what was read."""

    name = "host activity"

    def __init__(
        self,
        read: Callable[[], Counters] = read_counters,
        interval_s: float = DEFAULT_INTERVAL_S,
        processes: Callable[[], list[GpuProcess] | None] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("host sample interval must be positive")
        self.read = read
        self.interval_s = interval_s
        self.processes = processes
        self.clock = clock
        self.monotonic = monotonic
        self.columns: dict[str, list] = {name: [] for name in COLUMNS}
        self.snapshot: dict | None = None
        self._prev: tuple[float, Counters] | None = None
        self._readings = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read_once(self) -> None:
        mono, counters = self.monotonic(), self.read()
        prev, self._prev = self._prev, (mono, counters)
        if self.processes is not None and self._readings % PROCESS_EVERY == 0:
            procs = self.processes()
            if procs is not None:
                snap = {"ts": self.clock(), "gpus": [p.__dict__ for p in procs]}
                with self._lock:
                    self.snapshot = snap
        self._readings += 1
        if prev is None or mono <= prev[0]:
            return  # the first reading only sets the baseline
        dt = mono - prev[0]
        row = rates(prev[1], counters, dt)
        ts = self.clock()
        with self._lock:
            c = self.columns
            c["ts"].append(ts)
            c["interval_s"].append(dt)
            for name, value in row.items():
                c[name].append(value)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="greenops-host-activity",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        run_every(self.interval_s, self._stop, self.read_once, "host activity reading")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def seal(self, spool: Any) -> int:
        with self._lock:
            n = len(self.columns["ts"])
            if n == 0:
                return 0  # a process snapshot waits for the next rows (the first minute)
            columns, self.columns = self.columns, {name: [] for name in COLUMNS}
            snapshot, self.snapshot = self.snapshot, None
        doc = build_host_batch(columns, snapshot)
        spool.put(doc["batch_id"], wire.encode(doc), n, path=HOST_SAMPLES_PATH)
        return 1
