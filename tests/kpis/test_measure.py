"""Energy, carbon and cost of a workload from rollups: hand-computed figures.

The scenario (used by the rollup and job tests too):
  host A: 2 GPUs, PUE 1.5, 400 g/kWh, $8/h        host B: 1 GPU, PUE 1.1, 100 g/kWh, $2/h
  workload W runs on GPU A0 and on all of host B.
  In hour H:  A0 1,800,000 J (60 minutes, 50 % util)   A1 3,600,000 J (not W's)
              B0   720,000 J (30 minutes, 20 % util)
  CPU+RAM:    A 360,000 + 72,000 J (W's share: 1 of 2 GPUs -> 216,000 J)   B 180,000 J (all W's)
  IT energy:  A 2,016,000 J = 0.56 kWh          B 900,000 J = 0.25 kWh
  Facility:   A 0.56 x 1.5 = 0.84 kWh           B 0.25 x 1.1 = 0.275 kWh     total 1.115 kWh
  Carbon:     A 0.84 x 400 = 336 g              B 0.275 x 100 = 27.5 g       total 363.5 g
  Cost:       host A ran in H: $8 x 1 h x 1/2 (W has 1 of its 2 GPUs) = $4
              host B ran in H (30 min: a started hour is billed): $2 x 1 h x 1/1 = $2   total $6
  Inference:  windows of 1000 + 2000 + 635 = 3635 requests in H
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from greenops.kpis import measure, metrics
from tests.support.kpis import (
    PRICES,
    H,
    add_windows,
    build_scenario,
    stand_in_factors,
)


@pytest.fixture
def scenario(team):
    return build_scenario(team)


def test_workload_energy_carbon_and_cost_hand_computed(scenario):
    gpus = list(scenario["workload"].gpu_queryset().select_related("host"))
    t = measure.measure_gpus(gpus, H, H + dt.timedelta(hours=1), stand_in_factors())
    assert t.gpu_energy_j == pytest.approx(2_520_000)
    assert t.cpu_ram_energy_j == pytest.approx(396_000)
    assert t.energy_j / metrics.J_PER_KWH == pytest.approx(0.81)
    # PUE and intensity applied exactly once, per host: applying either twice would give
    # 1.26 / 0.3025 kWh or 134,400 g instead.
    assert t.facility_energy_j / metrics.J_PER_KWH == pytest.approx(1.115)
    assert t.co2e_g == pytest.approx(363.5)
    assert t.pue == pytest.approx(1.115 / 0.81)
    assert t.intensity_g_per_kwh == pytest.approx(363.5 / 1.115)
    assert "test table: A" in t.intensity_source and "test table: B" in t.intensity_source
    assert t.util_sum / t.util_n == pytest.approx((50 * 60 + 20 * 30) / 90)
    assert t.gpu_minutes == 90
    # One cost model with the Costs page: host-hours, not GPU-minutes (which gave $5).
    assert t.cost_usd == pytest.approx(6.0)
    assert "CPU rapl, RAM constant" in t.cpu_ram_method


def test_a_host_without_price_makes_the_cost_unknown_never_partial(scenario):
    gpus = list(scenario["workload"].gpu_queryset().select_related("host"))
    t = measure.measure_gpus(gpus, H, H + dt.timedelta(hours=1),
                             stand_in_factors({"A": PRICES["A"]}))
    assert t.cost_usd is None and t.cost_source == "no price for B"
    assert metrics.derive(t, 3600)["cost_per_1k_inferences_usd"] is None


def test_energy_per_inference_over_a_window_with_known_counts(scenario):
    w = scenario["workload"]
    add_windows(w, H, with_start=True)
    add_windows(w, H + dt.timedelta(hours=1), requests=(999,))  # outside the window
    t = measure.measure_gpus(list(w.gpu_queryset().select_related("host")), H,
                             H + dt.timedelta(hours=1), stand_in_factors())
    measure.add_inference(t, [w.id], H, H + dt.timedelta(hours=1))
    k = metrics.derive(t, 3600)
    assert k["requests"] == 3635
    # Three windows of 10 minutes: 3,635 requests over 1,800 measured seconds.
    assert k["measured_s"] == 1800.0 and k["coverage"] == "measured 30 min of 1 h"
    assert k["throughput_per_s"] == pytest.approx(3635 / 1800)
    assert k["energy_per_inference_j"] == pytest.approx(2_916_000 / 3635)
    assert k["co2e_per_1k_inferences_g"] == pytest.approx(100.0)
    assert k["cost_per_1k_inferences_usd"] == pytest.approx(6.0 / 3635 * 1000)
    assert k["energy_per_token_j"] is None  # no tokens reported


def test_unaligned_windows_read_minute_rollups(scenario):
    # 10:15-10:45 on A0 only: 30 of its 60 minutes, 30,000 J each; B0 reported 10:00-10:29.
    gpus = [scenario["a0"], scenario["b0"]]
    for g in gpus:
        g.host  # noqa: B018 -- load the relation before the measurement
    t = measure.measure_gpus(gpus, H + dt.timedelta(minutes=15), H + dt.timedelta(minutes=45),
                             stand_in_factors())
    assert t.gpu_energy_j == pytest.approx(30 * 30_000 + 15 * 24_000)
    assert t.gpu_minutes == 45
    # CPU/RAM prorated to half an hour: A 432,000 x 1/2 GPUs x 0.5 h, B 180,000 x 0.5 h.
    assert t.cpu_ram_energy_j == pytest.approx(108_000 + 90_000)


def test_no_gpus_means_zero_energy_not_an_error(team):
    t = measure.measure_gpus([], H, H + dt.timedelta(hours=1), stand_in_factors())
    assert t.energy_j == 0 and t.co2e_g == 0 and metrics.derive(t, 3600)["pue"] is None


# Killed mutants of `make mutate MODULES=measure` (issue 16, tests/mutation/SURVIVORS.md).


def test_add_inference_sums_every_counter_of_the_windows_in_its_hour(team):
    # add_inference's surviving mutants (prompt tokens, server energy and the other optional
    # counters summed, missing ones skipped, the hour's bounds). Windows ending in [H, H + 1 h):
    #   w0 ends at H exactly (included): 20 requests, all successful, began 10 min before.
    #   w1 H+0..10 min: 100 requests (98 ok, 2 failed), 5,000 tokens, 20,000 prompt tokens,
    #      1,500 J at the server, 2,500 ms over 100 latencies, queue timing 50 ms over 100.
    #   w2 H+10..20 min: 50 requests, only 7,000 prompt tokens known.
    #   w3 H+5..30 min: 30 requests (all ok), 900 tokens, 500 J, 600 ms over 30, queue 30/30.
    #   w4 ends at H + 1 h (excluded): 999 requests.
    # Sums: 200 requests, 148 ok, 2 failed, 5,900 tokens over 130 requests that reported them,
    # 27,000 prompt tokens, 2,000 J, 3,100 ms over 130, queue 80 ms over 130; measured: the
    # union of [H-10 min, H+30 min) = 2,400 s.
    from greenops.kpis import histogram
    from greenops.kpis.models import InferenceBatch, InferenceWindow
    from greenops.workloads.models import Workload

    def hist(values):
        return histogram.to_json(histogram.from_values(values))

    w = Workload.objects.create(team=team, name="Chat", kind="inference")
    batch = InferenceBatch.objects.create(id=uuid.uuid4(), team=team, windows=5)
    m = dt.timedelta(minutes=1)
    rows = [
        dict(start=H - 10 * m, end=H, requests=20, success=20, failure=0),
        dict(start=H, end=H + 10 * m, requests=100, success=98, failure=2, tokens=5000,
             prompt_tokens=20_000, server_energy_j=1500.0, latency_sum_ms=2500.0, latency_n=100,
             latency_buckets=hist([10.0] * 100), timings={"queue": {"sum_ms": 50.0, "n": 100}}),
        dict(start=H + 10 * m, end=H + 20 * m, requests=50, prompt_tokens=7000),
        dict(start=H + 5 * m, end=H + 30 * m, requests=30, success=30, failure=0, tokens=900,
             server_energy_j=500.0, latency_sum_ms=600.0, latency_n=30,
             latency_buckets=hist([20.0] * 30), timings={"queue": {"sum_ms": 30.0, "n": 30}}),
        dict(start=H + 50 * m, end=H + 60 * m, requests=999, success=999, failure=0),
    ]
    for row in rows:
        InferenceWindow.objects.create(batch=batch, workload=w, **row)
    t = measure.add_inference(metrics.Totals(), [w.id], H, H + dt.timedelta(hours=1))
    assert (t.requests, t.success, t.failure) == (200, 148, 2)
    assert (t.tokens, t.token_requests, t.prompt_tokens) == (5900, 130, 27_000)
    assert t.server_energy_j == 2000.0
    assert (t.latency_sum_ms, t.latency_n) == (3100.0, 130)
    # The latency histograms merge: 100 latencies of 10 ms and 30 of 20 ms.
    assert t.latency_buckets == histogram.merge([hist([10.0] * 100 + [20.0] * 30)])
    assert (t.timings["queue"]["sum_ms"], t.timings["queue"]["n"]) == (80.0, 130)
    assert t.measured_s == 2400.0
    # Folding into figures that already hold 600 measured seconds and 5 requests adds to them.
    t = measure.add_inference(metrics.Totals(requests=5, measured_s=600.0), [w.id], H,
                              H + dt.timedelta(hours=1))
    assert (t.requests, t.measured_s) == (205, 3000.0)
    # Nothing of the kind reported: unknown (None), not 0.
    only = measure.add_inference(metrics.Totals(), [w.id], H + 11 * m, H + 21 * m)  # w2 alone
    assert (only.prompt_tokens, only.server_energy_j, only.tokens) == (7000, None, None)
