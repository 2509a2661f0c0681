"""Timings beside the request latency: time to first token or response, time per output token,
and Triton's queue and compute phases.

Stored form (InferenceWindow.timings, KpiRollup.timings)::

    {name: {"sum_ms": <sum of the timed durations>, "n": <how many the sum adds up>,
            "hist": <histogram.to_json form, {} when the server exposes no buckets>}}

Sums, counts and histograms only, so rows merge exactly; a mean is sum / n and percentiles come
from the merged histogram (Prometheus' histogram_quantile, greenops.kpis.histogram).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from greenops.kpis import histogram

# Display order and labels; the intake accepts exactly these names.
LABELS: dict[str, str] = {
    "first_token": "Time to first token",
    "per_output_token": "Time per output token",
    "first_response": "Time to first response",
    "queue": "Queue time",
    "compute_input": "Compute: input",
    "compute_infer": "Compute: inference",
    "compute_output": "Compute: output",
}


def merge(items: Iterable[Mapping | None]) -> dict:
    """Sum of timings dicts, name by name."""
    sums: dict[str, float] = {}
    ns: dict[str, int] = {}
    hists: dict[str, list] = {}
    for t in items:
        for name, part in (t or {}).items():
            sums[name] = sums.get(name, 0.0) + float(part.get("sum_ms") or 0.0)
            ns[name] = ns.get(name, 0) + int(part.get("n") or 0)
            hists.setdefault(name, []).append(part.get("hist") or {})
    return {name: {"sum_ms": sums[name], "n": ns[name], "hist": histogram.merge(hists[name])}
            for name in sorted(sums)}


def summary(t: Mapping | None) -> list[dict]:
    """Per timing, in display order: label, mean, p50 and p99 in ms (None where unknown: a mean
    needs a count, percentiles need buckets)."""
    out = []
    for name, label in LABELS.items():
        part = (t or {}).get(name)
        if not part:
            continue
        n = int(part.get("n") or 0)
        hist = part.get("hist") or {}
        out.append({
            "name": name,
            "label": label,
            "mean_ms": float(part["sum_ms"]) / n if n else None,
            "p50_ms": histogram.quantile_ms(hist, 0.50),
            "p99_ms": histogram.quantile_ms(hist, 0.99),
            # Above the highest finite bound: the figure is that bound, the truth is above it.
            "p50_above": histogram.above_bounds(hist, 0.50),
            "p99_above": histogram.above_bounds(hist, 0.99),
            "n": n or int(histogram.total(hist)),
        })
    return out
