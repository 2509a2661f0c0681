"""Quantiles: the one owner of both rules GreenOps uses, side by side.

- `histogram_quantile`: Prometheus' ``histogram_quantile`` (promql/quantile.go,
  ``bucketQuantile``) over cumulative bucket counts -- rank = q x observations, linear inside the
  bucket that reaches the rank, 0 as the lowest bucket's lower bound, the highest finite bound
  for a rank in the +Inf bucket, counts within a relative 1e-12 taken as equal and made
  monotonic. Latency percentiles (greenops.kpis.histogram) use it, so a p99 here is Grafana's.
- `sorted_quantile`: the plain quantile of a list of values, linear between the closest ranks
  (numpy's default, "type 7"). The fleet charts' p10/p90 bands of GPU utilisation use it.

Core layer: imports no app.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

# promql/quantile.go: correctPrecisionErrors(buckets, 1e-12)
PRECISION = 1e-12


def histogram_quantile(q: float, upper_bounds: Sequence[float],
                       cumulative: Sequence[float]) -> float | None:
    """Prometheus' histogram_quantile(q) over buckets with these upper bounds (ascending, the
    last +Inf) and cumulative counts; None where Prometheus gives NaN (no observations)."""
    if not 0 <= q <= 1:
        raise ValueError("q must be in [0, 1]")
    bounds = list(upper_bounds)
    counts = list(cumulative)
    if len(bounds) < 2 or not counts or counts[-1] <= 0:
        return None
    # correctPrecisionErrors, then ensureMonotonic, in that order as in quantile.go.
    prev = counts[0]
    for i in range(1, len(counts)):
        delta = abs(counts[i] - prev)
        if delta == 0:
            continue
        if delta / counts[i] <= PRECISION:
            counts[i] = prev
        else:
            prev = counts[i]
    highest = counts[0]
    for i in range(1, len(counts)):
        highest = counts[i] = max(highest, counts[i])
    rank = q * counts[-1]
    b = bisect.bisect_left(counts, rank, 0, len(counts) - 1)  # sort.Search over len-1 buckets
    if b == len(counts) - 1:
        return bounds[-2]  # in the +Inf bucket: the highest finite bound
    start, count = 0.0, counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:
        return None  # q = 0 over an empty lowest bucket: 0/0, NaN in Prometheus too
    return start + (bounds[b] - start) * (rank / count)


def sorted_quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
