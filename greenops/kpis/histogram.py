"""Latency histograms in their source's own buckets; percentiles as Prometheus computes them.

A user compares a p99 here with Grafana's over the same Prometheus data, so a percentile is
Prometheus' ``histogram_quantile`` (promql/quantile.go, ``bucketQuantile``) over the same
buckets, not an approximation of it:

- rank = q x observations; the answer lies in the first bucket whose cumulative count reaches
  the rank, linearly interpolated between that bucket's lower and upper bound;
- the lowest bucket's lower bound is 0 (latencies are positive);
- a rank that falls in the +Inf bucket gives the highest finite bound (nothing above it is
  known);
- bucket counts within a relative 1e-12 of their neighbour are taken as equal (float noise), and
  a cumulative count lower than the one before it is raised to it (the monotonicity fix).

To make that possible histograms keep their source's bounds (in ms) instead of being re-bucketed
onto a fixed layout (which put a 99 ms p99 at the layout's 100 ms bound). The stored form is
JSON-safe::

    {"le_ms": [finite upper bounds in ms, ascending],
     "cumulative": [count <= each bound, ..., total]}

``cumulative`` has one more element than ``le_ms``: the last is the +Inf bucket (everything).

Merging: histograms with the same bounds (the same server, window after window) add bucket by
bucket, exactly. Histograms with different bounds (two servers, two layouts) merge onto the union
of their bounds; a histogram without a given bound contributes its count at that bound read off
the same straight line histogram_quantile draws through its bucket. Because histogram_quantile
itself interpolates linearly, adding a bound on that line changes none of that histogram's
percentiles; the merged percentile is the exact percentile of the sum of the sources'
interpolated distributions, and never lies above the upper bound of a source bucket that holds
it. What a source counted above its highest finite bound stays in the +Inf bucket (it is not
known how far above).

Rows written before this module kept histograms as ``{layout bucket index: count}`` on a fixed
log layout (0.1 ms .. 1,000 s, 20 buckets per decade; collectors/client.py still sends that
layout as plain bounds); they are read as histograms with those bounds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from greenops.quantiles import histogram_quantile

# The fixed layout of collectors/client.py and of rows stored before source bounds were kept.
BUCKETS_PER_DECADE = 20
BOUNDS_MS: tuple[float, ...] = tuple(
    round(10 ** (k / BUCKETS_PER_DECADE), 6) for k in range(-20, 121)
)
OVERFLOW = len(BOUNDS_MS)
# Bounds that went through a unit conversion (0.3 s -> 300.00000000000006 ms) are one bound.
_SAME_BOUND = 1e-9


@dataclass(frozen=True)
class Histogram:
    """Finite upper bounds in ms (ascending) and cumulative counts, the last being +Inf."""

    le_ms: tuple[float, ...]
    cumulative: tuple[float, ...]

    @property
    def total(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    def at(self, bound_ms: float) -> float:
        """Cumulative count at ``bound_ms``: exact on a bound, on the interpolation line between
        bounds (from 0 below the lowest), and the highest finite bound's count above it."""
        le, cum = self.le_ms, self.cumulative
        if not le:
            return 0.0
        i = bisect.bisect_left(le, bound_ms * (1 - _SAME_BOUND))
        if i < len(le) and _same(le[i], bound_ms):
            return cum[i]
        if i == len(le):
            return cum[len(le) - 1]  # above the last finite bound: not known where
        lo, c_lo = (le[i - 1], cum[i - 1]) if i else (0.0, 0.0)
        return c_lo + (cum[i] - c_lo) * (bound_ms - lo) / (le[i] - lo)


EMPTY = Histogram((), ())


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= _SAME_BOUND * max(abs(a), abs(b))


def decumulate(counts: Sequence[float]) -> list[float]:
    """Prometheus ``_bucket`` series are cumulative (each counts everything <= its bound)."""
    return [c - (counts[i - 1] if i else 0) for i, c in enumerate(counts)]


def from_buckets(le_ms: Sequence[float], counts: Sequence[float], *, cumulative: bool
                 ) -> Histogram:
    """A histogram from bounds in ms and one count per bound plus the +Inf bucket."""
    if len(counts) != len(le_ms) + 1:
        raise ValueError("counts must have one element per bound plus the +Inf bucket")
    if cumulative:
        cum = [float(c) for c in counts]
    else:
        cum, running = [], 0.0
        for c in counts:
            running += c
            cum.append(running)
    return Histogram(tuple(float(b) for b in le_ms), tuple(cum))


def from_values(latencies_ms: Iterable[float], le_ms: Sequence[float] = BOUNDS_MS) -> Histogram:
    """Observations counted into ``le_ms`` (upper-inclusive, as Prometheus' ``le``)."""
    counts = [0] * (len(le_ms) + 1)
    for v in latencies_ms:
        counts[bisect.bisect_left(le_ms, v * (1 - _SAME_BOUND))] += 1
    return from_buckets(le_ms, counts, cumulative=False)


def parse(doc: Mapping | Histogram | None) -> Histogram:
    """The stored JSON form (or a legacy ``{index: count}`` row) as a Histogram."""
    if isinstance(doc, Histogram):
        return doc
    if not doc:
        return EMPTY
    if "le_ms" in doc:
        return Histogram(tuple(float(b) for b in doc["le_ms"]),
                         tuple(float(c) for c in doc["cumulative"]))
    counts = [0.0] * (OVERFLOW + 1)
    for k, v in doc.items():
        counts[int(k)] += float(v)
    return from_buckets(BOUNDS_MS, counts, cumulative=False)


def _number(x: float) -> float | int:
    # Whole counts stay ints in JSON; merged different layouts may hold fractions.
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else x


def to_json(h: Mapping | Histogram | None) -> dict:
    h = parse(h)
    if not h.total:
        return {}
    return {"le_ms": list(h.le_ms), "cumulative": [_number(c) for c in h.cumulative]}


def merge(histograms: Iterable[Mapping | Histogram | None]) -> dict:
    """Sum of histograms (JSON form in, JSON form out); see the module doc for layouts."""
    parts = [h for h in (parse(x) for x in histograms) if h.total]
    if not parts:
        return {}
    first = parts[0].le_ms
    if all(len(p.le_ms) == len(first) and all(map(_same, p.le_ms, first)) for p in parts):
        cum = [sum(col) for col in zip(*(p.cumulative for p in parts), strict=True)]
        return to_json(Histogram(first, tuple(cum)))
    union: list[float] = []
    for b in sorted(b for p in parts for b in p.le_ms):
        if not union or not _same(union[-1], b):
            union.append(b)
    cum = [sum(p.at(b) for p in parts) for b in union]
    cum.append(sum(p.total for p in parts))
    return to_json(Histogram(tuple(union), tuple(cum)))


def total(h: Mapping | Histogram | None) -> float:
    return parse(h).total


def above_bounds(h: Mapping | Histogram | None, q: float) -> bool:
    """Whether the q-quantile lies in the +Inf bucket: histogram_quantile then answers the
    highest finite bound, and the true value is somewhere above it (pages say ">=")."""
    h = parse(h)
    if not h.le_ms or not h.total:
        return False
    return max(h.cumulative[:-1]) < q * h.total


def quantile_ms(h: Mapping | Histogram | None, q: float) -> float | None:
    """Prometheus' histogram_quantile(q) in ms (greenops.quantiles, the one owner of the
    rule); None where it gives NaN (no observations)."""
    h = parse(h)
    return histogram_quantile(q, [*h.le_ms, math.inf], h.cumulative)
