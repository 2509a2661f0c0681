"""Change points in a benchmark's history: E-Divisive means, as MongoDB's and DataStax's
performance CI use it to find the commit where a metric stepped.

Per series (one workload, one branch, one hardware), oldest run first:

1. For every split tau of a segment into x[:tau] and x[tau:kappa], the energy-distance
   statistic (Matteson & James 2014, with exponent 1; m = kappa - tau)

       Q(tau, kappa) = tau m / (tau + m) * ( 2/(tau m) * sum |x_i - x_j| across the split
                                             - mean |x_i - x_k| within the left part
                                             - mean |x_j - x_k| within the right part )

   is large when the two parts differ in distribution, whatever the shape of the noise; a
   split's score is its best kappa. Computed for all (tau, kappa) at once from prefix sums of
   the distance matrix.
2. The best split of the best segment is tested against ``permutations`` random reorderings
   of that segment (seeded: a page shows the same marks on every load); it is a change point
   when p = (1 + #{permuted max Q >= observed}) / (1 + permutations) < ``alpha``.
3. Repeat on the segments it creates (hierarchically, best first) until a split is not
   significant.

A change's size is median(after) / median(before) - 1 over the neighbouring segments; its
commit is the first run after the split. numpy only: the server imports this, the agent never.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SIZE = 3  # runs on each side of a change: fewer is one odd run, not a step
PERMUTATIONS = 199
ALPHA = 0.01  # a mark on the page must be trusted: 0 of 100 noise-only series got one
SEED = 36


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first value of the new segment
    before: float  # median of the segment before
    after: float  # median of the segment after
    p_value: float

    @property
    def change_pct(self) -> float:
        return (self.after / self.before - 1.0) * 100.0 if self.before else float("nan")


def split_statistics(x: np.ndarray, min_size: int = MIN_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """Q(tau) for tau = min_size .. n - min_size (empty when the series is too short): for each
    tau the largest Q(tau, kappa) over the end kappa of the right part (Matteson and James'
    search, so that a step that is later undone is still seen). ``x`` may also be a batch of
    series, shape (batch, n): Q then has shape (batch, taus)."""
    batch = x.reshape(-1, x.shape[-1])
    n = batch.shape[1]
    taus = np.arange(min_size, n - min_size + 1)
    if len(taus) == 0:
        return taus, np.empty((len(batch), 0)).reshape(*x.shape[:-1], 0)
    d = np.abs(batch[:, :, None] - batch[:, None, :])
    c = np.zeros((len(batch), n + 1, n + 1))
    c[:, 1:, 1:] = d.cumsum(axis=1).cumsum(axis=2)
    t = taus[:, None]  # (taus, 1)
    k = np.arange(n + 1)[None, :]  # (1, kappas): the right part is x[tau:kappa]
    m = k - t
    valid = m >= min_size
    diag = c[:, np.arange(n + 1), np.arange(n + 1)]  # C[a, a]: all pairs inside x[:a], twice
    c_tt = diag[:, taus][:, :, None]
    c_kk = diag[:, None, :]
    c_tk = c[:, taus, :]  # C[tau, kappa]
    cross = c_tk - c_tt
    left = c_tt / 2.0
    right = (c_kk - 2.0 * c_tk + c_tt) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        energy = (2.0 * cross / (t * m) - left / (t * (t - 1) / 2.0)
                  - right / (m * (m - 1) / 2.0))
        q = np.where(valid, t * m / (t + m) * energy, -np.inf)
    return taus, q.max(axis=2).reshape(*x.shape[:-1], len(taus))


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float] | None:
    taus, q = split_statistics(x, min_size)
    if len(taus) == 0:
        return None
    q = q.reshape(-1)
    i = int(np.argmax(q))  # q: the one series' row
    return int(taus[i]), float(q[i])


def _p_value(x: np.ndarray, observed: float, min_size: int, permutations: int,
             rng: np.random.Generator, alpha: float) -> float:
    """The permutation p-value; stops early once it cannot fall below ``alpha`` (and then
    returns a value >= alpha)."""
    n = len(x)
    per_batch = max(1, 250_000 // (n * n))  # small batches stay in the CPU's cache
    exceed, done = 0, 0
    give_up = alpha * (1 + permutations) - 1  # this many exceedances: p >= alpha already
    while done < permutations and exceed <= give_up:
        size = min(per_batch, permutations - done)
        shuffled = rng.permuted(np.broadcast_to(x, (size, n)), axis=1)
        _, q = split_statistics(shuffled, min_size)
        exceed += int((q.max(axis=1) >= observed).sum())
        done += size
    return (1 + exceed) / (1 + done) if exceed > give_up else (1 + exceed) / (1 + permutations)


def e_divisive(values: list[float] | np.ndarray, min_size: int = MIN_SIZE,
               permutations: int = PERMUTATIONS, alpha: float = ALPHA,
               seed: int = SEED) -> list[ChangePoint]:
    """The change points of ``values`` (oldest first), in series order."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    cuts = [0, len(x)]
    found: dict[int, float] = {}
    while True:
        best = None  # (q, cut, start, end)
        for start, end in zip(cuts, cuts[1:], strict=False):
            split = _best_split(x[start:end], min_size)
            if split is not None and (best is None or split[1] > best[0]):
                best = (split[1], start + split[0], start, end)
        if best is None or not np.isfinite(best[0]) or best[0] <= 0:
            break
        q, cut, start, end = best
        p = _p_value(x[start:end], q, min_size, permutations, rng, alpha)
        if p >= alpha:
            break
        found[cut] = p
        cuts = sorted([*cuts, cut])
    points = []
    for k, cut in enumerate(cuts[1:-1], start=1):
        before = x[cuts[k - 1]:cut]
        after = x[cut:cuts[k + 1]]
        points.append(ChangePoint(cut, float(np.median(before)), float(np.median(after)),
                                  found[cut]))
    return points
