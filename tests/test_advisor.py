"""The efficiency advisor (issue 14): known bottleneck profiles, sent as the agent sends them
(wire v1 batches with NVML's units), give the expected diagnosis and figures; a metric the
GPUs do not report gives no diagnosis that depends on it; too little data gives none at all."""

from __future__ import annotations

import time

import pytest

from greenops import windows
from greenops.advisor import diagnose
from greenops.carbon.accounting import carbon_of
from greenops.costs.accounting import cost_of
from greenops.energy import it_energy
from greenops.workloads.models import Workload
from tests.conftest import make_batch, make_host

N_GPUS = 4
N_MIN = 30  # one sample per GPU per minute for 30 minutes: 4 x 30 = 120 GPU-minutes


def profile_batch(util: float, mem_util: float | None, throttle: int | None,
                  n_min: int = N_MIN) -> dict:
    """4 GPUs, one sample a minute; make_batch's power is 200 + 10 g W, so a GPU's energy is
    (n_min - 1) intervals x 60 s x (200 + 10 g) W (the first sample has no interval)."""
    start = (time.time() // 60) * 60 - n_min * 60
    doc = make_batch(n_per_gpu=n_min, gpus=range(N_GPUS), start=start, step=60.0)
    cols = doc["samples"]
    n = len(cols["ts"])
    cols["util_pct"] = [util] * n
    if mem_util is not None:
        cols["mem_util_pct"] = [mem_util] * n
    if throttle is not None:
        # Every other sample at the power cap (0x4 SwPowerCap), the rest idle-clocked (0x1).
        cols["throttle_reasons"] = [throttle if i % 2 == 0 else 0x1 for i in range(n)]
        cols["power_limit_w"] = [300.0] * n
    return doc


@pytest.fixture
def workload(team, post_batch):
    host, token = make_host(team, name="inference-1", gpus=N_GPUS)
    wl = Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")
    wl.hosts.add(host)

    def send(doc):
        assert post_batch(token, doc).status_code == 202

    return wl, send


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
    (d,) = advice.diagnoses
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
    send(profile_batch(util=92.0, mem_util=85.0, throttle=0x4))
    advice = diagnose.advise(wl, week())
    keys = [d.key for d in advice.diagnoses]
    assert keys == ["memory_bound", "power_capped"]
    mem, capped = advice.diagnoses
    assert "85.0 %" in mem.evidence[0]
    # 60 of the 120 samples carry 0x4: 50 % power-capped, at the 300 W enforced limit.
    assert advice.profile.power_capped_share == 0.5
    assert "50 % of samples (enforced limit 300 W)" in capped.evidence[0]
    # Neither effect can be computed from one configuration: unknown with a reason, not 0.
    assert mem.effect.kwh_per_month is None and "variant" in mem.effect.unknown
    assert capped.effect.usd_per_month is None
    assert "compare the two periods" in capped.effect.unknown
    assert advice.skipped == []


@pytest.mark.django_db
def test_unsupported_metrics_give_no_diagnosis_that_depends_on_them(workload):
    wl, send = workload
    # The same busy GPUs, but NVML reported neither memory utilisation nor throttle reasons.
    send(profile_batch(util=92.0, mem_util=None, throttle=None))
    advice = diagnose.advise(wl, week())
    assert advice.diagnoses == []
    assert advice.skipped == [
        "memory-bandwidth: memory utilisation reported by 0 % of samples",
        "power/thermal throttling: throttle reasons reported by 0 % of samples"]


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
    (d,) = advice.diagnoses
    # Half of 1,496,400 J saved over 36,000 inferences = 20.783 J per inference (the month's
    # scale of 1,440 cancels: both energy and inferences are scaled by it).
    assert advice.monthly.inferences == 36_000
    assert d.effect.j_per_inference_saved == pytest.approx(1_496_400 * 0.5 / 36_000)
    assert d.effect.usd_per_1k_saved == pytest.approx(
        advice.monthly.usd * 0.5 / (36_000 * 1440) * 1000)
