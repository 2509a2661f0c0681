"""Percentile ranks that are not whole numbers: q x n = 9.5 must reach the 10th observation.

Every other percentile test uses counts where q x n is whole (100 requests, q = 0.99), where
rounding the rank down or up gives the same answer. With n = 10 and q = 0.95 the rank is 9.5:
the 95th percentile lies beyond the 9th observation, in the bucket of the 10th. Rounding down
would report the 9th observation's bucket, under-stating p95 (and p99) whenever a window has
few requests -- precisely the quiet hours in which one slow request is the whole story.

The assertions hold for the nearest-rank rule (ceil(q x n), the bucket's upper bound) and for
Prometheus' histogram_quantile (rank q x n, linear inside the bucket): both land in the bucket
of the 10th observation, which spans at most (89.1 ms, 100 ms] for a 100 ms observation on any
layout finer than a factor of 2 per bucket.
"""

from __future__ import annotations

import pytest

from greenops.kpis import histogram, metrics


def p(values: list[float], q: float) -> float | None:
    return histogram.quantile_ms(histogram.from_values(values), q)


# 9 requests at 10 ms and 1 at 100 ms.
TEN = [10.0] * 9 + [100.0]


@pytest.mark.parametrize("q", [0.95, 0.99, 0.91])
def test_rank_beyond_the_ninth_of_ten_reaches_the_tenth(q):
    # q x 10 = 9.5, 9.9, 9.1: past the 9th observation, so in the 100 ms bucket, not at 10 ms.
    value = p(TEN, q)
    assert value is not None and 50.0 < value <= 100.0, (q, value)


def test_p95_of_ten_is_interpolated_inside_the_tenth_observations_bucket():
    # Prometheus' histogram_quantile, by hand: from_values counts 100 ms into the layout bucket
    # (10^(39/20), 10^(40/20)] = (89.125094, 100] ms. Rank 0.95 x 10 = 9.5; 9 observations lie
    # below that bucket, so 0.5 of its 1 observation: 89.125094 + (100 - 89.125094) x 0.5.
    assert p(TEN, 0.95) == pytest.approx(89.125094 + (100 - 89.125094) * 0.5)  # 94.562547 ms


def test_whole_rank_stays_on_its_observation():
    # q x 10 = 9 exactly: the 9th observation, 10 ms (its bucket's upper bound is 10 ms).
    assert p(TEN, 0.90) == pytest.approx(10.0)


@pytest.mark.parametrize(("values", "q", "low", "high"), [
    # n = 3, q = 0.5: rank 1.5 -> the 2nd observation (10 ms), not the 1st (1 ms).
    ([1.0, 10.0, 100.0], 0.5, 5.0, 10.0),
    # n = 7, q = 0.99: rank 6.93 -> the 7th (1,000 ms), not the 6th (20 ms).
    ([2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 1000.0], 0.99, 500.0, 1000.0),
    # n = 1: any q is the only observation (42 ms, in the bucket (39.8, 44.7] ms).
    ([42.0], 0.01, 35.0, 45.0),
])
def test_fractional_ranks_on_small_counts(values, q, low, high):
    value = p(values, q)
    assert value is not None and low < value <= high, (values, q, value)


def test_kpi_p99_of_a_quiet_hour_is_its_slow_request():
    # The KPI path: a window of 10 requests, one of which took 100 ms. p99 (rank 9.9) must be
    # the slow one, p50 (rank 5) a fast one: in the 10 ms bucket (8.9, 10] ms.
    t = metrics.Totals(requests=10, success=10,
                       latency_buckets=histogram.to_json(histogram.from_values(TEN)))
    k = metrics.derive(t, 3600)
    assert 50.0 < k["latency_p99_ms"] <= 100.0
    assert 8.9 < k["latency_p50_ms"] <= 10.0
