"""Simulated GPUs, for demos and for running the whole pipeline on a host without a GPU.

Every batch from this source says ``"source": "simulated"`` so that nothing simulated can be
mistaken for a measurement. Readings are deterministic given the seed and the clock: the
workload phase and the noise are hashes of (seed, GPU, time slot), not a shared RNG, so two
agents with the same seed draw the same curves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from collectors.sources import GpuInfo, Reading


@dataclass(frozen=True)
class GpuModel:
    """What NVML would report about a real board, so a simulated fleet has real hardware."""

    name: str
    power_limit_w: float
    idle_power_w: float
    memory_total_mib: float
    idle_sm_clock_mhz: float
    max_sm_clock_mhz: float


# H100 SXM5 80GB (p5.48xlarge): 700 W board limit, boost 1,980 MHz.
H100_SXM = GpuModel("Simulated NVIDIA H100 80GB", 700.0, 70.0, 81559, 345.0, 1980.0)
# L40S 48GB (g6e instances): 350 W board limit, boost 2,520 MHz.
L40S = GpuModel("Simulated NVIDIA L40S", 350.0, 35.0, 46068, 210.0, 2520.0)
MODELS = {"h100": H100_SXM, "l40s": L40S}

NAME = H100_SXM.name
POWER_LIMIT_W = H100_SXM.power_limit_w
IDLE_POWER_W = H100_SXM.idle_power_w
MEMORY_TOTAL_MIB = H100_SXM.memory_total_mib
IDLE_SM_CLOCK_MHZ = H100_SXM.idle_sm_clock_mhz
MAX_SM_CLOCK_MHZ = H100_SXM.max_sm_clock_mhz
CLOCK_RANGE_MHZ = MAX_SM_CLOCK_MHZ - IDLE_SM_CLOCK_MHZ
PHASE_SECONDS = 120  # one workload phase lasts this long before it may change
_MASK = (1 << 64) - 1


def _unit(*parts: int) -> float:
    """A deterministic pseudo-random number in [0, 1) from integers (splitmix64 mixing)."""
    x = 0x9E3779B97F4A7C15
    for part in parts:
        x = (x ^ (part & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
        x ^= x >> 31
    return x / 2.0**64


unit = _unit  # public: other simulations (the server's demo) draw from the same hash


class SimulatedSource:
    kind = "simulated"

    def __init__(self, n: int, seed: int = 0, clock: Callable[[], float] = time.time,
                 model: GpuModel = H100_SXM) -> None:
        if n < 1:
            raise ValueError("a simulated host needs at least one GPU")
        self._n = n
        self.model = model
        self._seed = seed
        self._clock = clock
        # The energy counter integrates the simulated power between reads, so that it is
        # consistent with power by construction; it starts from an arbitrary "since driver
        # load" value, as the real counter does.
        self._energy_mj = [int(_unit(seed, i, 1) * 3.6e9) for i in range(n)]
        self._last: list[tuple[float, float] | None] = [None] * n  # (time, power_w)

    def gpus(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=i,
                uuid=f"GPU-5151a7ed-{self._seed & 0xFFFF:04x}-{i:04x}-0000-000000000000",
                name=self.model.name,
                power_limit_w=self.model.power_limit_w,
                memory_total_mib=self.model.memory_total_mib,
                max_sm_clock_mhz=self.model.max_sm_clock_mhz,
            )
            for i in range(self._n)
        ]

    def phase(self, index: int, t: float) -> str:
        slot = int(t // PHASE_SECONDS)
        u = _unit(self._seed, index, slot, 2)
        return "idle" if u < 0.3 else "training" if u < 0.7 else "inference"

    def utilisation(self, index: int, t: float) -> float:
        phase = self.phase(index, t)
        second = int(t)
        noise = _unit(self._seed, index, second, 3)
        if phase == "idle":
            return 5.0 * noise
        if phase == "training":
            return 85.0 + 15.0 * noise
        # Inference: requests arrive in bursts of a few seconds with quiet gaps between.
        burst = _unit(self._seed, index, second // 3, 4) < 0.55
        return 55.0 + 40.0 * noise if burst else 2.0 + 8.0 * noise

    def read(self, index: int) -> Reading:
        t = self._clock()
        util = self.utilisation(index, t)
        jitter = _unit(self._seed, index, int(t * 10), 5) - 0.5  # +-0.5, per 100 ms
        m = self.model
        power = m.idle_power_w + (m.power_limit_w - m.idle_power_w) * (util / 100.0) + 8.0 * jitter
        last = self._last[index]
        if last is not None and t > last[0]:
            self._energy_mj[index] += int((last[1] + power) / 2.0 * (t - last[0]) * 1000.0)
        self._last[index] = (t, power)
        phase = self.phase(index, t)
        # Memory in use per phase on an 80 GB H100, scaled to the board's memory.
        mem_h100 = {"idle": 600.0, "training": 71000.0, "inference": 32000.0}[phase]
        mem_base = mem_h100 * m.memory_total_mib / H100_SXM.memory_total_mib
        return Reading(
            util_pct=round(util, 1),
            mem_used_mib=mem_base + 400.0 * jitter,
            power_w=round(power, 3),
            energy_mj=self._energy_mj[index],
            temp_c=round(31.0 + 0.075 * power + 2.0 * jitter, 1),  # follows power
            sm_clock_mhz=float(round(m.idle_sm_clock_mhz + min(1.0, util / 80)
                                     * (m.max_sm_clock_mhz - m.idle_sm_clock_mhz))),
        )

    def close(self) -> None:
        pass
