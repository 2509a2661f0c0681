"""Latency histograms: percentiles equal Prometheus' histogram_quantile over the same buckets.

Expected answers are worked out by hand with promql/quantile.go's bucketQuantile: rank = q x n,
the first bucket whose cumulative count reaches the rank, linear inside it (from 0 in the lowest
bucket), the highest finite bound when the rank is in +Inf, monotonicity forced first.
"""

from __future__ import annotations

import pytest

from collectors import client
from greenops.kpis import histogram, metrics


def h(le_ms: list[float], cumulative: list[float]) -> dict:
    return {"le_ms": le_ms, "cumulative": cumulative}


def test_client_layout_is_the_legacy_layout():
    b = histogram.BOUNDS_MS
    assert b[0] == 0.1 and b[20] == 1.0 and b[-1] == 1_000_000.0 and len(b) == 141
    assert b == client.BOUNDS_MS


def test_non_integer_rank_interpolates_inside_the_bucket():
    # n = 10 in (0,100] 2, (100,200] 5, (200,400] 3.
    x = h([100, 200, 400], [2, 7, 10, 10])
    # q = 0.95: rank 9.5 -> bucket (200,400] (cumulative 10 >= 9.5); 9.5 - 7 = 2.5 of its 3:
    # 200 + 200 x 2.5/3 = 366.67 ms. Nearest rank (ceil(9.5) = 10th value) would say 400.
    assert histogram.quantile_ms(x, 0.95) == pytest.approx(200 + 200 * 2.5 / 3)
    # q = 0.5: rank 5 -> (100,200]: 100 + 100 x (5-2)/5 = 160 ms.
    assert histogram.quantile_ms(x, 0.5) == pytest.approx(160.0)
    # q = 0.7: rank 7 reaches (100,200]'s cumulative 7 exactly: its upper bound, 200 ms.
    assert histogram.quantile_ms(x, 0.7) == pytest.approx(200.0)


def test_lowest_bucket_interpolates_from_zero():
    # rank 0.2 x 10 = 2 of the 4 in (0,100]: 0 + 100 x 2/4 = 50 ms.
    assert histogram.quantile_ms(h([100, 200], [4, 10, 10]), 0.2) == pytest.approx(50.0)


def test_rank_in_the_inf_bucket_gives_the_highest_finite_bound():
    # 3 of 10 above 200 ms: p95 (rank 9.5 > 7) is in +Inf -> 200 ms, as Prometheus says.
    assert histogram.quantile_ms(h([100, 200], [2, 7, 10]), 0.95) == 200.0


def test_monotonicity_is_forced_before_searching():
    # Cumulative 5, 4 (a decrease), 8, 10: raised to 5, 5, 8, 10. q = 0.6: rank 6 ->
    # (200,400]: 200 + 200 x (6-5)/(8-5) = 266.67 ms (unfixed it would read 300).
    x = h([100, 200, 400], [5, 4, 8, 10])
    assert histogram.quantile_ms(x, 0.6) == pytest.approx(200 + 200 / 3)


def test_empty_histograms_have_no_percentile():
    assert histogram.quantile_ms({}, 0.99) is None
    assert histogram.quantile_ms(h([100], [0, 0]), 0.5) is None


def test_same_layout_merges_exactly_and_gives_prometheus_answer():
    # Two windows of one server: a sum by (le) over the window, as increase() + sum would.
    a = h([100, 200, 400], [1, 4, 5, 5])
    b = h([100, 200, 400], [1, 3, 5, 5])
    m = histogram.merge([a, b])
    assert m == h([100, 200, 400], [2, 7, 10, 10])
    assert histogram.quantile_ms(m, 0.95) == pytest.approx(366.6666667)


def test_different_layouts_merge_on_the_union_of_bounds():
    # A: (0,100] 4, (100,200] 4. B (other server): (0,150] 2, (150,+Inf) 2.
    a = h([100, 200], [4, 8, 8])
    b = h([150], [2, 4])
    m = histogram.merge([a, b])
    # Union 100, 150, 200. A at 150: 4 + 4 x 50/100 = 6. B at 100: 2 x 100/150 = 1.333;
    # B above its last finite bound stays in +Inf: 2 at 200.
    assert m["le_ms"] == [100, 150, 200]
    assert m["cumulative"] == pytest.approx([4 + 4 / 3, 8, 10, 12])
    # p50: rank 6 -> (100,150]: 100 + 50 x (6 - 5.333)/(8 - 5.333) = 112.5 ms. Check by hand on
    # the sources' own lines: A(112.5) = 4 + 4 x 0.125 = 4.5, B(112.5) = 2 x 0.75 = 1.5; 6.
    assert histogram.quantile_ms(m, 0.5) == pytest.approx(112.5)


def test_unit_conversion_noise_does_not_split_a_bound():
    a = h([0.3 * 1000, 500.0], [1, 2, 2])
    b = h([300.0, 500.0], [1, 2, 2])
    assert histogram.merge([a, b])["cumulative"] == [2, 4, 4]


def test_legacy_index_rows_still_read():
    # {index: count} on the old layout: 4 in bucket 20 = (0.891, 1.0] ms.
    legacy = {"20": 4}
    assert histogram.total(legacy) == 4
    lo, hi = histogram.BOUNDS_MS[19], histogram.BOUNDS_MS[20]
    assert histogram.quantile_ms(legacy, 0.5) == pytest.approx(lo + (hi - lo) * 0.5)


def test_merge_of_rollup_rows_keeps_sums_and_histograms_exact():
    a = metrics.Totals(requests=10, latency_buckets=h([10, 20], [4, 10, 10]), gpu_energy_j=100.0,
                       facility_energy_j=150.0, co2e_g=1.0, cost_usd=0.5, gpu_minutes=1,
                       intensity_source="x", tokens=7)
    b = metrics.Totals(requests=5, latency_buckets=h([10, 20], [0, 1, 3]), gpu_energy_j=50.0,
                       facility_energy_j=55.0, co2e_g=2.0, cost_usd=0.25, gpu_minutes=1,
                       intensity_source="y; x")
    m = metrics.merge([a, b])
    assert m.requests == 15 and m.tokens == 7
    assert m.latency_buckets == h([10, 20], [4, 11, 13])
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
    # 200 requests used 1000 J; only the 100 in windows that counted tokens made 100 tokens.
    t = metrics.Totals(requests=200, tokens=100, token_requests=100, gpu_energy_j=1000.0)
    assert metrics.derive(t, 3600)["energy_per_token_j"] == 5.0
    merged = metrics.merge([t, metrics.Totals(requests=100, gpu_energy_j=500.0)])
    assert merged.token_requests == 100
    assert metrics.derive(merged, 3600)["energy_per_token_j"] == 5.0


def test_p99_stays_inside_its_source_bucket():
    # Triton-style ms buckets, 100 requests: 2 <= 50 ms, 100 <= 100 ms. p99: rank 99 in
    # (50, 100]: 50 + 50 x 97/98 = 99.49 ms. Re-bucketing onto a fixed layout said 100 ms.
    x = h([50, 100, 200], [2, 100, 100, 100])
    assert histogram.quantile_ms(x, 0.99) == pytest.approx(50 + 50 * 97 / 98)


def test_merged_percentiles_never_leave_the_bucket_holding_the_rank():
    import random

    rng = random.Random(8)
    bounds = [5, 10, 25, 50, 100, 250, 500, 1000]
    windows = []
    for _ in range(50):
        counts = [rng.randrange(0, 20) for _ in range(len(bounds) + 1)]
        windows.append(histogram.to_json(histogram.from_buckets(bounds, counts,
                                                                cumulative=False)))
    m = histogram.merge(windows)
    cum = m["cumulative"]
    for q in (0.5, 0.9, 0.95, 0.99):
        rank = q * cum[-1]
        i = next((j for j, c in enumerate(cum[:-1]) if c >= rank), None)
        value = histogram.quantile_ms(m, q)
        if i is None:
            assert value == bounds[-1] and histogram.above_bounds(m, q)
        else:
            assert (bounds[i - 1] if i else 0) <= value <= bounds[i], q
            assert not histogram.above_bounds(m, q)


def test_a_rank_above_every_bound_is_flagged():
    x = h([100, 200], [2, 7, 10])
    assert histogram.above_bounds(x, 0.95) and not histogram.above_bounds(x, 0.5)
