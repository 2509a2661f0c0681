"""Latency histograms on one fixed, log-spaced bucket layout, so any two merge exactly.

Layout: upper bounds 10^(k/20) ms for k = -20..120, i.e. 0.1 ms to 1,000 s, 20 buckets per
decade (each bound is 12.2 % above the previous one), plus an overflow bucket above 1,000 s.
collectors/client.py builds the same bounds with the same formula.

A histogram is a sparse dict {bucket index: count}. Merging adds counts bucket by bucket;
percentiles are read from the merged counts, never averaged, because an average of p99s is not
the p99 of anything.

Histograms in another layout (a vLLM or Triton histogram scraped from Prometheus) are re-bucketed
on arrival: the count of a source bucket (lo, hi] goes to the layout bucket that contains hi.
A percentile is then never under-stated, and is accurate to the coarser of the two layouts.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping

BUCKETS_PER_DECADE = 20
FIRST_EXPONENT = -20  # 10^(-20/20) = 0.1 ms
LAST_EXPONENT = 120  # 10^(120/20) = 1,000,000 ms
BOUNDS_MS: tuple[float, ...] = tuple(
    round(10 ** (k / BUCKETS_PER_DECADE), 6) for k in range(FIRST_EXPONENT, LAST_EXPONENT + 1)
)
OVERFLOW = len(BOUNDS_MS)  # index of the bucket above the last bound
RESOLUTION = 10 ** (1 / BUCKETS_PER_DECADE)  # ratio between neighbouring bounds (~1.122)
# Bounds that went through JSON or another formula may differ in the last bits.
_TOLERANCE = 1e-9

Histogram = dict[int, int]


def bucket_of(latency_ms: float) -> int:
    """Index of the bucket a latency falls in (bucket i holds (BOUNDS_MS[i-1], BOUNDS_MS[i]])."""
    return bisect.bisect_left(BOUNDS_MS, latency_ms * (1 - _TOLERANCE))


def from_values(latencies_ms: Iterable[float]) -> Histogram:
    h: Histogram = {}
    for v in latencies_ms:
        i = bucket_of(v)
        h[i] = h.get(i, 0) + 1
    return h


def rebucket(upper_bounds_ms: list[float], counts: list[int]) -> Histogram:
    """Map a plain (non-cumulative) histogram with its own bounds onto the layout.

    `counts` has one more element than `upper_bounds_ms`: the last is the overflow bucket
    (above the last bound; Prometheus' le="+Inf").
    """
    h: Histogram = {}
    for i, count in enumerate(counts):
        if not count:
            continue
        target = OVERFLOW if i == len(upper_bounds_ms) else bucket_of(upper_bounds_ms[i])
        h[target] = h.get(target, 0) + count
    return h


def decumulate(counts: list[int]) -> list[int]:
    """Prometheus `_bucket` series are cumulative (each counts everything <= its bound)."""
    return [c - (counts[i - 1] if i else 0) for i, c in enumerate(counts)]


def merge(histograms: Iterable[Mapping]) -> Histogram:
    """Bucket-wise sum. Accepts the JSON form too (string keys)."""
    out: Histogram = {}
    for h in histograms:
        for k, v in h.items():
            i = int(k)
            out[i] = out.get(i, 0) + int(v)
    return {k: v for k, v in out.items() if v}


def total(h: Mapping) -> int:
    return sum(int(v) for v in h.values())


def quantile_ms(h: Mapping, q: float) -> float | None:
    """The q-quantile (0 < q <= 1) as the upper bound of the bucket holding its rank.

    Rank is the nearest-rank definition (ceil(q * n)), so the result is at least the true
    quantile of the observations and less than RESOLUTION times it. None when the histogram is
    empty or the quantile lies in the overflow bucket (above 1,000 s).
    """
    if not 0 < q <= 1:
        raise ValueError("q must be in (0, 1]")
    merged = merge([h])
    n = total(merged)
    if n == 0:
        return None
    rank = math.ceil(q * n)
    seen = 0
    for i in sorted(merged):
        seen += merged[i]
        if seen >= rank:
            return BOUNDS_MS[i] if i < OVERFLOW else None
    return None  # unreachable: seen reaches n


def to_json(h: Mapping) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(merge([h]).items())}
