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

Across an agent restart (crash, SIGKILL, upgrade, ``systemctl restart``) the agent carries each
GPU's last counter reading over (persisted in the spool with the same transaction as the sample
it came from), so the first interval after the restart covers the gap:

5. ``"counter_gap"``: the first sample of a GPU after a restart, when the carried reading is
   from the same boot and the same GPU, the counter did not go down (a decrease means a driver
   reload or GPU reset: no gap energy, as for a first sample), the gap is at most
   ``MAX_COUNTER_GAP_S`` and the delta is plausible for the GPU's power limit as in rule 2.
   Never power: while the agent was down nobody watched the power, so without a trustworthy
   counter the gap stays a gap (None) and the sample is a first sample.
"""

from __future__ import annotations

COUNTER = "counter"
POWER = "power"
COUNTER_GAP = "counter_gap"  # a counter delta across an agent restart (rule 5)
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
            if _plausible(dt_s, delta_j, power_limit_w):
                return delta_j, COUNTER
        elif dt_s <= max_gap_s:
            return delta_j, COUNTER
    if power_w is None:
        return None, None
    average_w = power_w if prev_power_w is None else (prev_power_w + power_w) / 2.0
    return average_w * min(dt_s, max_gap_s), POWER


def _plausible(dt_s: float, delta_j: float, power_limit_w: float) -> bool:
    return dt_s <= MAX_COUNTER_GAP_S and delta_j <= power_limit_w * dt_s * PLAUSIBLE_MARGIN


def gap_energy(
    dt_s: float, prev_counter_mj: int | None, counter_mj: int | None, power_limit_w: float | None
) -> float | None:
    """Joules between a reading carried over a restart and the first one after it (rule 5), or
    None: no counter, a counter that went down, no power limit to judge plausibility by, a gap
    over MAX_COUNTER_GAP_S or a delta above power limit x gap x PLAUSIBLE_MARGIN."""
    if (dt_s <= 0 or counter_mj is None or prev_counter_mj is None
            or counter_mj < prev_counter_mj or not power_limit_w):
        return None
    delta_j = (counter_mj - prev_counter_mj) / 1000.0
    return delta_j if _plausible(dt_s, delta_j, power_limit_w) else None


class EnergyAccountant:
    """Keeps each GPU's previous reading and turns readings into interval energy."""

    __slots__ = ("max_gap_s", "power_limit_w", "_prev", "_carried")

    def __init__(self, max_gap_s: float, power_limit_w: dict[int, float | None] | None = None
                 ) -> None:
        self.max_gap_s = max_gap_s
        self.power_limit_w = dict(power_limit_w or {})  # GPU index -> NVML power limit, W
        self._prev: dict[int, tuple[float, int | None, float | None]] = {}
        # GPU index -> (monotonic time, counter mJ) of the last reading before a restart
        self._carried: dict[int, tuple[float, int]] = {}

    def carry(self, gpu_index: int, mono_s: float, counter_mj: int) -> None:
        """The GPU's last reading of the previous run, with its time on this run's monotonic
        clock: the GPU's next interval is the gap since then (rule 5)."""
        self._carried[gpu_index] = (mono_s, counter_mj)

    def last_readings(self) -> dict[int, tuple[float, int | None, float | None]]:
        """GPU index -> (monotonic time, counter mJ, power W) of its latest reading."""
        return self._prev

    def update(
        self, gpu_index: int, mono_s: float, counter_mj: int | None, power_w: float | None
    ) -> tuple[float | None, str | None]:
        """``mono_s`` is a monotonic clock reading: wall-clock jumps must not skew dt."""
        prev = self._prev.get(gpu_index)
        self._prev[gpu_index] = (mono_s, counter_mj, power_w)
        if prev is None:
            carried = self._carried.pop(gpu_index, None) if self._carried else None
            if carried is not None:
                gap_j = gap_energy(mono_s - carried[0], carried[1], counter_mj,
                                   self.power_limit_w.get(gpu_index))
                if gap_j is not None:
                    return gap_j, COUNTER_GAP
            return None, None
        return interval_energy(
            mono_s - prev[0], prev[1], counter_mj, prev[2], power_w, self.max_gap_s,
            self.power_limit_w.get(gpu_index),
        )
