"""Energy, carbon and cost per inference divide by ALL requests, failed ones included.

A failed request was still served by the GPU (queued, batched, usually computed before it
failed): its energy is part of what serving costs, and the per-inference figures share their
denominator with the request count and throughput shown beside them. Energy per *successful*
inference would be another KPI under another name. The methodology page says which is meant.

Every earlier test had success == requests; here 120 requests of which 118 succeeded.
"""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.kpis import metrics
from greenops.kpis.models import KpiRollup, Period
from greenops.workloads.models import Workload

# One hour of a workload: 120 requests, 118 succeeded, 2 failed.
# IT energy: GPU 2,400 J + CPU/RAM 600 J = 3,000 J. Facility energy 3,000 x PUE 1.2 = 3,600 J
# (0.001 kWh); carbon 0.001 kWh x 400 g/kWh = 0.4 g. Cost $0.06.
REQUESTS, SUCCESS, FAILURE = 120, 118, 2
GPU_J, CPU_RAM_J, FACILITY_J, CO2E_G, COST_USD = 2_400.0, 600.0, 3_600.0, 0.4, 0.06

# Hand-computed, over all 120 requests:
ENERGY_PER_INFERENCE_J = 25.0  # 3,000 J / 120   (over successes: 3,000 / 118 = 25.42 J)
CO2E_PER_1K_G = 0.4 / 120 * 1000  # = 3.333 g     (over successes: 3.390 g)
COST_PER_1K_USD = 0.5  # 0.06 / 120 x 1000        (over successes: 0.508 $)


def totals() -> metrics.Totals:
    return metrics.Totals(requests=REQUESTS, success=SUCCESS, failure=FAILURE, gpu_minutes=60,
                          gpu_energy_j=GPU_J, cpu_ram_energy_j=CPU_RAM_J,
                          facility_energy_j=FACILITY_J, co2e_g=CO2E_G, cost_usd=COST_USD,
                          measured_s=3600.0)  # the inference windows covered the whole hour


def test_per_inference_figures_divide_by_all_requests_not_successes():
    k = metrics.derive(totals(), 3600)
    assert k["requests"] == 120 and k["success"] == 118 and k["failure"] == 2
    assert k["energy_per_inference_j"] == pytest.approx(ENERGY_PER_INFERENCE_J)
    assert k["co2e_per_1k_inferences_g"] == pytest.approx(CO2E_PER_1K_G)
    assert k["cost_per_1k_inferences_usd"] == pytest.approx(COST_PER_1K_USD)
    # Throughput counts every request the server answered too: 120 / 3600 measured s.
    assert k["throughput_per_s"] == pytest.approx(120 / 3600)


@pytest.mark.django_db
def test_kpi_api_reports_energy_per_inference_over_all_requests(client, users, team):
    # The same hour as a stored rollup row, read through the API a page or script would use.
    w = Workload.objects.create(team=team, name="Ranker", kind="inference")
    hour = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
    KpiRollup.objects.create(team=team, workload=w, period=Period.HOUR, bucket=hour,
                             **{k: v for k, v in totals().as_row().items()
                                if k not in {"pue", "intensity_g_per_kwh"}},
                             pue=1.2, intensity_g_per_kwh=400.0)
    client.force_login(users["member"])
    r = client.get(f"/api/v1/teams/{team.slug}/kpis", {
        "workload": w.slug, "start": "2026-03-02T10:00:00Z", "end": "2026-03-02T11:00:00Z"})
    assert r.status_code == 200, r.content
    k = r.json()["current"]
    assert (k["requests"], k["success"], k["failure"]) == (120, 118, 2)
    assert k["energy_per_inference_j"] == pytest.approx(ENERGY_PER_INFERENCE_J)
    assert k["co2e_per_1k_inferences_g"] == pytest.approx(CO2E_PER_1K_G)


@pytest.mark.django_db
def test_methodology_page_says_failed_requests_count(client, users):
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    per_inference = html[html.index('id="per-inference"'):]
    assert "all requests" in per_inference and "failed ones included" in per_inference
