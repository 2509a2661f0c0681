"""NVIDIA Jetson modules through ``tegrastats``, ``device_source = "jetson"``.

A Jetson is one system-on-chip: the GPU shares the module's power rails and its RAM, so the
agent reports the module as one device (index 0, kind "edge-soc"). tegrastats prints one line
per interval (``--interval`` ms); its layout differs by JetPack release:

* Orin (JetPack 5/6): a timestamp first, rails with units, current/average:
  ``12-04-2026 16:45:01 RAM 2448/62840MB (lfb 14205x4MB) ... GR3D_FREQ 0%@[305,305] ...
  gpu@41.5C ... VDD_GPU_SOC 3187mW/3187mW VDD_CPU_CV 796mW/796mW VIN_SYS_5V0 4038mW/4038mW``
* Xavier (JetPack 4.x): ``GR3D_FREQ 0%@318``, rails without a unit: ``GPU 0/0 CPU 311/311``.
* Nano / TX1 / TX2 (JetPack 4.x): ``GR3D_FREQ 0%`` or ``0%@76``, ``POM_5V_IN 2086/2086
  POM_5V_GPU 0/0 POM_5V_CPU 284/284`` (mW, unit omitted).

Read per line: ``GR3D_FREQ`` % (the GPU's busy share; on Orin one figure per GPC cluster in
the brackets is the clock, averaged) -> utilisation and clock; ``RAM used/total MB`` -> memory
(shared with the CPU: what the whole module holds); ``gpu@T`` / ``GPU@T`` -> temperature
(-256 C is tegrastats' "no reading"); power = the module input rail where the board has one
(``VDD_IN`` on Orin NX/Nano, ``POM_5V_IN`` on Nano/TX2), else the sum of the rails it prints
(Orin AGX: VDD_GPU_SOC + VDD_CPU_CV + VIN_SYS_5V0 + VDDQ_VDD2_1V8AO...), each its *current*
figure in mW (the second figure is tegrastats' running average). Jetson has no energy
counter: energy is integrated power, labelled "power".
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from collectors.dcgm import bounded
from collectors.sources import GpuInfo, Reading
from collectors.streamed import LineStream

log = logging.getLogger(__name__)

MODEL_PATH = Path("/proc/device-tree/model")  # "NVIDIA Jetson AGX Orin Developer Kit"
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")  # a whole-module input where the board measures one
# A rail: NAME cur[mW]/avg[mW]. Names are upper case with digits and underscores.
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*[A-Z0-9]) (\d+)(mW)?/(\d+)(mW)?(?=\s|$)")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB\b")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_TEMP = re.compile(r"\b(?:GPU|gpu)@(-?\d+(?:\.\d+)?)C\b")
NOT_RAILS = {"RAM", "SWAP", "IRAM", "EMC_FREQ", "GR3D_FREQ"}


class JetsonUnavailable(RuntimeError):
    """tegrastats cannot be run or prints nothing readable."""


def parse_line(line: str) -> Reading | None:
    """One tegrastats line -> a Reading; None for a line without RAM and GR3D_FREQ (garbage,
    an error message, a line cut short)."""
    ram, gr3d, temp = _RAM.search(line), _GR3D.search(line), _TEMP.search(line)
    rails = {
        m.group(1): int(m.group(2))
        for m in _RAIL.finditer(line)
        if m.group(1) not in NOT_RAILS and (m.group(3) == m.group(5))
    }
    if ram is None or gr3d is None:  # every release prints both: a line without is cut short
        return None
    util = float(gr3d.group(1))
    clocks = [int(c) for c in (gr3d.group(2) or "").split(",") if c.isdigit()]
    clock = sum(clocks) / len(clocks) if clocks else None
    power_mw = next((rails[r] for r in INPUT_RAILS if r in rails), None)
    if power_mw is None and rails:
        power_mw = sum(rails.values())
    t = float(temp.group(1)) if temp is not None else None
    return Reading(
        bounded("util_pct", util),
        bounded("mem_used_mib", float(ram.group(1))),
        bounded("power_w", power_mw / 1000.0 if power_mw is not None else None),
        None,  # no energy counter on Jetson
        bounded("temp_c", t if t is not None and t > -256 else None),
        bounded("sm_clock_mhz", clock),
    )


def ram_total_mib(line: str) -> int | None:
    m = _RAM.search(line)
    return int(m.group(2)) if m else None


def board_model(path: Path = MODEL_PATH) -> str:
    """The module's name from the device tree, without the carrier board's suffix."""
    try:
        text = path.read_bytes().rstrip(b"\x00").decode("utf-8", "replace").strip()
    except OSError:
        return "NVIDIA Jetson"
    text = text.removesuffix(" Developer Kit").strip()
    return text or "NVIDIA Jetson"


class JetsonSource:
    """One Jetson module from tegrastats lines. ``feed`` takes one line (the reader thread
    calls it; tests call it with fixture lines)."""

    kind = "tegrastats"

    def __init__(
        self,
        argv: Sequence[str] | None = None,
        model: str | None = None,
        first_line_s: float = 10.0,
    ) -> None:
        self._lock = threading.Lock()
        self._fresh: Reading | None = None
        self._model = model or board_model()
        self._ram_total: int | None = None
        self._first = threading.Event()
        self._stream = None
        if argv is not None:
            self._stream = LineStream(argv, self.feed)
            if not self._first.wait(first_line_s):
                self.close()
                raise JetsonUnavailable(
                    f"{argv[0]} printed no readable line within {first_line_s:.0f} s"
                )

    def feed(self, line: str) -> bool:
        r = parse_line(line)
        if r is None:
            return False
        with self._lock:
            self._fresh = r
            if self._ram_total is None:
                self._ram_total = ram_total_mib(line)
        self._first.set()
        return True

    def gpus(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=0,
                uuid="jetson-0",
                name=self._model,
                power_limit_w=None,
                memory_total_mib=self._ram_total,
                kind="edge-soc",
                vendor="nvidia",
            )
        ]

    def read(self, index: int) -> Reading | None:
        with self._lock:
            r, self._fresh = self._fresh, None
        return r

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
