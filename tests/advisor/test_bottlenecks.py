"""Bottleneck profiles beyond the basic four (issue 14): a smaller or newer GPU from the
published table and the price catalog, input-bound PCIe, and the power-cap trade-off measured
from hours under two limits or from a marked variant pair. Samples go in as the agent sends
them (wire v1, NVML units); KPI hour rollups are written as the KPI rollup writes them. Every
expected figure is worked out by hand in the comment beside it."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.utils import timezone

from greenops import windows
from greenops.advisor import alternatives, diagnose, gpus, measure, powercap, variants
from greenops.kpis.models import KpiRollup, Period
from tests.support.advisor import profile_batch


def week() -> windows.Window:
    return diagnose.window("week")




def test_published_table_rows_cite_a_dated_source():
    rows = gpus.table()
    assert {"NVIDIA T4", "NVIDIA L4", "NVIDIA L40S", "NVIDIA A100 40GB SXM",
            "NVIDIA A100 80GB SXM", "NVIDIA H100 SXM", "NVIDIA H100 PCIe", "NVIDIA H200 SXM",
            "NVIDIA V100 SXM2", "NVIDIA A10G"} <= {r.model for r in rows}
    for r in rows:
        assert r.source_url.startswith("https://") and r.retrieved == "2026-11-30", r.model
    # NVML's names and the catalog's both find their row; an unpublished figure stays None.
    assert gpus.find("NVIDIA H100 80GB HBM3").model == "NVIDIA H100 SXM"
    assert gpus.find("NVIDIA H100 80GB").model == "NVIDIA H100 SXM"  # the catalog's p5 GPU
    assert gpus.find("Tesla T4").board_power_w == 70
    assert gpus.find("NVIDIA A10G").board_power_w is None
    assert gpus.find("NVIDIA B200") is None
    # H100 SXM's datasheet prints 1,979 TFLOPS FP16 with sparsity: dense is half.
    assert gpus.find("NVIDIA H100 80GB HBM3").fp16_tensor_dense_tflops == 989.5


@pytest.mark.django_db
def test_smaller_gpu_hand_computed(team, serve):
    # One L40S (g6e.xlarge, $1.861/h on demand in us-east-1, catalog snapshot 2025-05-31) 20 %
    # busy at 100 W under its 350 W limit, memory controller 15 % busy (compute-bound), at
    # most 10,000 MiB used.
    wl, host, send = serve(gpus_n=1, instance_type="g6e.xlarge", gpu_name="NVIDIA L40S")
    send(profile_batch(util=20.0, mem_util=15.0, throttle=0x0, gpus=1, power=100.0,
                       limit=350.0, mem_used=10_000.0, n_min=60))
    w = week()
    KpiRollup.objects.create(team=team, workload=wl, period=Period.HOUR,
                             bucket=w.end - windows.HOUR, requests=36_000, success=36_000)
    advice = diagnose.advise(wl, w)
    m = advice.monthly
    # 59 intervals x 60 s x 200 W = 708,000 J = 0.196667 kWh over 3,600 s; x 720 = 141.6.
    assert m.kwh == pytest.approx(141.6)
    assert m.usd == pytest.approx(1.861 * 720)  # $1,339.92
    d = next(d for d in advice.diagnoses if d.key == "smaller_gpu")
    assert d.title == "A different GPU: NVIDIA L4"
    # L4 vs L40S dense FP16: 121 / 362.05 = 0.334208. GPUs: ceil(1 x 20 / (0.334208 x 70)) =
    # ceil(0.8549) = 1, busy 20 / 0.334208 = 59.843 %. Power line through (20 %, 100/350 =
    # 0.285714) and (100 %, 1): 0.285714 + 0.714286 x (0.59843 - 0.2) / 0.8 = 0.641455 of the
    # L4's 72 W = 46.185 W; energy x 46.185 / 100 = 0.461848.
    ratio = 121 / 362.05
    busy = 20 / ratio
    share = 100 / 350 + (1 - 100 / 350) * (busy / 100 - 0.2) / 0.8
    energy = share * 72 / 100
    assert energy == pytest.approx(0.461848, abs=1e-6)
    assert d.effect.kwh_per_month == pytest.approx(141.6 * (energy - 1))
    assert d.effect.co2e_kg_per_month == pytest.approx(m.co2e_kg * (energy - 1))
    # Cost: one g6.xlarge at $0.8048/h x 720 h = $579.456 against $1,339.92.
    assert d.effect.usd_per_month == pytest.approx(0.8048 * 720 - 1.861 * 720)
    # Per inference: 36,000 counted x 720 = 25.92 M a month; 141.6 kWh x 3.6 MJ / 25.92 M =
    # 19.667 J now, x 0.461848 on the L4.
    row = next(r for r in d.table if r["model"] == "NVIDIA L4")
    assert row["gpus"] == 1 and row["util_pct"] == pytest.approx(busy)
    assert row["j_per_inference"] == pytest.approx(141.6 * 3.6e6 / 25.92e6 * energy)
    assert row["usd_per_1k"] == pytest.approx(0.8048 * 720 / 25.92e6 * 1000)
    # T4: 65 / 362.05 = 0.179533; ceil(20 / (0.179533 x 70)) = 2 GPUs at 55.700 %: 2 x
    # g4dn.xlarge = 2 x $0.526 x 720 = $757.44 -- cheaper than now, dearer than the L4.
    t4 = next(r for r in d.table if r["model"] == "NVIDIA T4")
    assert t4["gpus"] == 2 and t4["usd"] == pytest.approx(2 * 0.526 * 720) and t4["better"]
    assert [lever.split(" (")[0] for lever in d.levers[:2]] == ["1 × NVIDIA L4", "2 × NVIDIA T4"]
    # The A10G has no published board power: never estimated.
    assert "NVIDIA A10G" not in {r["model"] for r in d.table}
    assert d.effect.basis == "estimate" and d.confidence == "low"
    assert "data/gpus.csv" in d.effect.method


@pytest.mark.django_db
def test_alternative_must_hold_the_measured_memory(team, serve):
    # 21,000 MiB x 1.2 headroom = 25,200 MiB: more than an L4's 24 GB (24,576 MiB) or a T4's
    # 16 GB; every GPU that holds it costs more than the g6e.xlarge.
    wl, host, send = serve(gpus_n=1, instance_type="g6e.xlarge", gpu_name="NVIDIA L40S")
    send(profile_batch(util=20.0, mem_util=15.0, throttle=0x0, gpus=1, power=100.0,
                       limit=350.0, mem_used=21_000.0, n_min=60))
    advice = diagnose.advise(wl, week())
    assert "smaller_gpu" not in {d.key for d in advice.diagnoses}
    found, _, why = alternatives.alternatives(advice.profile, advice.monthly, advice.spec, [host])
    assert why == "" and found
    assert not {"NVIDIA L4", "NVIDIA T4"} & {a.spec.model for a in found}


@pytest.mark.django_db
def test_input_bound_on_pcie(serve):
    wl, host, send = serve()
    # A100 SXM: PCIe Gen4 64 GB/s both ways = 32 GB/s = 31,250,000 KiB/s each way. Host -> GPU
    # at 20,000,000 KiB/s = 64 % of it while the GPUs are 50 % busy: the SMs wait on input.
    send(profile_batch(util=50.0, mem_util=30.0, throttle=0x0, pcie_rx=20_000_000.0,
                       pcie_tx=1_000.0))
    advice = diagnose.advise(wl, week())
    d = next(d for d in advice.diagnoses if d.key == "pcie_bound")
    assert "64 % of the NVIDIA A100 40GB SXM's published 32 GB/s each way" in d.evidence[0]
    assert "host → GPU (RX)" in d.evidence[0]
    # ceil(4 x 50 / 70) = 3 of 4 GPUs: 25 % of the measured 598.56 kWh, as an upper bound.
    assert d.effect.kwh_per_month == pytest.approx(-598.56 * 0.25)
    assert "upper bound" in d.effect.method


@pytest.mark.django_db
def test_no_link_rate_no_link_diagnosis(serve):
    # The same saturated link on a GPU the table does not know (nor its host's instance type):
    # no input-bound diagnosis and no alternative, each skipped with its reason.
    wl, host, send = serve(instance_type="", gpu_name="Mystery GPU 9000")
    send(profile_batch(util=50.0, mem_util=30.0, throttle=0x0, pcie_rx=20_000_000.0))
    advice = diagnose.advise(wl, week())
    assert not {"pcie_bound", "smaller_gpu"} & {d.key for d in advice.diagnoses}
    assert "PCIe: the GPU's published link rate is unknown" in advice.skipped
    assert ("smaller or newer GPU: 'Mystery GPU 9000' is not in the published GPU table"
            in advice.skipped)


# Energy per inference per hour: distinct values (no ties) so the exact Mann-Whitney applies.
HIGH_J = [3.60e6, 3.61e6, 3.59e6, 3.62e6]  # 4 h at 300 W, 10,000 inferences each
LOW_J = [2.70e6, 2.71e6, 2.69e6, 2.72e6]  # 4 h at 250 W, 9,000 inferences each


def cap_hours(team, wl, send, t0: dt.datetime) -> None:
    """Four hours under a 300 W limit, then four under 250 W, every GPU capped half the time;
    KPI hour rows for the same hours, 95 % busy."""
    for k, limit in enumerate((300.0, 250.0)):
        send(profile_batch(util=95.0, mem_util=30.0, throttle=0x4, n_min=240, limit=limit,
                           start=(t0 + dt.timedelta(hours=4 * k)).timestamp()))
    for k, (energies, requests) in enumerate(((HIGH_J, 10_000), (LOW_J, 9_000))):
        for i, j in enumerate(energies):
            KpiRollup.objects.create(
                team=team, workload=wl, period=Period.HOUR,
                bucket=t0 + dt.timedelta(hours=4 * k + i), requests=requests, success=requests,
                measured_s=3600.0, util_sum=95.0 * 60, util_n=60, gpu_minutes=240,
                gpu_energy_j=j, cost_usd=21.957642)


@pytest.mark.django_db
def test_power_cap_tradeoff_measured_from_two_limits(team, serve):
    wl, host, send = serve()
    t0 = windows.floor_hour(timezone.now()) - dt.timedelta(hours=10)
    cap_hours(team, wl, send, t0)
    advice = diagnose.advise(wl, week())
    keys = [d.key for d in advice.diagnoses]
    # Measured: the published curve is not used.
    assert "power_cap_tradeoff" in keys and "power_capped" not in keys
    d = next(d for d in advice.diagnoses if d.key == "power_cap_tradeoff")
    t = powercap.cap_tradeoff(wl, week())
    # 300 W: 14,420,000 J / 40,000 = 360.5 J; 250 W: 10,820,000 J / 36,000 = 300.556 J.
    assert (t.high.limit_w, t.low.limit_w) == (300.0, 250.0)
    assert t.high.energy_per_inference_j == pytest.approx(360.5)
    assert t.low.energy_per_inference_j == pytest.approx(10.82e6 / 36_000)
    assert t.energy_change == pytest.approx(10.82e6 / 36_000 / 360.5 - 1)  # -16.63 %
    # 10,000 vs 9,000 inferences an hour: -10 % throughput at the lower limit.
    assert t.throughput_change == pytest.approx(-0.1)
    # Every 250 W hour below every 300 W hour: exact two-sided p = 2 / C(8, 4) = 2 / 70.
    assert t.p_value == pytest.approx(2 / 70) and "beyond noise" in t.verdict
    # A month of the measured load at 250 W: 76,000 inferences over 8 h x 4 GPUs measured
    # (28,800 s), x 2,592,000 / 28,800 = 90 -> 6,840,000 inferences x (300.556 - 360.5) J.
    m = advice.monthly
    assert m.scale == pytest.approx(90.0) and m.inferences == 76_000
    kwh = (10.82e6 / 36_000 - 360.5) * 6_840_000 / 3.6e6
    assert d.effect.kwh_per_month == pytest.approx(kwh)  # -113.9 kWh
    assert d.effect.basis == "measured"
    # 95 % busy at 250 W: a slower cap may need more GPU-hours, so the cost is unknown.
    assert d.effect.usd_per_month is None and "95 % busy" in d.effect.unknown
    assert d.levers[0].startswith("keep the power limit at 250 W rather than 300 W")
    assert d.confidence != "low" or "not beyond noise" not in d.confidence_why


@pytest.mark.django_db
def test_power_cap_tradeoff_from_a_marked_variant_pair(team, serve):
    wl, host, send = serve()
    t0 = windows.floor_hour(timezone.now()) - dt.timedelta(hours=10)
    cap_hours(team, wl, send, t0)
    pair = variants.create_pair(team, {
        "label": "300 W vs 250 W", "a": "chat", "a_start": t0.isoformat(),
        "a_end": (t0 + dt.timedelta(hours=4)).isoformat(), "b": "chat",
        "b_start": (t0 + dt.timedelta(hours=4)).isoformat(),
        "b_end": (t0 + dt.timedelta(hours=8)).isoformat()})
    t = powercap.pair_tradeoff(wl, week())
    assert t.source == f"variant pair '{pair.label}'"
    assert (t.low.limit_w, t.high.limit_w) == (250.0, 300.0)
    assert t.low.energy_per_inference_j == pytest.approx(10.82e6 / 36_000)
    assert t.high.energy_per_inference_j == pytest.approx(360.5)
    assert t.p_value == pytest.approx(2 / 70)
    a, b = variants.pair_sides(pair, week())
    c = variants.compare(team, a, b)
    assert c.power_limits == ((300.0, 300.0), (250.0, 250.0)) and c.power_caps_differ
    assert math.isclose(c.lines[0].change_pct, (10.82e6 / 36_000 / 360.5 - 1) * 100)


def test_power_line_through_the_measurement():
    p = measure.Profile(window=week(), gpus=1, samples=60, measured_minutes=60,
                         simulated_samples=0, util_pct=20.0, power_w=100.0, mem_util_pct=None,
                         mem_util_share=0.0, pcie_tx_kib_s=None, pcie_rx_kib_s=None,
                         pcie_share=0.0, power_capped_share=None, thermal_share=None,
                         throttle_share=0.0, power_limit_w=None)
    # (20 %, 100 of 400 W = 0.25) to (100 %, 1): at 60 %, 0.25 + 0.75 x 0.4 / 0.8 = 0.625.
    assert measure.power_at(p, 400.0, 60.0, 400.0) == pytest.approx(250.0)
    # On a 72 W GPU the same shares scale to its limit: 0.625 x 72 = 45 W.
    assert measure.power_at(p, 72.0, 60.0, 400.0) == pytest.approx(45.0)
    # 92 % busy at 215 of 300 W would put 0 W at 18.7 % busy: the line through the origin,
    # 215 x 46 / 92 = 107.5 W at half the load.
    from dataclasses import replace

    q = replace(p, util_pct=92.0, power_w=215.0)
    assert measure.power_at(q, 300.0, 46.0, 300.0) == pytest.approx(107.5)
    assert measure.power_at(replace(p, power_w=None), 400.0, 60.0, 400.0) is None


@pytest.mark.django_db
def test_a10g_without_published_throughput_gets_no_estimate(serve):
    # AWS's A10G: no NVIDIA datasheet, so no tensor throughput in the table: the rule says so
    # rather than scaling from a guess.
    wl, host, send = serve(gpus_n=1, instance_type="g5.xlarge", gpu_name="NVIDIA A10G")
    send(profile_batch(util=20.0, mem_util=15.0, throttle=0x0, gpus=1, power=60.0,
                       limit=300.0, mem_used=8_000.0, n_min=60))
    advice = diagnose.advise(wl, week())
    assert "smaller_gpu" not in {d.key for d in advice.diagnoses}
    assert ("smaller or newer GPU: the NVIDIA A10G's dense FP16 tensor throughput is not "
            "published" in advice.skipped)
