"""AWS Inferentia and Trainium through ``neuron-monitor``, ``device_source = "neuron"``.

neuron-monitor (aws-neuron-tools) prints one JSON report per line, every period (5 s unless
its config file says otherwise). What is read, per Neuron device (the unit the agent reports,
as NVML reports a GPU; its NeuronCores are averaged):

* ``neuron_hardware_info``: ``neuron_device_type`` ("inferentia2", "trainium", "trainium2")
  -> the model, ``neuron_device_count``, ``neuroncore_per_device_count`` (physical cores),
  ``logical_neuroncore_config`` (Trn2's LNC=2 pairs two physical cores into one logical
  core: the cores the runtimes report are logical), ``neuron_device_memory_size`` (bytes).
* ``neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use``: per (logical)
  NeuronCore index, ``neuroncore_utilization`` in % over the period. Core ``c`` is on device
  ``c // cores_per_device``. A core no runtime reports is idle (0 %) while at least one
  runtime's counters arrived without error; with no runtime at all every core is idle.
  Utilisation of a device = mean over its cores.
* ``...report.memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage``:
  bytes per core by category, summed per device (MiB = bytes / 1024^2).
* Power: neuron-monitor's reports (as documented up to the 2.2x tools) carry no device power
  and Neuron devices have no energy counter. The Neuron driver's sysfs gives, per device,
  ``/sys/devices/virtual/neuron_device/neuron<N>/stats/power/utilization``:
  ``<status>,<unix time>,<min %>,<max %>,<avg %>`` -- power over the last minute as a share of
  the device's maximum power, refreshed every minute. With the device's maximum power
  configured (``device_max_power_w``; the driver does not publish it), power = avg % / 100 x
  that maximum, and energy is that power integrated (``energy_method`` "power"), never
  "counter". A status other than ``POWER_STATUS_VALID``, a figure older than
  ``POWER_MAX_AGE_S``, or no maximum configured: power and energy stay null (unknown, not 0).

A report that is not JSON (truncated by a killed pipe, a banner line) is skipped; a metric
group with a non-empty ``error`` contributes nothing.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from collectors.dcgm import bounded
from collectors.sources import GpuInfo, Reading
from collectors.streamed import LineStream, json_path

log = logging.getLogger(__name__)

MIB = 1024 * 1024
SYSFS_ROOT = Path("/sys/devices/virtual/neuron_device")
POWER_MAX_AGE_S = 180.0  # the driver refreshes the figure every minute; 3 missed: stale
MODELS = {  # neuron_device_type -> the model name the pages show
    "inferentia": "AWS Inferentia",
    "inferentia2": "AWS Inferentia2",
    "trainium": "AWS Trainium",
    "trainium1": "AWS Trainium",
    "trainium2": "AWS Trainium2",
}


class NeuronUnavailable(RuntimeError):
    """neuron-monitor cannot be run, or its first report lists no Neuron device."""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _ok(group: Any) -> bool:
    return isinstance(group, dict) and not group.get("error")


def _index(key: Any) -> int | None:
    if isinstance(key, int) and not isinstance(key, bool):
        return key if key >= 0 else None
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return None


class Hardware:
    """``neuron_hardware_info``: which devices there are and how cores map to them."""

    def __init__(self, info: Any) -> None:
        info = info if _ok(info) else {}
        count = _num(info.get("neuron_device_count"))
        cores = _num(info.get("neuroncore_per_device_count"))
        lnc = _num(info.get("logical_neuroncore_config")) or 1.0
        size = _num(info.get("neuron_device_memory_size"))
        self.devices = int(count) if count and 0 < count <= 64 else 0
        self.cores_per_device = max(1, int((cores or 1) // max(1.0, lnc)))
        device_type = str(info.get("neuron_device_type") or "").lower()
        self.model = MODELS.get(device_type, f"AWS Neuron {device_type}".strip())
        self.memory_total_mib = int(size // MIB) if size and size > 0 else None


def parse_report(doc: Any, hw: Hardware) -> dict[int, Reading]:
    """One neuron-monitor report -> a Reading per Neuron device."""
    if not isinstance(doc, dict) or hw.devices == 0:
        return {}
    util: dict[int, float] = {}
    mem: dict[int, float] = {}
    counted = any_mem = False
    runtimes = doc.get("neuron_runtime_data")
    for rt in runtimes if isinstance(runtimes, list) else []:
        report = rt.get("report") if isinstance(rt, dict) and not rt.get("error") else None
        if not isinstance(report, dict):
            continue
        counters = report.get("neuroncore_counters")
        if _ok(counters) and isinstance(counters.get("neuroncores_in_use"), dict):
            counted = True
            for key, core in counters["neuroncores_in_use"].items():
                c = _index(key)
                u = _num(core.get("neuroncore_utilization")) if isinstance(core, dict) else None
                if c is not None and u is not None and 0 <= u <= 100:
                    util[c] = util.get(c, 0.0) + u
        used = report.get("memory_used")
        per_core = (
            json_path(used, "neuron_runtime_used_bytes", "usage_breakdown",
                      "neuroncore_memory_usage")
            if _ok(used)
            else None
        )
        if isinstance(per_core, dict):
            any_mem = True
            for key, parts in per_core.items():
                c = _index(key)
                if c is None or not isinstance(parts, dict):
                    continue
                total = sum(v for v in map(_num, parts.values()) if v is not None and v >= 0)
                mem[c] = mem.get(c, 0.0) + total
    if runtimes == []:  # no Neuron application running: every core idle, no memory held
        counted = any_mem = True
    out = {}
    per = hw.cores_per_device
    for d in range(hw.devices):
        cores = range(d * per, (d + 1) * per)
        u = (sum(min(100.0, util.get(c, 0.0)) for c in cores) / per) if counted else None
        m = sum(mem.get(c, 0.0) for c in cores) / MIB if any_mem else None
        out[d] = Reading(
            bounded("util_pct", u),
            bounded("mem_used_mib", m),
            None,
            None,  # no energy counter: energy is integrated power, or unknown
            None,
            None,
        )
    return out


def sysfs_power_w(text: str, max_power_w: float, now_s: float) -> float | None:
    """Watts from one ``stats/power/utilization`` file: avg % of the maximum, or None for a
    status that is not valid, a malformed line or a figure older than POWER_MAX_AGE_S."""
    parts = text.strip().split(",")
    if len(parts) != 5 or parts[0] != "POWER_STATUS_VALID":
        return None
    try:
        ts, avg = int(parts[1]), float(parts[4])
    except ValueError:
        return None
    if not (math.isfinite(avg) and 0 <= avg <= 100) or not 0 <= now_s - ts <= POWER_MAX_AGE_S:
        return None
    return avg / 100.0 * max_power_w


class NeuronSource:
    """Neuron devices from neuron-monitor's reports. ``feed`` takes one line of its output
    (the reader thread calls it; tests call it with fixture lines)."""

    kind = "neuron-monitor"

    def __init__(
        self,
        argv: Sequence[str] | None = None,
        first_report_s: float = 30.0,
        max_power_w: float | None = None,
        sysfs_root: Path = SYSFS_ROOT,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._max_power_w = max_power_w
        self._sysfs = sysfs_root
        self._wall = wall
        self._lock = threading.Lock()
        self._fresh: dict[int, Reading] = {}
        self._hw: Hardware | None = None
        self._instance = ""
        self._first = threading.Event()
        self._stream = None
        if argv is not None:
            self._stream = LineStream(argv, self.feed)
            if not self._first.wait(first_report_s):
                self.close()
                raise NeuronUnavailable(
                    f"{argv[0]} printed no report with Neuron devices within {first_report_s:.0f} s"
                )

    def feed(self, line: str) -> bool:
        """Take one report line; False when it was skipped (not JSON, no hardware info)."""
        try:
            doc = json.loads(line)
        except ValueError:
            log.debug("neuron-monitor: a line that is not a JSON report skipped")
            return False
        if not isinstance(doc, dict):
            return False
        with self._lock:
            if self._hw is None or self._hw.devices == 0:
                self._hw = Hardware(doc.get("neuron_hardware_info"))
                self._instance = str(json_path(doc, "instance_info", "instance_id") or "")
            if self._hw.devices == 0:
                return False
            self._fresh = parse_report(doc, self._hw)
        self._first.set()
        return True

    def gpus(self) -> list[GpuInfo]:
        hw = self._hw
        if hw is None:
            return []
        prefix = self._instance or "neuron"
        return [
            GpuInfo(
                index=d,
                uuid=f"{prefix}-nd{d}",
                name=hw.model,
                power_limit_w=None,
                memory_total_mib=hw.memory_total_mib,
                kind="ai-asic",
                vendor="aws",
            )
            for d in range(hw.devices)
        ]

    def read(self, index: int) -> Reading | None:
        with self._lock:
            r = self._fresh.pop(index, None)
        if r is None or not self._max_power_w:
            return r
        try:
            text = (self._sysfs / f"neuron{index}" / "stats" / "power" / "utilization").read_text()
        except (OSError, UnicodeDecodeError):
            return r
        p = sysfs_power_w(text, self._max_power_w, self._wall())
        return r._replace(power_w=bounded("power_w", p))

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
