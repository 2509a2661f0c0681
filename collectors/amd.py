"""AMD Instinct GPUs through the ``amd-smi`` CLI (ROCm's AMD SMI), ``device_source = "amd"``.

What is read, per GPU, from ``amd-smi metric --json`` (ROCm 6.x prints a JSON array with one
object per GPU; amd-smi 25.x and later wrap the same array as ``{"gpu_data": [...]}``). Each
figure is an object ``{"value": ..., "unit": ...}``; a figure the GPU does not report is the
string ``"N/A"`` (older releases), or is left out: both become null here, never 0.

* ``usage.gfx_activity`` (%) -> utilisation; ``usage.umc_activity`` (%, the memory
  controller) -> memory utilisation.
* ``power.socket_power`` (W; MI300's whole-socket figure, older boards' average package power)
  -> power.
* ``energy.total_energy_consumption`` -> the energy counter. amd-smi prints the firmware's
  energy accumulator times its counter resolution (``amdsmi_get_energy_count``: an integer
  count of ~15.3 uJ steps on MI200/MI300) already converted, in J; it is kept here as integer
  mJ like NVML's counter (15.3 uJ is well below 1 mJ, so nothing of the counter's resolution
  is lost at the agent's one-second steps). The accumulator starts again at zero when the
  driver reloads or the GPU resets, and the 32-bit accumulators of older SMU firmware wrap;
  either way the figure goes down, and that interval falls back to integrated power
  (collectors/energy.py), labelled "power".
* ``mem_usage.used_vram`` (amd-smi says MB but divides bytes by 1024 x 1024: MiB).
* ``temperature.hotspot`` (junction), else ``edge`` (MI300 reports no edge sensor) in C.
* ``clock.gfx_N.clk`` (MHz; MI300X has one per XCD, averaged) and ``clock.mem_0.clk``.

Static facts (model, power cap, VRAM size) come once from ``amd-smi static --json``
(``asic.market_name``, ``limit.max_power`` or ``limit.socket_power``, ``vram.size``), and the
UUID from ``amd-smi list --json``. Every call has a timeout; a failed, truncated or garbled
answer gives a tick without figures, never a crash.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from collectors.dcgm import BOUNDS, bounded
from collectors.sources import GpuInfo, Reading
from collectors.streamed import json_path

log = logging.getLogger(__name__)

Run = Callable[[Sequence[str], float], str]  # argv, timeout_s -> stdout
TIMEOUT_S = 10.0
# Unit factors to the stored unit (W, J, MiB, MHz); a unit not listed is not trusted.
_W = {"W": 1.0, "mW": 1e-3, "uW": 1e-6}
_J = {"J": 1.0, "mJ": 1e-3, "uJ": 1e-6}
_MIB = {"MB": 1.0, "MiB": 1.0, "GB": 1024.0, "GiB": 1024.0}
_MHZ = {"MHz": 1.0, "GHz": 1000.0}
_PCT = {"%": 1.0}
_C = {"C": 1.0, "\u00b0C": 1.0}


class AmdUnavailable(RuntimeError):
    """amd-smi cannot be run or finds no GPU."""


def run_cli(argv: Sequence[str], timeout_s: float) -> str:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AmdUnavailable(f"cannot run {' '.join(argv)} ({exc})") from exc
    if done.returncode != 0:
        raise AmdUnavailable(
            f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:200]}"
        )
    return done.stdout


def gpu_list(doc: Any) -> list[dict]:
    """The per-GPU objects of an amd-smi JSON answer, in either layout."""
    if isinstance(doc, dict):
        doc = doc.get("gpu_data")
    if not isinstance(doc, list):
        return []
    return [g for g in doc if isinstance(g, dict) and type(g.get("gpu")) is int]


def figure(node: Any, units: dict[str, float]) -> float | None:
    """``{"value": 12.5, "unit": "W"}`` (or a bare number) in the stored unit; None for
    "N/A", a missing figure, an unknown unit or a non-finite number."""
    unit = None
    if isinstance(node, dict):
        node, unit = node.get("value"), node.get("unit")
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    if unit is None:
        factor = 1.0  # bare numbers are in the field's documented unit
    elif unit in units:
        factor = units[unit]
    else:
        return None
    value = float(node) * factor
    return value if math.isfinite(value) else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def reading(g: dict) -> Reading:
    """One GPU's object of ``amd-smi metric --json`` as a Reading (energy in integer mJ)."""
    clocks = g.get("clock") if isinstance(g.get("clock"), dict) else {}
    gfx = [
        c
        for name, node in sorted(clocks.items())
        if name.startswith("gfx_") and (c := figure(json_path(node, "clk"), _MHZ)) is not None
    ]
    temp = figure(json_path(g, "temperature", "hotspot"), _C)
    if temp is None:
        temp = figure(json_path(g, "temperature", "edge"), _C)
    energy_j = figure(json_path(g, "energy", "total_energy_consumption"), _J)
    energy_mj = round(energy_j * 1000.0) if energy_j is not None and energy_j >= 0 else None
    if energy_mj is not None and energy_mj > BOUNDS["energy_mj"][1]:
        energy_mj = None
    return Reading(
        bounded("util_pct", figure(json_path(g, "usage", "gfx_activity"), _PCT)),
        bounded("mem_used_mib", figure(json_path(g, "mem_usage", "used_vram"), _MIB)),
        bounded("power_w", figure(json_path(g, "power", "socket_power"), _W)),
        energy_mj,
        bounded("temp_c", temp),
        bounded("sm_clock_mhz", _mean(gfx)),
        mem_util_pct=bounded("mem_util_pct", figure(json_path(g, "usage", "umc_activity"), _PCT)),
        mem_clock_mhz=bounded("mem_clock_mhz", figure(json_path(clocks, "mem_0", "clk"), _MHZ)),
    )


def inventory(static: Any, listing: Any, metric: Any) -> list[GpuInfo]:
    """The GPUs from ``amd-smi static --json``, with UUIDs from ``amd-smi list --json`` and
    maximum clocks from a first ``metric`` answer. A GPU in ``metric`` but missing from
    ``static`` (a static call that failed) is still listed, by index."""
    uuids = {g["gpu"]: g.get("uuid") for g in gpu_list(listing)}
    statics = {g["gpu"]: g for g in gpu_list(static)}
    metrics = {g["gpu"]: g for g in gpu_list(metric)}
    out = []
    for index in sorted(set(statics) | set(metrics)):
        s, m = statics.get(index, {}), metrics.get(index, {})
        name = json_path(s, "asic", "market_name")
        limit = figure(json_path(s, "limit", "max_power"), _W)
        if limit is None:
            limit = figure(json_path(s, "limit", "socket_power"), _W)
        uuid = uuids.get(index)
        out.append(
            GpuInfo(
                index=index,
                uuid=uuid if isinstance(uuid, str) and uuid else f"amd-gpu-{index}",
                name=name if isinstance(name, str) and name else "AMD GPU",
                power_limit_w=bounded("power_limit_w", limit),
                memory_total_mib=_int(figure(json_path(s, "vram", "size"), _MIB)),
                max_sm_clock_mhz=figure(json_path(m, "clock", "gfx_0", "max_clk"), _MHZ),
                max_mem_clock_mhz=figure(json_path(m, "clock", "mem_0", "max_clk"), _MHZ),
                kind="gpu",
                vendor="amd",
            )
        )
    return out


def _int(value: float | None) -> int | None:
    return int(value) if value is not None and 0 <= value < 1e7 else None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:  # truncated or garbled: amd-smi killed mid-write, a warning on stdout
        return None


class AmdSmiSource:
    """Reads AMD GPUs with ``amd-smi``. ``run`` runs one command (tests pass canned output)."""

    kind = "amd-smi"

    def __init__(
        self, run: Run = run_cli, binary: str = "amd-smi", timeout_s: float = TIMEOUT_S
    ) -> None:
        self._run, self._bin, self._timeout = run, binary, timeout_s
        metric = self._fetch("metric")
        if not gpu_list(metric):
            raise AmdUnavailable(f"{binary} metric --json listed no GPU")
        static, listing = self._fetch("static"), self._fetch("list")
        self._gpus = inventory(static, listing, metric)
        self._latest = {g["gpu"]: g for g in gpu_list(metric)}
        self._served: set[int] = set()

    def _fetch(self, command: str) -> Any:
        try:
            return _json(self._run([self._bin, command, "--json"], self._timeout))
        except AmdUnavailable as exc:
            if command == "metric" and not hasattr(self, "_gpus"):
                raise
            log.warning("%s", exc)
            return None

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def read(self, index: int) -> Reading | None:
        # One amd-smi call answers for every GPU: a GPU read a second time means a new tick.
        if index in self._served:
            self._latest = {g["gpu"]: g for g in gpu_list(self._fetch("metric"))}
            self._served.clear()
        self._served.add(index)
        g = self._latest.get(index)
        return reading(g) if g is not None else None

    def close(self) -> None:
        pass
