"""Latency histograms: the fixed layout, merging, re-bucketing and percentiles."""

from __future__ import annotations

import math
import random

import pytest

from collectors import client
from greenops.kpis import histogram, metrics


def nearest_rank(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[math.ceil(q * len(s)) - 1]


def test_layout_is_log_spaced_and_identical_in_the_client():
    b = histogram.BOUNDS_MS
    assert b[0] == 0.1 and b[20] == 1.0 and b[40] == 10.0 and b[-1] == 1_000_000.0
    assert len(b) == 141
    assert all(b[i + 1] / b[i] == pytest.approx(10 ** 0.05, rel=1e-5) for i in range(len(b) - 1))
    assert b == client.BOUNDS_MS


def test_bucket_edges_are_upper_inclusive():
    assert histogram.bucket_of(1.0) == 20  # exactly on a bound: that bucket (le semantics)
    assert histogram.bucket_of(1.0001) == 21
    assert histogram.bucket_of(0.01) == 0
    assert histogram.bucket_of(2e6) == histogram.OVERFLOW


def test_p99_of_merged_histograms_matches_raw_p99_within_bucket_resolution():
    rng = random.Random(7)
    # Three servers with different latency profiles, each reporting its own histogram.
    parts = [[rng.lognormvariate(mu, 0.6) for _ in range(n)]
             for mu, n in ((2.0, 5000), (3.0, 3000), (4.5, 400))]
    merged = histogram.merge(histogram.from_values(p) for p in parts)
    raw = [v for p in parts for v in p]
    assert histogram.total(merged) == len(raw)
    for q in (0.5, 0.9, 0.99):
        true = nearest_rank(raw, q)
        est = histogram.quantile_ms(merged, q)
        assert true <= est < true * histogram.RESOLUTION * (1 + 1e-9), q
    # Averaging the servers' medians -- what merging exists to avoid -- is far off.
    avg = sum(nearest_rank(p, 0.5) for p in parts) / 3
    assert abs(avg - nearest_rank(raw, 0.5)) / nearest_rank(raw, 0.5) > 0.5


def test_hand_computed_percentiles():
    # 98 requests at 10 ms, 2 at 100 ms: p50 = 10 ms, p99 = 100 ms (rank 99 of 100).
    h = histogram.from_values([10.0] * 98 + [100.0] * 2)
    assert histogram.quantile_ms(h, 0.5) == 10.0
    assert histogram.quantile_ms(h, 0.98) == 10.0
    assert histogram.quantile_ms(h, 0.99) == 100.0
    assert histogram.quantile_ms({}, 0.99) is None
    assert histogram.quantile_ms({histogram.OVERFLOW: 5}, 0.5) is None


def test_prometheus_cumulative_buckets_are_rebucketed_onto_the_layout():
    # vLLM-style bounds in seconds, cumulative: 3 <= 0.3 s, 7 <= 0.5 s, 10 <= 1 s, 11 total.
    counts = histogram.decumulate([3, 7, 10, 11])
    assert counts == [3, 4, 3, 1]
    h = histogram.rebucket([300.0, 500.0, 1000.0], counts)
    assert h == {histogram.bucket_of(300.0): 3, histogram.bucket_of(500.0): 4,
                 histogram.bucket_of(1000.0): 3, histogram.OVERFLOW: 1}
    # A count is credited to the bucket holding the source's upper bound: never under-stated.
    assert histogram.quantile_ms(h, 0.5) >= 500.0


def test_merge_of_rollup_rows_keeps_sums_and_histograms_exact():
    a = metrics.Totals(requests=10, latency_buckets={"3": 4, "5": 6}, gpu_energy_j=100.0,
                       facility_energy_j=150.0, co2e_g=1.0, cost_usd=0.5, gpu_minutes=1,
                       intensity_source="x", tokens=7)
    b = metrics.Totals(requests=5, latency_buckets={5: 1, 9: 2}, gpu_energy_j=50.0,
                       facility_energy_j=55.0, co2e_g=2.0, cost_usd=0.25, gpu_minutes=1,
                       intensity_source="y; x")
    m = metrics.merge([a, b])
    assert m.requests == 15 and m.tokens == 7
    assert m.latency_buckets == {3: 4, 5: 7, 9: 2}
    assert m.cost_usd == pytest.approx(0.75)
    assert m.pue == pytest.approx(205 / 150)
    assert m.intensity_source == "x; y"
    unknown = metrics.merge([a, metrics.Totals(cost_usd=None, gpu_minutes=3)])
    assert unknown.cost_usd is None


def test_change_against_previous_period():
    assert metrics.change_pct(12.0, 10.0) == pytest.approx(20.0)
    assert metrics.change_pct(5.0, 0.0) is None
    assert metrics.change_pct(None, 3.0) is None


def test_energy_per_token_counts_only_requests_that_reported_tokens():
    from greenops.kpis import metrics

    # 200 requests used 1000 J; only the 100 in windows that counted tokens made 100 tokens.
    t = metrics.Totals(requests=200, tokens=100, token_requests=100, gpu_energy_j=1000.0)
    assert metrics.derive(t, 3600)["energy_per_token_j"] == 5.0
    merged = metrics.merge([t, metrics.Totals(requests=100, gpu_energy_j=500.0)])
    assert merged.token_requests == 100
    assert metrics.derive(merged, 3600)["energy_per_token_j"] == 5.0
