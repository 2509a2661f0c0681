"""The efficiency advisor (issue 14): known bottleneck profiles, sent as the agent sends them
(wire v1 batches with NVML's units), give the expected diagnosis and figures; a metric the
GPUs do not report gives no diagnosis that depends on it; too little data gives none at all."""

from __future__ import annotations

import pytest

from greenops import windows
from greenops.advisor import diagnose
from greenops.carbon.accounting import carbon_of
from greenops.costs.accounting import cost_of
from greenops.energy import it_energy
from tests.support.advisor import profile_batch


def week() -> windows.Window:
    return diagnose.window("week")


@pytest.mark.django_db
def test_under_utilised_gpus_consolidate_with_the_hand_computed_saving(workload):
    wl, send = workload
    send(profile_batch(util=20.0, mem_util=15.0, throttle=0x0))
    advice = diagnose.advise(wl, week())
    p = advice.profile
    assert (p.gpus, p.measured_minutes, p.samples) == (4, 120, 120)
    assert p.util_pct == 20.0
    # Measured seconds: 120 GPU-minutes x 60 s / 4 GPUs = 1,800 s; month 2,592,000 s / 1,800 =
    # a scale of 1,440.
    assert p.measured_s == 1800.0 and advice.monthly.scale == 1440.0
    # Energy: 29 intervals x 60 s x (200 + 210 + 220 + 230 W) = 1,496,400 J = 0.415667 kWh;
    # x 1,440 = 598.56 kWh per month.
    assert advice.monthly.kwh == pytest.approx(598.56)
    d = advice.diagnoses[0]
    assert d.key == "under_utilised"
    # GPUs needed: ceil(4 x 20 % / 70 %) = ceil(1.143) = 2 of 4: half of the GPU-hours go.
    assert "serve the measured load on 2 of 4 GPUs" in d.levers[0]
    assert d.effect.kwh_per_month == pytest.approx(-299.28)
    # CO2e and cost come from their owners (carbon_of, cost_of), never recomputed here.
    w = week()
    energy = it_energy(list(wl.gpu_queryset()), w.start, w.end)
    assert d.effect.co2e_kg_per_month == pytest.approx(-carbon_of(energy).co2e_kg * 1440 * 0.5)
    cost = cost_of(energy)
    assert cost.cost_usd is not None  # the catalog prices p4d.24xlarge on demand
    (line,) = cost.hosts.values()
    # Billed by the host-hour: the hardware cost of the hours billed, per 720 h a month.
    assert line.billed_hours > 0
    month_usd = line.hardware_usd * 720 / line.billed_hours + line.electricity_usd * 1440
    assert advice.monthly.usd == pytest.approx(month_usd)
    assert d.effect.usd_per_month == pytest.approx(-month_usd * 0.5)
    assert d.effect.usd_saved == pytest.approx(month_usd * 0.5)
    # No inferences were counted: nothing per inference, rather than a division by zero.
    assert d.effect.j_per_inference_saved is None
    # 1,800 s of a 7-day window is 0 %: a low-confidence estimate, and it says why.
    assert d.confidence == "low" and "measured 0 % of the" in d.confidence_why


@pytest.mark.django_db
def test_memory_bound_and_power_capped_profile(workload):
    wl, send = workload
    # 280 W at 92 % busy under a 300 W limit; memory controller 85 % busy.
    send(profile_batch(util=92.0, mem_util=85.0, throttle=0x4, power=280.0))
    # The A100's maximum SM clock as NVML's inventory reports it; make_batch runs at 1,410 MHz.
    from greenops.telemetry.models import Gpu

    Gpu.objects.filter(host__in=wl.hosts.all()).update(max_sm_clock_mhz=1980.0)
    advice = diagnose.advise(wl, week())
    keys = [d.key for d in advice.diagnoses]
    assert keys[:2] == ["memory_bound", "power_capped"]
    mem, capped = advice.diagnoses[:2]
    # No DCGM here: judged by NVML's memory utilisation, and labelled so.
    assert "85.0 %" in mem.evidence[0] and "NVML memory utilisation" in mem.evidence[0]
    # Upper bound from halved bytes: busy 46 % instead of 92 %. Power line through (92 %,
    # 280 W) and (100 %, 300 W): 280/300 = 0.93333 + 0.06667 x (0.46 - 0.92) / 0.08 = 0.55 of
    # 300 W = 165 W; energy x (165 / 280 - 1) = -41.0714 % of the measured 598.56 kWh.
    assert mem.effect.kwh_per_month == pytest.approx(598.56 * (165 / 280 - 1))
    assert mem.effect.usd_per_month == 0.0  # cloud GPUs are billed by the hour, not the watt
    assert "upper bound" in mem.effect.method and mem.confidence == "low"
    # 60 of the 120 samples carry 0x4: 50 % power-capped, at the 300 W enforced limit.
    assert advice.profile.power_capped_share == 0.5
    assert "50 % of samples (enforced limit 300 W)" in capped.evidence[0]
    # 1,410 / 1,980 MHz = 71 %: how far the cap holds the clocks down.
    assert capped.evidence[1] == "SM clock 1410 MHz on average, 71 % of its 1980 MHz maximum"
    # Only one cap was measured: the published curve (-15 % energy at 60 % of the limit),
    # labelled so; 92 % busy is near full, so what the slower cap costs is unknown, not $0.
    assert capped.effect.basis == "published"
    assert capped.effect.kwh_per_month == pytest.approx(-0.15 * 598.56)
    assert "arXiv 2205.09646" in capped.effect.method
    assert "about 180 W" in capped.levers[0]  # 60 % of the 300 W limit
    assert capped.effect.usd_per_month is None and "near full" in capped.effect.unknown
    assert [s for s in advice.skipped if not s.startswith(("PCIe", "NVLink", "host"))] == []


@pytest.mark.django_db
def test_unsupported_metrics_give_no_diagnosis_that_depends_on_them(workload):
    wl, send = workload
    # The same busy GPUs, but NVML reported neither memory utilisation nor throttle reasons.
    send(profile_batch(util=92.0, mem_util=None, throttle=None))
    advice = diagnose.advise(wl, week())
    keys = {d.key for d in advice.diagnoses}
    assert not keys & {"memory_bound", "power_capped", "thermal", "pcie_bound", "nvlink_bound"}
    skipped = "; ".join(advice.skipped)
    assert ("memory-bandwidth: memory utilisation reported by 0 % of samples, DCGM DRAM "
            "activity by 0 %") in skipped
    assert "host CPU: reported for 0 % of the measured time" in skipped
    assert "host network/disk-bound: the NIC's and disks' capacities are not collected" \
        in skipped
    assert "power/thermal throttling: throttle reasons reported by 0 % of samples" in skipped
    assert "PCIe: throughput reported by 0 % of samples" in skipped
    # An alternative GPU, if any, does not lean on the missing memory figure: it takes the less
    # favourable of the compute and bandwidth ratios and says so.
    for d in advice.diagnoses:
        if d.key == "smaller_gpu":
            assert "which resource binds is unknown" in d.evidence[1]


@pytest.mark.django_db
def test_too_little_data_gives_no_diagnosis(workload):
    wl, send = workload
    # 4 GPUs x 14 minutes = 56 GPU-minutes < 60.
    send(profile_batch(util=5.0, mem_util=90.0, throttle=0x4, n_min=14))
    advice = diagnose.advise(wl, week())
    assert advice.diagnoses == [] and advice.monthly is None
    assert advice.not_enough.startswith("56 GPU-minutes measured")


@pytest.mark.django_db
def test_diagnosis_page_shows_evidence_effect_and_unknowns(client, team_roles, team, workload):
    wl, send = workload
    send(profile_batch(util=20.0, mem_util=None, throttle=0x4))
    client.force_login(team_roles["viewer"])
    r = client.get(f"/teams/{team.slug}/advisor/workloads/{wl.slug}/?range=week")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'id="diagnosis-under_utilised"' in html
    assert "serve the measured load on 2 of 4 GPUs" in html
    assert "saves 299.3 kWh" in html
    assert 'id="diagnosis-memory_bound"' not in html
    assert "memory utilisation reported by 0 % of samples" in html
    assert client.get(f"/teams/{team.slug}/advisor/workloads/{wl.slug}/?range=year"
                      ).status_code == 404
    assert client.get(f"/teams/{team.slug}/advisor/workloads/nope/").status_code == 404


@pytest.mark.django_db
def test_under_utilised_saving_per_inference_at_the_measured_load(team, workload):
    from greenops.kpis.models import KpiRollup, Period

    wl, send = workload
    send(profile_batch(util=20.0, mem_util=15.0, throttle=0x0))
    w = week()
    KpiRollup.objects.create(team=team, workload=wl, period=Period.HOUR,
                             bucket=w.end - windows.HOUR, requests=36_000, success=36_000)
    advice = diagnose.advise(wl, w)
    d = advice.diagnoses[0]
    assert d.key == "under_utilised"
    # Half of 1,496,400 J saved over 36,000 inferences = 20.783 J per inference (the month's
    # scale of 1,440 cancels: both energy and inferences are scaled by it).
    assert advice.monthly.inferences == 36_000
    assert d.effect.j_per_inference_saved == pytest.approx(1_496_400 * 0.5 / 36_000)
    assert d.effect.usd_per_1k_saved == pytest.approx(
        advice.monthly.usd * 0.5 / (36_000 * 1440) * 1000)
