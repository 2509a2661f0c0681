"""Simulated CI runners, to measure the efficiency gate's error rates (SIMULATED data).

A gate on a shared CI runner sees noise that has nothing to do with the code: each run's
energy per inference scatters (a side's repeats spread by up to ~25 %), the runner drifts
slowly (thermals, a neighbour's job starting), and now and then one run is an outlier
(throttling, a preempted core). ``simulate`` draws many gates with such noise, vectorised with
numpy, and puts each one through the real gate (collectors.bench_gate.compare), so the rates it
returns are those of the code the agent runs.

The noise model, per simulated gate (all multiplicative, on the log scale):

* per-run scatter: normal with a standard deviation drawn per gate, uniform on
  [sigma_min, sigma_max] = [2 %, 8 %] (at 8 % the 10 repeats of a side span ~25 %);
* drift: a straight line over the gate's runs whose total size is uniform on +/- drift_max
  (30 %), plus a random walk of walk_sd (1 %) a run;
* outliers: each run with probability outlier_rate (3 %) is slower by a factor uniform on
  [1.3, 2.0].

Like the agent, a gate still undecided after its first pairs (an estimate beyond the tolerance
but not significantly) runs more pairs, a few at a time, up to a cap.

Interleaved gates run base and head alternately, pair i in the order AB for even i and BA for
odd i, as ``greenops-agent bench`` does; a stored baseline ("crosses time") is the base's
runs first and the head's after them, with the drift continuing in between.

This module needs numpy (the server has it); the agent never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectors import bench_gate as gate

# The agent's defaults (collectors/bench.py): 10 pairs, 5 more at a time while undecided, 20 at
# most.
DEFAULT_PAIRS = 10
DEFAULT_STEP = 5
DEFAULT_MAX_PAIRS = 20


@dataclass(frozen=True)
class Noise:
    sigma_min: float = 0.02
    sigma_max: float = 0.08
    drift_max: float = 0.30
    walk_sd: float = 0.01
    outlier_rate: float = 0.03
    outlier_min: float = 1.3
    outlier_max: float = 2.0


@dataclass(frozen=True)
class Rates:
    change_pct: float
    gates: int
    pairs: int
    interleaved: bool
    fail: float  # share of gates that failed
    inconclusive: float
    passed: float
    mean_pairs: float  # pairs run on average (more only where the first ones did not decide)


def runner_noise(rng: np.random.Generator, gates: int, runs: int, noise: Noise) -> np.ndarray:
    """Log-scale noise of ``runs`` consecutive runs for each of ``gates`` gates."""
    t = np.arange(runs) / max(runs - 1, 1)
    sigma = rng.uniform(noise.sigma_min, noise.sigma_max, size=(gates, 1))
    scatter = rng.standard_normal((gates, runs)) * sigma
    drift = rng.uniform(-noise.drift_max, noise.drift_max, size=(gates, 1)) * t
    walk = np.cumsum(rng.standard_normal((gates, runs)) * noise.walk_sd, axis=1)
    outlier = rng.random((gates, runs)) < noise.outlier_rate
    slow = np.log(rng.uniform(noise.outlier_min, noise.outlier_max, size=(gates, runs)))
    return scatter + np.log1p(drift) + walk + np.where(outlier, slow, 0.0)


def simulated_sides(rng: np.random.Generator, gates: int, pairs: int, change: float,
                    interleaved: bool, noise: Noise) -> tuple[np.ndarray, np.ndarray]:
    """Energy per inference (J) of the base and head repeats: arrays (gates, pairs)."""
    log_noise = runner_noise(rng, gates, 2 * pairs, noise)
    if interleaved:
        i = np.arange(pairs)
        base_at = np.where(i % 2 == 0, 2 * i, 2 * i + 1)  # AB, BA, AB, ...
        head_at = np.where(i % 2 == 0, 2 * i + 1, 2 * i)
    else:
        base_at = np.arange(pairs)  # the stored baseline first, this run after it
        head_at = np.arange(pairs, 2 * pairs)
    true_j = 0.1  # 0.1 J per inference; only ratios matter
    base = true_j * np.exp(log_noise[:, base_at])
    head = true_j * (1.0 + change) * np.exp(log_noise[:, head_at])
    return base, head


def simulate(change_pct: float, gates: int = 400, pairs: int = DEFAULT_PAIRS,
             max_pairs: int = DEFAULT_MAX_PAIRS, step: int = DEFAULT_STEP,
             interleaved: bool = True, seed: int = 36, noise: Noise = Noise(),
             tolerance_pct: float = 5.0, alpha: float = gate.DEFAULT_ALPHA) -> Rates:
    """How often the gate fails, is inconclusive or passes for a true change of
    ``change_pct`` % in energy per inference (SIMULATED runners, seeded). Like the agent, a
    interleaved gate that is undecided after ``pairs`` pairs runs ``step`` more, up to
    ``max_pairs`` (a stored baseline has the repeats it has)."""
    rng = np.random.default_rng(seed)
    base, head = simulated_sides(rng, gates, max(pairs, max_pairs), change_pct / 100.0,
                                 interleaved, noise)
    counts = {gate.FAIL: 0, gate.INCONCLUSIVE: 0, gate.PASS: 0}
    key = gate.PRIMARY
    used = 0
    for b, h in zip(base.tolist(), head.tolist(), strict=True):
        n = pairs
        while True:
            result = gate.compare({key: b[:n]}, {key: h[:n]}, "simulated",
                                  {key: tolerance_pct}, alpha, paired=interleaved)
            if n >= max_pairs or not interleaved or not gate.wants_more_pairs(result):
                break
            n = min(max_pairs, n + step)
        counts[result.verdict] += 1
        used += n
    return Rates(change_pct, gates, pairs, interleaved, counts[gate.FAIL] / gates,
                 counts[gate.INCONCLUSIVE] / gates, counts[gate.PASS] / gates, used / gates)
