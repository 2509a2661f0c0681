"""Energy per sample interval: from NVML's energy counter when it can be trusted, else power.

``energy_j`` of a sample is the energy the GPU used since that GPU's previous sample, so
summing ``energy_j`` over any window gives the window's energy without the server having to
pair up samples. The rules, in order:

1. First sample of a GPU: there is no interval, so ``energy_j`` and the method are None.
2. ``"counter"``: both readings have the NVML total-energy counter (mJ), it did not go down
   (a decrease means the driver was reloaded or the GPU reset, which zeroes it) and the delta
   is *plausible*. Energy = (counter - previous counter) / 1000. Plausible: at most the GPU's
   power limit x dt x ``PLAUSIBLE_MARGIN`` (boards briefly exceed their limit; the margin
   covers that, and timing jitter), whatever the gap -- a short stall of sampling (a slow
   NVML call, a busy host) loses nothing, because the counter kept counting through it. A
   delta above that bound is a counter that jumped, not energy. Without a known power limit
   the counter is trusted only over gaps up to ``max_gap_s``, as before.
3. ``"power"``: otherwise, if power is known: trapezoid (average of the two power readings,
   or the current one alone if the previous is missing) x dt, where dt is capped at
   ``max_gap_s``. Over a longer gap (agent stopped, host suspended) without a plausible
   counter we do not know what the GPU did, so only the capped span next to the current
   sample is counted; the rest of the gap stays a gap rather than an invented figure.
4. Neither: None.
"""

from __future__ import annotations

COUNTER = "counter"
POWER = "power"
# A counter delta up to the power limit x dt x this is energy; above it, a glitch.
PLAUSIBLE_MARGIN = 1.2
# Beyond this gap a counter delta is not used even when plausible: a driver reload in between
# would zero the counter, and a counter that has since climbed past its old value hides that.
MAX_COUNTER_GAP_S = 3600.0


def interval_energy(
    dt_s: float,
    prev_counter_mj: int | None,
    counter_mj: int | None,
    prev_power_w: float | None,
    power_w: float | None,
    max_gap_s: float,
    power_limit_w: float | None = None,
) -> tuple[float | None, str | None]:
    """Energy in joules over one interval of ``dt_s`` seconds, and how it was obtained."""
    if dt_s <= 0:
        return None, None  # not a forward interval (cannot happen with a monotonic clock)
    if counter_mj is not None and prev_counter_mj is not None and counter_mj >= prev_counter_mj:
        delta_j = (counter_mj - prev_counter_mj) / 1000.0
        if power_limit_w:
            if dt_s <= MAX_COUNTER_GAP_S and delta_j <= power_limit_w * dt_s * PLAUSIBLE_MARGIN:
                return delta_j, COUNTER
        elif dt_s <= max_gap_s:
            return delta_j, COUNTER
    if power_w is None:
        return None, None
    average_w = power_w if prev_power_w is None else (prev_power_w + power_w) / 2.0
    return average_w * min(dt_s, max_gap_s), POWER


class EnergyAccountant:
    """Keeps each GPU's previous reading and turns readings into interval energy."""

    __slots__ = ("max_gap_s", "power_limit_w", "_prev")

    def __init__(self, max_gap_s: float, power_limit_w: dict[int, float | None] | None = None
                 ) -> None:
        self.max_gap_s = max_gap_s
        self.power_limit_w = dict(power_limit_w or {})  # GPU index -> NVML power limit, W
        self._prev: dict[int, tuple[float, int | None, float | None]] = {}

    def update(
        self, gpu_index: int, mono_s: float, counter_mj: int | None, power_w: float | None
    ) -> tuple[float | None, str | None]:
        """``mono_s`` is a monotonic clock reading: wall-clock jumps must not skew dt."""
        prev = self._prev.get(gpu_index)
        self._prev[gpu_index] = (mono_s, counter_mj, power_w)
        if prev is None:
            return None, None
        return interval_energy(
            mono_s - prev[0], prev[1], counter_mj, prev[2], power_w, self.max_gap_s,
            self.power_limit_w.get(gpu_index),
        )
