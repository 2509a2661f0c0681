"""Edges of histogram_quantile and of merging, found by mutation testing
(tests/mutation/SURVIVORS.md). Answers by hand, following Prometheus' promql/quantile.go."""

from __future__ import annotations

import pytest

from greenops.kpis import histogram
from greenops.kpis.histogram import Histogram, from_buckets, quantile_ms


def test_decumulate_turns_prometheus_buckets_into_counts():
    # le=1: 3, le=2: 5, le=+Inf: 9  ->  3, 5 - 3, 9 - 5
    assert histogram.decumulate([3, 5, 9]) == [3, 2, 4]


def test_cumulative_input_is_taken_as_is():
    h = from_buckets([1.0, 2.0], [1, 3, 4], cumulative=True)
    assert h.cumulative == (1.0, 3.0, 4.0) and h.total == 4.0


def test_wrong_number_of_counts_is_named():
    with pytest.raises(ValueError,
                       match=r"^counts must have one element per bound plus the \+Inf bucket$"):
        from_buckets([1.0, 2.0], [1, 2], cumulative=False)


def test_from_values_counts_each_observation_once():
    assert histogram.total(histogram.from_values([1.0, 2.0, 3.0])) == 3


def test_json_counts_are_integers_up_to_2_to_the_53():
    # Whole counts go out as JSON integers (200, not 200.0); from 2^53 on a float can no longer
    # hold every integer, so such a count stays a float.
    small = histogram.to_json(from_buckets([1.0], [200, 0], cumulative=False))
    assert small["cumulative"] == [200, 200] and all(type(c) is int for c in small["cumulative"])
    big = histogram.to_json(from_buckets([1.0], [2**53, 0], cumulative=False))
    assert all(type(c) is float for c in big["cumulative"])


def test_q_is_checked_and_its_ends_are_allowed():
    h = from_buckets([10.0, 20.0], [4, 4, 0], cumulative=False)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"^q must be in \[0, 1\]$"):
            quantile_ms(h, bad)
    # q = 0: rank 0 in the lowest bucket (0, 10]: 0 + 10 x 0/4 = 0 ms.
    assert quantile_ms(h, 0.0) == 0.0
    # q = 1: rank 8 reaches the bucket (10, 20] at its top: 10 + 10 x 4/4 = 20 ms.
    assert quantile_ms(h, 1.0) == 20.0


def test_a_single_finite_bound_interpolates_from_zero():
    # le=10: 3, +Inf: 1. p50: rank 2 of 4 in (0, 10]: 10 x 2/3 = 6.667 ms.
    assert quantile_ms(from_buckets([10.0], [3, 1], cumulative=False), 0.5) == pytest.approx(
        20 / 3)


def test_rank_in_the_inf_bucket_gives_the_highest_finite_bound():
    # Everything above 10 ms: Prometheus answers the highest finite bound, 10 ms.
    assert quantile_ms(from_buckets([10.0], [0, 4], cumulative=False), 0.5) == 10.0


def test_no_observations_or_no_finite_bound_is_unknown():
    assert quantile_ms(from_buckets([1.0, 2.0], [0, 0, 0], cumulative=False), 0.5) is None
    assert quantile_ms(Histogram((), (5.0,)), 0.5) is None  # only +Inf: nowhere to place it


def test_counts_within_float_noise_are_one_count():
    # correctPrecisionErrors: 10.000000000005 is within 1e-12 (relative) of 10, so the bucket
    # (1, 2] is empty, not 5e-12 of an observation. Rank 0.50000000000015 x 20 =
    # 10.000000000003 then lies above every finite bucket: the highest finite bound, 2 ms.
    # Without the correction the answer would be 1 + 1 x 3e-12/5e-12 = 1.6 ms.
    q = 0.50000000000015
    assert quantile_ms(Histogram((1.0, 2.0), (10.0, 10.000000000005, 20.0)), q) == 2.0
    # The same after an exactly equal pair of counts (the correction goes on past it).
    assert quantile_ms(Histogram((0.5, 1.0, 2.0), (10.0, 10.0, 10.000000000005, 20.0)), q) == 2.0


def test_merge_of_different_bounds_of_the_same_length_uses_their_union():
    a = from_buckets([10.0, 20.0], [2, 6, 0], cumulative=False)  # cumulative 2, 8, 8
    b = from_buckets([15.0, 30.0], [2, 0, 0], cumulative=False)  # cumulative 2, 2, 2
    m = histogram.merge([a, b])
    # Union 10, 15, 20, 30. a at 15: on its line from (10, 2) to (20, 8) = 5; b at 10: on its
    # line from (0, 0) to (15, 2) = 4/3; b above 15 stays 2; a above 20 stays 8.
    assert m["le_ms"] == [10.0, 15.0, 20.0, 30.0]
    assert m["cumulative"] == pytest.approx([2 + 4 / 3, 5 + 2, 8 + 2, 8 + 2, 10])


def test_a_histogram_with_only_an_inf_bucket_adds_nothing_below_any_bound():
    m = histogram.merge([from_buckets([10.0], [2, 1], cumulative=False),
                         Histogram((), (5.0,))])
    assert m == {"le_ms": [10.0], "cumulative": [2, 8]}


def test_bounds_that_differ_by_float_noise_merge_as_one_layout():
    # 0.3 s in ms is 300.00000000000006: the same bound as 300.
    a = from_buckets([300.0], [1, 0], cumulative=False)
    b = from_buckets([0.3 * 1000], [2, 0], cumulative=False)
    assert histogram.merge([a, b]) == {"le_ms": [300.0], "cumulative": [3, 3]}


def test_bounds_within_a_billionth_are_one_bound_and_further_apart_are_two():
    # 1000 ms and 1000.0000001 ms differ by 1e-10 of their size: one bound. 1000.01 is not.
    a = from_buckets([1000.0], [1, 0], cumulative=False)
    near = from_buckets([1000.0000001], [2, 0], cumulative=False)
    far = from_buckets([1000.01], [2, 0], cumulative=False)
    assert histogram.merge([a, near])["le_ms"] == [1000.0]
    assert histogram.merge([a, far])["le_ms"] == [1000.0, 1000.01]


def test_above_bounds_says_when_the_quantile_is_past_the_last_finite_bound():
    h = from_buckets([10.0], [2, 2], cumulative=False)  # 2 at <= 10 ms, 2 above
    # p50: rank 2 is reached at the 10 ms bound itself -- not above it. p75: rank 3 is above.
    assert histogram.above_bounds(h, 0.5) is False
    assert histogram.above_bounds(h, 0.75) is True
    assert histogram.above_bounds({}, 0.5) is False
    assert histogram.above_bounds(Histogram((), (5.0,)), 0.5) is False
