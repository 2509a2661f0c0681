"""Merging two hours of KPI sums, every field, and the KPIs derived from the merge: cases that
mutation testing showed untested (tests/mutation/SURVIVORS.md). Arithmetic by hand.

Hour 1 (host A, PUE 1.5, 400 g/kWh): 100 requests (98 ok, 2 failed), 5,000 generated and 2,000
prompt tokens, latency sum 1,500 ms over 100, GPU 720,000 J + CPU/RAM 36,000 J = 0.21 kWh IT,
facility 0.315 kWh, 126 g, $4, measured the whole hour.
Hour 2 (host B, PUE 1.1, 100 g/kWh, simulated): 50 requests (49 ok, 1 failed), no token counts,
latency sum 900 ms over 50, GPU 360,000 J = 0.1 kWh, facility 0.11 kWh, 11 g, $1, measured
half an hour.
"""

from __future__ import annotations

import pytest

from greenops.kpis import histogram, metrics
from greenops.kpis.metrics import Totals


def hour_1() -> Totals:
    return Totals(requests=100, success=98, failure=2, tokens=5000, token_requests=100,
                  prompt_tokens=2000, server_energy_j=1000.0, latency_sum_ms=1500.0,
                  latency_n=100, measured_s=3600.0, util_sum=3000.0, util_n=60,
                  gpu_minutes=60, gpu_energy_j=720_000.0, cpu_ram_energy_j=36_000.0,
                  cpu_ram_method="CPU rapl", facility_energy_j=1_134_000.0, co2e_g=126.0,
                  cost_usd=4.0, cost_source="price A", pue_source="1.5 (site A)",
                  intensity_source="400 g/kWh (grid A)")


def hour_2() -> Totals:
    return Totals(requests=50, success=49, failure=1, latency_sum_ms=900.0, latency_n=50,
                  measured_s=1800.0, util_sum=1200.0, util_n=30, gpu_minutes=30,
                  gpu_energy_j=360_000.0, facility_energy_j=396_000.0, co2e_g=11.0,
                  cost_usd=1.0, cost_source="price B", pue_source="1.1 (site B)",
                  intensity_source="100 g/kWh (grid B)", simulated=True)


def test_merge_adds_every_sum_and_keeps_every_source():
    m = metrics.merge([hour_1(), hour_2()])
    assert (m.requests, m.success, m.failure) == (150, 147, 3)
    assert (m.tokens, m.token_requests, m.prompt_tokens) == (5000, 100, 2000)
    assert m.server_energy_j == 1000.0
    assert (m.latency_sum_ms, m.latency_n) == (2400.0, 150)
    assert (m.util_sum, m.util_n, m.gpu_minutes) == (4200.0, 90, 90)
    assert (m.gpu_energy_j, m.cpu_ram_energy_j) == (1_080_000.0, 36_000.0)
    assert (m.facility_energy_j, m.co2e_g, m.cost_usd) == (1_530_000.0, 137.0, 5.0)
    assert m.measured_s == 5400.0
    assert m.simulated is True  # one simulated hour makes the merge simulated
    assert m.pue_source == "1.5 (site A); 1.1 (site B)"
    assert m.intensity_source == "400 g/kWh (grid A); 100 g/kWh (grid B)"
    assert m.cost_source == "price A; price B" and m.cpu_ram_method == "CPU rapl"
    # Either order gives the same sums.
    again = metrics.merge([hour_2(), hour_1()])
    assert (again.prompt_tokens, again.server_energy_j, again.tokens) == (2000, 1000.0, 5000)


def test_token_counts_add_up_over_rows_that_have_them():
    a, b = hour_1(), hour_1()
    b.prompt_tokens, b.server_energy_j = 500, 250.0
    m = metrics.merge([a, b])
    assert (m.prompt_tokens, m.server_energy_j, m.tokens) == (2500, 1250.0, 10_000)


def test_an_hour_of_unknown_length_makes_the_measured_time_unknown():
    unknown = hour_2()
    unknown.measured_s = None
    assert metrics.merge([hour_1(), unknown]).measured_s is None
    assert metrics.merge([hour_1(), hour_2()]).measured_s == 5400.0


def test_long_source_lists_are_cut_to_the_column_size():
    rows = [Totals(cost_source="x" * 150 + str(i)) for i in range(3)]
    assert len(metrics.merge(rows).cost_source) == 300  # KpiRollup.cost_source max_length


def test_kpis_of_the_merged_hours():
    k = metrics.derive(metrics.merge([hour_1(), hour_2()]), 7200)
    it_j = 1_080_000.0 + 36_000.0  # 1,116,000 J = 0.31 kWh
    assert k["gpu_hours"] == 1.5
    assert k["gpu_util_pct"] == pytest.approx(4200 / 90)
    assert k["latency_mean_ms"] == pytest.approx(16.0)  # 2400 / 150
    assert k["energy_kwh"] == pytest.approx(0.31)
    assert k["gpu_energy_kwh"] == pytest.approx(0.3) and k["cpu_ram_energy_kwh"] == 0.01
    assert k["facility_energy_kwh"] == pytest.approx(0.425)
    assert k["pue"] == pytest.approx(0.425 / 0.31)
    assert k["intensity_g_per_kwh"] == pytest.approx(137 / 0.425)
    assert k["co2e_kg"] == pytest.approx(0.137)
    assert k["cost_usd"] == 5.0 and k["cost_source"] == "price A; price B"
    # Rates over the 5,400 s measured, not the 7,200 s period.
    assert k["throughput_per_s"] == pytest.approx(150 / 5400)
    assert k["generation_tokens_per_s"] == pytest.approx(5000 / 5400)
    assert k["prompt_tokens_per_s"] == pytest.approx(2000 / 5400)
    assert k["server_energy_kwh"] == pytest.approx(1000 / 3_600_000)
    assert k["inference_energy_kwh"] == pytest.approx(0.31)
    assert k["energy_per_inference_j"] == pytest.approx(it_j / 150)  # 7,440 J
    assert k["co2e_per_1k_inferences_g"] == pytest.approx(137 / 150 * 1000)
    assert k["cost_per_1k_inferences_usd"] == pytest.approx(5 / 150 * 1000)
    # Only hour 1's 100 requests counted tokens: 100/150 of the energy over 5,000 tokens.
    assert k["energy_per_token_j"] == pytest.approx(it_j * 100 / 150 / 5000)  # 148.8 J
    assert k["simulated"] is True


def test_a_rollup_row_carries_its_effective_factors():
    t = hour_1()
    t.latency_buckets = histogram.from_buckets([10.0, 20.0], [90, 10, 0], cumulative=False)
    row = t.as_row()
    assert row["pue"] == pytest.approx(1.5)  # 1,134,000 / 756,000
    assert row["intensity_g_per_kwh"] == pytest.approx(400.0)  # 126 g / 0.315 kWh
    assert row["requests"] == 100 and row["cost_source"] == "price A"
    # Stored in the JSON form the rollup column holds.
    assert row["latency_buckets"] == {"le_ms": [10.0, 20.0], "cumulative": [90, 100, 100]}


def test_team_rows_merge_the_inference_share_of_their_energy():
    # A team row says which part of its energy served inference (training is not divided by
    # inferences); a workload row (inference_energy_j None) counts all of its own.
    team_hour = Totals(requests=100, gpu_energy_j=1000.0, co2e_g=10.0, cost_usd=2.0,
                       inference_energy_j=400.0, inference_co2e_g=4.0, inference_cost_usd=0.8)
    workload_hour = Totals(requests=50, gpu_energy_j=500.0, co2e_g=5.0, cost_usd=1.0)
    m = metrics.merge([team_hour, workload_hour])
    # 400 + 500 J, 4 + 5 g, $0.8 + $1.0
    assert (m.inference_energy_j, m.inference_co2e_g) == (900.0, 9.0)
    assert m.inference_cost_usd == pytest.approx(1.8)
    k = metrics.derive(m, 7200)
    assert k["energy_per_inference_j"] == 6.0  # 900 J / 150
    assert k["co2e_per_1k_inferences_g"] == 60.0  # 9 g / 150 x 1000
    assert k["cost_per_1k_inferences_usd"] == pytest.approx(12.0)  # $1.8 / 150 x 1000
    unpriced = Totals(requests=10, gpu_energy_j=10.0, inference_energy_j=5.0,
                      inference_cost_usd=None)
    assert metrics.merge([team_hour, unpriced]).inference_cost_usd is None
    assert metrics.merge([workload_hour]).inference_energy_j is None


def test_a_free_hour_adds_nothing_to_the_cost():
    # $0 (an owned, switched-off host) is a known cost of zero, not a missing one.
    assert metrics.merge([Totals(cost_usd=0.0), Totals(cost_usd=2.0)]).cost_usd == 2.0


def test_derived_kpis_name_the_period_and_the_counts():
    k = metrics.derive(metrics.merge([hour_1(), hour_2()]), 7200)
    assert (k["period_s"], k["measured_s"]) == (7200, 5400.0)
    assert k["coverage_share"] == pytest.approx(0.75)  # 5,400 of 7,200 s measured
    assert (k["requests"], k["success"], k["failure"], k["tokens"]) == (150, 147, 3, 5000)
    assert k["prompt_tokens"] == 2000


def test_derived_kpis_carry_their_sources_and_say_no_price():
    k = metrics.derive(metrics.merge([hour_1(), hour_2()]), 7200)
    assert k["pue_source"] == "1.5 (site A); 1.1 (site B)"
    assert k["intensity_source"] == "400 g/kWh (grid A); 100 g/kWh (grid B)"
    assert k["cpu_ram_method"] == "CPU rapl"
    # No cost and no source: the page says why there is no figure.
    unpriced = metrics.derive(Totals(requests=1, cost_usd=None), 3600)
    assert unpriced["cost_usd"] is None and unpriced["cost_source"] == "no price"
    # A known cost with no source keeps the empty source (a free hour is not "no price").
    assert metrics.derive(Totals(cost_usd=0.0), 3600)["cost_source"] == ""


def test_p99_past_the_last_finite_bound_is_flagged():
    t = hour_1()
    # 90 at <= 10 ms, 10 above 20 ms: p99 lies past the last finite bound; p50 does not.
    t.latency_buckets = histogram.from_buckets([10.0, 20.0], [90, 0, 10], cumulative=False)
    k = metrics.derive(t, 3600)
    assert k["latency_p99_above"] is True and k["latency_p50_above"] is False
    assert k["latency_p99_ms"] == 20.0  # Prometheus answers the highest finite bound


def test_an_inference_share_without_carbon_counts_zero_grams():
    t = Totals(requests=10, gpu_energy_j=100.0, co2e_g=50.0, inference_energy_j=40.0)
    assert t.inference_figures() == (40.0, 0.0, None)


# Issue 16 (mutation testing): derive 101, 104, 129-131, merge 56, _inference_figures 2, 4.


def test_p50_past_the_last_finite_bound_is_flagged_and_a_p99_inside_is_not():
    t = hour_1()
    # 10 at <= 10 ms, 90 above 20 ms: the median (rank 50) is past the last finite bound.
    t.latency_buckets = histogram.from_buckets([10.0, 20.0], [10, 0, 90], cumulative=False)
    assert metrics.derive(t, 3600)["latency_p50_above"] is True
    # All 100 at <= 10 ms: neither quantile is past the bounds.
    t.latency_buckets = histogram.from_buckets([10.0, 20.0], [100, 0, 0], cumulative=False)
    k = metrics.derive(t, 3600)
    assert (k["latency_p99_above"], k["latency_p50_above"]) == (False, False)


QUEUE_A = {"sum_ms": 300.0, "n": 3, "hist": {"le_ms": [100.0, 200.0], "cumulative": [1, 3, 3]}}
QUEUE_B = {"sum_ms": 100.0, "n": 1, "hist": {"le_ms": [100.0, 200.0], "cumulative": [1, 1, 1]}}


def test_derived_kpis_summarise_the_timings():
    # Queue time, 3 requests, 300 ms: mean 100 ms. Buckets (le 100: 1, le 200: 3), as in
    # Prometheus' histogram_quantile: p50 rank 1.5 -> 100 + 100 x (1.5 - 1) / 2 = 125 ms;
    # p99 rank 2.97 -> 100 + 100 x 1.97 / 2 = 198.5 ms; neither past the last bound.
    k = metrics.derive(Totals(timings={"queue": QUEUE_A}), 3600)
    assert k["timings"] == [{"name": "queue", "label": "Queue time", "mean_ms": 100.0,
                             "p50_ms": 125.0, "p99_ms": pytest.approx(198.5),
                             "p50_above": False, "p99_above": False, "n": 3}]


def test_merge_adds_the_timings_name_by_name():
    # 300 + 100 ms over 3 + 1 requests; cumulative buckets (1, 3, 3) + (1, 1, 1) = (2, 4, 4).
    m = metrics.merge([Totals(timings={"queue": QUEUE_A}), Totals(timings={"queue": QUEUE_B})])
    assert (m.timings["queue"]["sum_ms"], m.timings["queue"]["n"]) == (400.0, 4)
    h = histogram.parse(m.timings["queue"]["hist"])
    assert (h.le_ms, h.cumulative) == ((100.0, 200.0), (2.0, 4.0, 4.0))


def test_a_workload_row_merged_with_a_team_row_counts_its_cpu_and_ram_energy():
    # Team row: 400 J of inference energy with no carbon figure (0 g, not unknown).
    # Workload row: 500 J GPU + 100 J CPU/RAM, 5 g: all of it is inference. 400 + 600 = 1000 J.
    team_hour = Totals(requests=100, gpu_energy_j=1000.0, co2e_g=10.0,
                       inference_energy_j=400.0)
    workload_hour = Totals(requests=50, gpu_energy_j=500.0, cpu_ram_energy_j=100.0,
                           co2e_g=5.0)
    m = metrics.merge([team_hour, workload_hour])
    assert (m.inference_energy_j, m.inference_co2e_g) == (1000.0, 5.0)
    assert metrics.merge([team_hour]).inference_co2e_g == 0.0
