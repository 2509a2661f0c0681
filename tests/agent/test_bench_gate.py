"""The efficiency gate's statistics and verdicts (collectors/bench_gate.py), checked against
values worked out by hand and against scipy (the agent implements the tests itself, in the
standard library); and its error rates on simulated noisy runners (SIMULATED data)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from collectors import bench_gate as gate
from greenops.benchmarks import simulation


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


def test_signed_rank_distribution_counts_every_sign_pattern_once():
    # Ranks 1, 2, 3: the 8 sign patterns give W+ = 0 {}, 1 {1}, 2 {2}, 3 {3} and {1,2},
    # 4 {1,3}, 5 {2,3}, 6 {1,2,3}.
    assert gate._signed_rank_counts(3) == (1, 1, 1, 2, 1, 1, 1)
    assert sum(gate._signed_rank_counts(10)) == 2**10


@pytest.mark.parametrize("d", [
    [0.3, -0.1, 0.25, 0.4, 0.05, -0.02, 0.6, 0.11],  # no ties: exact
    [0.2, 0.2, -0.1, 0.3, 0.3, 0.3, 0.05, -0.05, 0.4],  # ties in |d|: normal approximation
])
def test_signed_rank_p_matches_scipy(d):
    p, method = gate._signed_rank_p(d)
    ties = len({abs(x) for x in d}) < len(d)
    ref = stats.wilcoxon(d, alternative="greater",
                         method="approx" if ties else "exact", correction=ties)
    assert method == ("normal" if ties else "exact")
    assert p == pytest.approx(ref.pvalue, rel=1e-9)


def test_one_sided_mann_whitney_matches_scipy():
    x, y = [1.3, 2.2, 0.7, 3.1, 2.8], [0.2, 1.1, 0.5, 1.9, 0.9, 0.4]
    p, method = gate._mann_whitney_upper(x, y)
    ref = stats.mannwhitneyu(x, y, alternative="greater", method="exact")
    assert method == "exact" and p == pytest.approx(ref.pvalue)


def _energy(base, head, **kw):
    return gate.compare({"energy_per_inference_j": base}, {"energy_per_inference_j": head},
                        "main @ abc", **kw)


def test_paired_regression_by_hand():
    # Six pairs with head/base ratios 1.20 1.22 1.18 1.21 1.19 1.25: every log-ratio is above
    # log 1.05, so W+ = 1+...+6 = 21, the largest of 2^6 = 64 equally likely sign patterns:
    # one-sided p = 1/64 = 0.015625 (scipy.stats.wilcoxon gives the same).
    ratios = [1.20, 1.22, 1.18, 1.21, 1.19, 1.25]
    c = _energy([0.1] * 6, [0.1 * r for r in ratios], paired=True)
    row = c.rows[0]
    assert row.p_value == pytest.approx(1 / 64)
    assert row.verdict == gate.FAIL and c.verdict == gate.FAIL and c.exit_code == 1
    # Interval: c = 19 is the smallest count with P(W+ >= c) <= 0.05 (P(>=19) = 3/64 =
    # 0.047, P(>=18) = 5/64), so the 90 % interval runs from the 21-19+1 = 3rd to the 19th of
    # the 21 sorted Walsh averages. In ratios (geometric means): the smallest are 1.18,
    # sqrt(1.18*1.19) = 1.1850, sqrt(1.18*1.20) = 1.18996 (just under 1.19); the largest 1.25,
    # sqrt(1.22*1.25) = 1.2349, sqrt(1.21*1.25) = 1.22984 (above 1.22).
    assert row.interval_pct[0] == pytest.approx((math.sqrt(1.18 * 1.20) - 1) * 100)
    assert row.interval_pct[1] == pytest.approx((math.sqrt(1.21 * 1.25) - 1) * 100)
    # The change is the Hodges-Lehmann estimate: the 11th of the 21 Walsh averages.
    logs = [math.log(r) for r in ratios]
    walsh = sorted((logs[i] + logs[j]) / 2 for i in range(6) for j in range(i, 6))
    assert row.change_pct == pytest.approx((math.exp(walsh[10]) - 1) * 100)
    assert 20.4 < row.change_pct < 20.6  # sqrt(1.20 * 1.21) = 1.2050
    assert c.paired and not c.crosses_time


def test_drift_cancels_in_pairs_and_reads_as_change_across_time():
    # A runner that gets 2 % slower every run, and code that did not change at all. Paired,
    # in the agent's order (pair i: AB for even i, BA for odd i), the head/base ratio is
    # 1.02 then 1/1.02 alternately: no change. Measured as a stored baseline (10 runs) and
    # then this run's 10, the head's runs are 10 runs (1.02^10 = +21.9 %) later.
    drift = [1.02**t for t in range(20)]
    base = [drift[2 * i] if i % 2 == 0 else drift[2 * i + 1] for i in range(10)]
    head = [drift[2 * i + 1] if i % 2 == 0 else drift[2 * i] for i in range(10)]
    paired = _energy(base, head, paired=True)
    assert paired.verdict == gate.PASS and abs(paired.rows[0].change_pct) < 1.0
    crossed = _energy(drift[:10], drift[10:], paired=False)
    assert crossed.verdict == gate.FAIL
    assert crossed.rows[0].change_pct == pytest.approx((1.02**10 - 1) * 100)
    assert crossed.crosses_time
    assert "this comparison crosses time" in gate.render_text(crossed)
    assert "crosses time" in gate.render_markdown(crossed)
    assert "crosses time" not in gate.render_text(paired)


def test_unpaired_regression_beyond_tolerance_fails():
    base = [1.00, 1.01, 0.99, 1.02, 0.98]
    head = [1.20, 1.21, 1.19, 1.22, 1.18]
    c = _energy(base, head)
    row = c.rows[0]
    # Every head value / 1.05 is still above every base value: U = 25, the most extreme of
    # C(10, 5) = 252 orderings: one-sided p = 1/252 = 0.0040.
    assert row.p_value == pytest.approx(1 / 252)
    assert row.verdict == gate.FAIL and c.verdict == gate.FAIL and c.exit_code == 1
    # The Hodges-Lehmann shift: the median of the 25 head/base ratios is 1.20/1.00.
    assert row.change_pct == pytest.approx(20.0)


def test_a_significant_change_within_tolerance_passes():
    base = [1.00, 1.01, 0.99, 1.02, 0.98]
    head = [1.03, 1.04, 1.02, 1.05, 1.035]  # +3 %: real but within the 5 % tolerance
    c = _energy(base, head, paired=True)
    assert c.rows[0].p_value > 0.05  # not beyond 5 %
    assert c.verdict == gate.PASS and c.exit_code == 0


def test_a_regression_within_the_noise_is_inconclusive_and_asks_for_more_pairs():
    base = [100, 70, 130, 90, 110]
    head = [108, 75, 140, 97, 119]  # +8 % in every pair but 7.1 % in one: 5 pairs
    c = _energy(base, head, paired=True)
    row = c.rows[0]
    # log-ratios minus log 1.05: four positive (8 %, 7.7 %, 7.8 %, 8.2 %) and 75/70 = 7.1 %
    # also above 5 %: all five positive, W+ = 15, p = 1/32 = 0.031 -- significant. So shrink
    # the effect: see the second case.
    assert row.p_value == pytest.approx(1 / 32) and row.verdict == gate.FAIL
    head = [106, 71, 137, 96, 116]  # +6, +1.4, +5.4, +6.7, +5.5 %
    c = _energy(base, head, paired=True)
    row = c.rows[0]
    assert row.change_pct > 5.0 and row.p_value > 0.05
    assert row.verdict == gate.INCONCLUSIVE and "more repeats would decide" in row.reason
    assert c.verdict == gate.INCONCLUSIVE and c.exit_code == 3
    assert gate.wants_more_pairs(c)


def test_too_few_repeats_is_inconclusive_with_the_number_needed():
    # Paired: 4 pairs can at best give p = 1/16 = 0.0625; 5 give 1/32 = 0.031.
    c = _energy([1, 1.01, 0.99, 1], [2, 2.01, 1.99, 2], paired=True)
    assert c.verdict == gate.INCONCLUSIVE
    assert "too few repeats" in c.rows[0].reason and "--repeat 5" in c.rows[0].reason
    assert not gate.wants_more_pairs(c)  # nothing to test yet: not "more pairs would decide"
    # Unpaired: 3 against 3 at best 1/C(6,3) = 0.05, not below it; 4 against 4: 1/70.
    c = _energy([1, 1.01, 0.99], [2, 2.01, 1.99])
    assert "--repeat 4" in c.rows[0].reason


def test_throughput_is_worse_when_lower():
    kpi = gate.KPI_BY_KEY["throughput_per_s"]
    row, test = gate.compare_kpi(kpi, [100, 101, 99, 100, 102], [80, 81, 79, 80.5, 82],
                                 paired=True)
    assert row.change_pct == pytest.approx(-20.0, abs=0.2)
    assert row.p_value == pytest.approx(1 / 32)  # all five pairs ~100/80 = +25 % worse


def test_one_decision_secondary_kpis_are_shown_not_gated():
    base = {"energy_per_inference_j": [0.1] * 6, "p99_ms": [10, 10.1, 9.9, 10, 10.2, 9.8]}
    head = {"energy_per_inference_j": [0.1] * 6, "p99_ms": [13, 13.2, 12.8, 13.1, 13.3, 12.9]}
    c = gate.compare(base, head, "x", paired=True)
    energy, p99 = c.rows[0], c.rows[1]
    assert energy.verdict == gate.PASS and energy.gated
    # p99 is ~30 % worse in every pair, no two ratios equal (p = 1/64) but secondary: shown
    # as worse, not failing.
    assert not p99.gated and p99.verdict == gate.WORSE and p99.p_value == pytest.approx(1 / 64)
    assert c.verdict == gate.PASS and c.exit_code == 0
    assert gate.table_cells(c)[1][5].startswith("secondary, worse: 30.")
    # Gated on p99 too: two measurements, Holm: the smaller p (1/64) times 2 = 1/32 < 0.05.
    c = gate.compare(base, head, "x", paired=True, gated=["p99_ms"])
    assert c.rows[1].verdict == gate.FAIL and c.rows[1].p_adjusted == pytest.approx(2 / 64)
    assert c.verdict == gate.FAIL


def test_holm_over_measurements_not_over_kpis():
    # Energy 10-14 % worse in all 5 pairs (no ties): p = 1/32 = 0.031 alone, a fail.
    energy_b, energy_h = [0.1] * 5, [0.110, 0.111, 0.112, 0.113, 0.114]
    c = _energy(energy_b, energy_h, paired=True)
    assert c.verdict == gate.FAIL
    # Gate throughput and cost per 1k too, both slower in every pair: they are one
    # measurement (wall time), so Holm has m = 2 hypotheses, not 3. Sorted p: 1/32, 1/32 ->
    # adjusted 2/32 = 0.0625 for both: neither is significant any more.
    base = {"energy_per_inference_j": energy_b, "throughput_per_s": [100.0] * 5,
            "cost_per_1k_usd": [0.010] * 5}
    head = {"energy_per_inference_j": energy_h, "throughput_per_s": [90.0, 89, 91, 88, 92],
            "cost_per_1k_usd": [0.0111, 0.0112, 0.0110, 0.0113, 0.0109]}
    c = gate.compare(base, head, "x", paired=True,
                     gated=["throughput_per_s", "cost_per_1k_usd"])
    assert [r.p_adjusted for r in c.rows if r.gated and r.p_adjusted is not None] == \
        pytest.approx([2 / 32, 2 / 32, 2 / 32])
    assert c.rows[0].verdict == gate.INCONCLUSIVE and c.verdict == gate.INCONCLUSIVE
    assert gate.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx(
        {"a": 0.03, "c": 0.06, "b": 0.06})  # 3x0.01, 2x0.03, max(0.06, 1x0.04)


def test_missing_values_and_unmeasured_kpis():
    c = gate.compare({"energy_per_inference_j": [1] * 5, "p99_ms": [5] * 5},
                     {"energy_per_inference_j": [1] * 5, "p99_ms": [5, None, 5, 5, 5]}, "x",
                     gated=["p99_ms"], paired=True)
    p99 = c.rows[1]
    assert p99.verdict == gate.INCONCLUSIVE and "without a value" in p99.reason
    assert c.rows[2].verdict == gate.NOT_MEASURED  # throughput: on neither side
    assert c.verdict == gate.INCONCLUSIVE
    # Energy per inference is the point of the gate: not measured is never a pass.
    c = gate.compare({}, {}, "x")
    assert c.verdict == gate.INCONCLUSIVE and "--count" in c.reason


def test_a_reason_that_applies_to_every_kpi_is_said_once():
    c = gate.all_inconclusive("no baseline: main.json does not exist", "file main.json",
                              head={"energy_per_inference_j": [0.1] * 5})
    text = gate.render_text(c)
    assert text.count("main.json does not exist") == 1
    assert gate.render_markdown(c).count("main.json does not exist") == 1
    assert all(r.reason == "" for r in c.rows)


def test_markdown_report_has_the_same_table_as_the_text():
    c = _energy([1.00, 1.01, 0.99, 1.02, 0.98], [1.20, 1.21, 1.19, 1.22, 1.18], paired=True)
    md = gate.render_markdown(c)
    text = gate.render_text(c)
    md_rows = [line.strip("|").split(" | ") for line in md.splitlines()
               if line.startswith("| ") and not line.startswith("| KPI")]
    md_rows = [tuple(cell.strip() for cell in row) for row in md_rows]
    assert md_rows == gate.table_cells(c)
    for row in gate.table_cells(c):  # and the text table prints the very same cells
        assert all(cell in text for cell in row)
    assert md_rows[0][:3] == ("GPU energy per inference (J)", "1.0000", "1.2000")
    assert "fail" in md.splitlines()[0]
    assert "5 interleaved pairs" in md and "Wilcoxon signed-rank" in md


def test_comparison_round_trips_through_json():
    c = _energy([1.00, 1.01, 0.99, 1.02, 0.98], [1.20, 1.21, 1.19, 1.22, 1.18], paired=True)
    again = gate.Comparison.from_dict(c.as_dict())
    assert gate.table_cells(again) == gate.table_cells(c)
    assert (again.verdict, again.paired, again.pairs) == (c.verdict, True, 5)
    # A comparison stored before pairs and secondary KPIs existed still reads.
    old = c.as_dict()
    for row in old["rows"]:
        del row["gated"], row["p_adjusted"], row["measurement"]
    del old["paired"], old["crosses_time"], old["pairs"]
    assert gate.Comparison.from_dict(old).verdict == gate.FAIL


def test_estimated_energy_is_shown_but_never_gated():
    assert gate.estimated_kpis(["counter", "counter"]) == {}
    estimated = gate.estimated_kpis(["counter", "counter+power"])
    assert list(estimated) == ["energy_per_inference_j"]
    c = gate.compare({"energy_per_inference_j": [1.00, 1.01, 0.99, 1.02, 0.98]},
                     {"energy_per_inference_j": [1.20, 1.21, 1.19, 1.22, 1.18]}, "x",
                     excluded=estimated, paired=True)
    row = c.rows[0]
    assert row.verdict == gate.INCONCLUSIVE and "power readings" in row.reason
    assert c.verdict == gate.INCONCLUSIVE
    assert not gate.wants_more_pairs(c)  # more pairs cannot turn an estimate into a measurement


# --- error rates on simulated noisy runners (SIMULATED data, seeded) ---------------------------


def test_simulated_runner_noise_is_as_described():
    import numpy as np

    rng = np.random.default_rng(1)
    noise = simulation.Noise(drift_max=0.0, walk_sd=0.0, outlier_rate=0.0)
    base, _ = simulation.simulated_sides(rng, 2000, 10, 0.0, True, noise)
    spread = base.max(axis=1) / base.min(axis=1) - 1
    # sigma up to 8 %: 10 runs of one side spread by up to ~25 % (the widest gates more).
    assert 0.08 < float(np.median(spread)) < 0.2
    assert 0.2 < float(np.quantile(spread, 0.9)) < 0.35


@pytest.mark.parametrize(("change_pct", "fails_at_most", "fails_at_least"), [
    (0.0, 0.05, 0.0),  # no change: false alarms <= 5 %
    (3.0, 0.05, 0.0),  # inside the 5 % tolerance: fails <= 5 %
    (20.0, 1.0, 0.95),  # a 20 % regression: caught >= 95 %
])
def test_error_rates_on_noisy_simulated_runners(change_pct, fails_at_most, fails_at_least):
    rates = simulation.simulate(change_pct, gates=400)
    assert rates.gates >= 200
    assert fails_at_least <= rates.fail <= fails_at_most, rates


def test_why_interleaving_is_the_default():
    # The same noise with a stored baseline measured before this run: drift reads as change.
    crossed = simulation.simulate(0.0, gates=400, interleaved=False)
    paired = simulation.simulate(0.0, gates=400)
    assert crossed.fail > 0.05 > paired.fail


def test_throughputs_tolerance_and_reason_are_in_its_own_terms():
    kpi = gate.KPI_BY_KEY["throughput_per_s"]
    base = [100.0, 101, 99, 100.5, 99.5, 100.2]
    # -6 % in every pair (no two ratios equal): below the -5 % tolerance in all six: p = 1/64.
    head = [b * f for b, f in zip(base, [0.94, 0.941, 0.939, 0.942, 0.938, 0.943], strict=True)]
    c = gate.compare({"energy_per_inference_j": [0.1] * 6, "throughput_per_s": base},
                     {"energy_per_inference_j": [0.1] * 6, "throughput_per_s": head}, "x",
                     paired=True, gated=["throughput_per_s"])
    row = c.rows[2]
    assert row.p_value == pytest.approx(1 / 64) and row.verdict == gate.FAIL
    assert row.reason.startswith(f"{abs(row.change_pct):.1f} % lower, beyond the 5 % tolerance")
    # -4.7 .. -4.9 % in every pair: inside "down to -5 %", though base/head is +4.9 .. +5.2 %
    # (1/0.951 = 1.0515): the tolerance is read in the KPI's own terms, not as base/head.
    head = [b * f for b, f in zip(base, [0.951, 0.952, 0.9505, 0.9515, 0.9525, 0.953],
                                  strict=True)]
    row, _ = gate.compare_kpi(kpi, base, head, paired=True)
    assert row.p_value > 0.5  # every pair is above 0.95 x base: not beyond the tolerance


def test_a_pass_must_rule_out_four_times_the_tolerance():
    # Eight pairs scattered from -25 % to +45 %: the estimate (+1.8 %) is inside the 5 %
    # tolerance, but for n = 8, c = 31 (P(W+ >= 31) = P(W+ <= 5) = 10/256 = 0.039 <= 0.05 <
    # P(W+ >= 30) = 14/256 = 0.055), so the 90 % interval ends at the 31st of the 36 Walsh
    # averages, the 6th largest: 1.45, sqrt(1.45*1.35) = 1.399, 1.35, sqrt(1.45*1.25) = 1.346,
    # sqrt(1.35*1.25) = 1.299, then 1.25 itself: +25 %, which does not rule out a 20 %
    # regression. Such a "pass" would be a guess: undecided, and the agent runs more pairs.
    ratios = [0.75, 1.35, 0.8, 1.45, 0.85, 1.25, 1.0, 0.9]
    c = _energy([0.1] * 8, [0.1 * r for r in ratios], paired=True)
    row = c.rows[0]
    assert row.interval_pct[1] == pytest.approx(25.0)
    assert 0 < row.change_pct < 5
    assert row.verdict == gate.INCONCLUSIVE
    assert "too noisy to rule out 20 %" in row.reason
    assert gate.wants_more_pairs(c)


def test_the_agents_gate_needs_no_numpy_scipy_or_django():
    # GPU hosts install the agent alone: the gate's statistics are the standard library's.
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, collectors.bench, collectors.bench_gate, collectors.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numpy', 'scipy', 'django', 'greenops'}))")
    root = Path(__file__).resolve().parents[2]  # the repository (tests/agent/ -> tests/ -> root)
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
