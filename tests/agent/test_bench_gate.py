"""The efficiency gate's statistics and verdicts (collectors/bench_gate.py), checked against
values worked out by hand: scipy's documented Mann-Whitney U example, a tie-corrected normal
approximation, and a bootstrap whose every outcome can be enumerated."""

from __future__ import annotations

import math

import pytest

from collectors import bench_gate as gate


def test_mann_whitney_exact_matches_scipys_documented_example():
    # scipy.stats.mannwhitneyu docs: ages of male and female faculty, method="exact".
    males = [19, 22, 16, 29, 24]
    females = [20, 11, 17, 12]
    # Ranks of the 9 values: 11:1 12:2 16:3 17:4 19:5 20:6 22:7 24:8 29:9.
    # R_males = 3 + 5 + 7 + 8 + 9 = 32; U = 32 - 5*6/2 = 17 (scipy: statistic=17.0).
    # U_females = 5*4 - 17 = 3. Orderings with U <= 3 (partitions of 0..3 into <= 5 parts,
    # each <= 4): 1 + 1 + 2 + 3 = 7 of C(9, 4) = 126; two-sided p = 2 * 7/126 = 0.1111.
    res = gate.mann_whitney_u(males, females)
    assert res.u == 17
    assert res.method == "exact"
    assert res.p_value == pytest.approx(14 / 126)
    assert res.p_value == pytest.approx(0.1111111111111111)


def test_mann_whitney_with_ties_uses_the_corrected_normal_approximation():
    x = [1, 2, 3, 3]
    y = [3, 4, 5, 6]
    # Sorted: 1 2 3 3 3 4 5 6 -> ranks 1 2 4 4 4 6 7 8 (three 3s share ranks 3..5 -> 4).
    # R_x = 1 + 2 + 4 + 4 = 11, U_x = 11 - 4*5/2 = 1, U_y = 16 - 1 = 15.
    # Tie term: (3^3 - 3) / (8*7) = 24/56; sigma = sqrt(4*4/12 * (9 - 24/56)) = 3.3806.
    # z = (15 - 8 - 0.5) / 3.3806 = 1.9227; p = erfc(z / sqrt 2) = 0.0545.
    res = gate.mann_whitney_u(x, y)
    sigma = math.sqrt(16 / 12 * (9 - 24 / 56))
    assert res.u == 1
    assert res.method == "asymptotic"
    assert res.p_value == pytest.approx(math.erfc((6.5 / sigma) / math.sqrt(2)))
    assert res.p_value == pytest.approx(0.0545, abs=5e-4)


def test_exact_distribution_counts_every_ordering_once():
    counts = gate._u_counts(5, 4)
    assert sum(counts) == math.comb(9, 4) == 126
    assert counts == counts[::-1]  # U and n1*n2 - U are equally likely
    assert counts[:4] == [1, 1, 2, 3]


def test_smallest_p_is_why_three_repeats_can_never_fail():
    # With 3 against 3 the most extreme ordering has probability 1/C(6,3) = 1/20: p >= 0.1.
    assert gate.smallest_p(3, 3) == pytest.approx(0.1)
    # 4 against 4: 2/70 = 0.0286 < 0.05, so 4 repeats can reach significance.
    assert gate.smallest_p(4, 4) == pytest.approx(2 / 70)


def test_bootstrap_interval_of_an_enumerable_case():
    # Baseline [10]: every resample's median is 10. Head [10, 12]: a resample of two is
    # (10,10) -> 10, (10,12) or (12,10) -> 11, (12,12) -> 12, with chances 1/4, 1/2, 1/4.
    # Changes: 0 % (p 0.25), +10 % (p 0.5), +20 % (p 0.25): the 2.5th percentile is 0 and the
    # 97.5th is +20 % (each end holds a quarter of the mass, far more than 2.5 %).
    lo, hi = gate.bootstrap_change_ci([10], [10, 12])
    assert lo == pytest.approx(0.0)
    assert hi == pytest.approx(0.2)
    # No spread at all: the interval is the change itself.
    assert gate.bootstrap_change_ci([4, 4, 4], [5, 5, 5]) == pytest.approx((0.25, 0.25))


def _energy(base, head, **kw):
    return gate.compare({"energy_per_inference_j": base}, {"energy_per_inference_j": head},
                        "main @ abc", **kw)


def test_a_significant_regression_beyond_tolerance_fails():
    base = [1.00, 1.01, 0.99, 1.02, 0.98]
    head = [1.20, 1.21, 1.19, 1.22, 1.18]
    c = _energy(base, head)
    row = c.rows[0]
    # Medians 1.00 and 1.20: +20 %. Every head value is above every base value, so U = 25
    # and the exact p is 2/C(10,5) = 2/252 = 0.0079.
    assert row.change_pct == pytest.approx(20.0)
    assert row.p_value == pytest.approx(2 / 252)
    assert row.verdict == gate.FAIL
    assert c.verdict == gate.FAIL and c.exit_code == 1


def test_a_significant_change_within_tolerance_passes():
    base = [1.00, 1.01, 0.99, 1.02, 0.98]
    head = [1.03, 1.04, 1.02, 1.05, 1.035]  # +3 %: real but within the 5 % tolerance
    c = _energy(base, head)
    assert c.rows[0].p_value < 0.05
    assert c.verdict == gate.PASS and c.exit_code == 0


def test_a_regression_within_the_noise_is_inconclusive_not_failed():
    base = [100, 70, 130, 90, 110]
    head = [108, 75, 140, 97, 119]  # median +8 % but the repeats overlap almost entirely
    c = _energy(base, head)
    row = c.rows[0]
    assert row.change_pct == pytest.approx(8.0)
    assert row.p_value > 0.05
    assert row.verdict == gate.INCONCLUSIVE and "within the noise" in row.reason
    assert c.verdict == gate.INCONCLUSIVE and c.exit_code == 3


def test_too_few_repeats_is_inconclusive_with_the_number_needed():
    c = _energy([1, 1.01, 0.99], [2, 2.01, 1.99])
    assert c.verdict == gate.INCONCLUSIVE
    assert "too few repeats" in c.rows[0].reason and "--repeat 4" in c.rows[0].reason


def test_throughput_is_worse_when_lower():
    kpi = gate.KPI_BY_KEY["throughput_per_s"]
    row = gate.compare_kpi(kpi, [100, 101, 99, 100, 102], [80, 81, 79, 80, 82])
    assert row.change_pct == pytest.approx(-20.0)
    assert row.verdict == gate.FAIL
    row = gate.compare_kpi(kpi, [100, 101, 99, 100, 102], [120, 121, 119, 120, 122])
    assert row.verdict == gate.PASS and row.reason == "improved"


def test_missing_values_and_unmeasured_kpis():
    c = gate.compare({"energy_per_inference_j": [1, 1, 1, 1], "p99_ms": [5, 5, 5, 5]},
                     {"energy_per_inference_j": [1, 1, 1, 1], "p99_ms": [5, None, 5, 5]}, "x")
    p99 = c.rows[1]
    assert p99.verdict == gate.INCONCLUSIVE and "without a value" in p99.reason
    assert c.rows[2].verdict == gate.NOT_MEASURED  # throughput: on neither side
    assert c.verdict == gate.INCONCLUSIVE
    # Energy per inference is the point of the gate: not measured is never a pass.
    c = gate.compare({}, {}, "x")
    assert c.verdict == gate.INCONCLUSIVE and "--count" in c.reason


def test_markdown_report_has_the_same_table_as_the_text():
    c = _energy([1.00, 1.01, 0.99, 1.02, 0.98], [1.20, 1.21, 1.19, 1.22, 1.18])
    md = gate.render_markdown(c)
    text = gate.render_text(c)
    md_rows = [line.strip("|").split(" | ") for line in md.splitlines()
               if line.startswith("| ") and not line.startswith("| KPI")]
    md_rows = [tuple(cell.strip() for cell in row) for row in md_rows]
    assert md_rows == gate.table_cells(c)
    for row in gate.table_cells(c):  # and the text table prints the very same cells
        assert all(cell in text for cell in row)
    assert md_rows[0][:4] == ("GPU energy per inference (J)", "1.0000", "1.2000", "+20.0 %")
    assert "fail" in md.splitlines()[0]


def test_comparison_round_trips_through_json():
    c = _energy([1.00, 1.01, 0.99, 1.02, 0.98], [1.20, 1.21, 1.19, 1.22, 1.18])
    again = gate.Comparison.from_dict(c.as_dict())
    assert gate.table_cells(again) == gate.table_cells(c)
    assert again.verdict == c.verdict


def test_estimated_energy_is_shown_but_never_gated():
    assert gate.estimated_kpis(["counter", "counter"]) == {}
    estimated = gate.estimated_kpis(["counter", "counter+power"])
    assert list(estimated) == ["energy_per_inference_j"]
    c = gate.compare({"energy_per_inference_j": [1.00, 1.01, 0.99, 1.02, 0.98]},
                     {"energy_per_inference_j": [1.20, 1.21, 1.19, 1.22, 1.18]}, "x",
                     estimated=estimated)
    row = c.rows[0]
    assert row.change_pct == pytest.approx(20.0)  # still computed and shown
    assert row.verdict == gate.INCONCLUSIVE and "power readings" in row.reason
    assert c.verdict == gate.INCONCLUSIVE
