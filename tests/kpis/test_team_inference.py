"""Issue 8 item 13: a team's per-inference figures use the energy of its inference workloads
only; its training energy is never divided by inferences."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.kpis import queries, rollup
from greenops.kpis.models import KpiRollup, Period
from greenops.workloads.models import Workload
from tests.support.factories import make_host
from tests.support.kpis import H, add_gpu_hour, add_windows, stand_in_factors

HOUR = dt.timedelta(hours=1)


def test_team_energy_per_inference_leaves_training_out(team):
    # Host "A" (stand-in factors: PUE 1.5, 400 g/kWh, $8/h), 2 GPUs, hour H:
    #   GPU 0 serves Ranker (inference): 37,000 J; GPU 1 trains Trainer: 74,000 J.
    #   Ranker counts 1000 inferences.
    # Energy per inference, team and workload alike: 37,000 J / 1000 = 37 J
    #   (dividing the team's 111,000 J gave 111 J).
    # Carbon per 1k: 37,000 J = 0.0102778 kWh x 1.5 x 400 = 6.1667 g per 1000 inferences.
    # Cost per 1k: host A ran in H, Ranker's GPUs are 1 of its 2: $8 x 1/2 = $4 per 1000.
    host, _ = make_host(team, "A", gpus=2)
    g0, g1 = host.gpus.order_by("index")
    add_gpu_hour(g0, H, 37_000, 60.0, 60)
    add_gpu_hour(g1, H, 74_000, 95.0, 60)
    ranker = Workload.objects.create(team=team, name="Ranker", kind="inference")
    ranker.gpus.add(g0)
    trainer = Workload.objects.create(team=team, name="Trainer", kind="training")
    trainer.gpus.add(g1)
    add_windows(ranker, H, requests=(400, 600))
    rollup.rebuild(team, H, H + HOUR, stand_in_factors())
    team_k = queries.kpis(team, None, H, H + HOUR)
    ranker_k = queries.kpis(team, ranker, H, H + HOUR)
    for k in (team_k, ranker_k):
        assert k["requests"] == 1000
        assert k["energy_per_inference_j"] == pytest.approx(37.0)
        assert k["co2e_per_1k_inferences_g"] == pytest.approx(37_000 / 3_600_000 * 1.5 * 400)
        assert k["cost_per_1k_inferences_usd"] == pytest.approx(4.0)
    # The team's own totals still hold all of its energy and cost.
    assert team_k["energy_kwh"] == pytest.approx(111_000 / 3_600_000)
    assert team_k["cost_usd"] == pytest.approx(8.0)
    row = KpiRollup.objects.get(team=team, workload__isnull=True, period=Period.HOUR)
    assert row.inference_energy_j == pytest.approx(37_000)
    # and the day row merges the same figures
    day = queries.kpis(team, None, H.replace(hour=0), H.replace(hour=0) + dt.timedelta(days=1),
                       Period.DAY)
    assert day["energy_per_inference_j"] == pytest.approx(37.0)


def test_a_team_without_inference_workloads_has_no_energy_per_inference(team):
    host, _ = make_host(team, "A", gpus=1)
    add_gpu_hour(host.gpus.get(), H, 74_000, 95.0, 60)
    rollup.rebuild(team, H, H + HOUR, stand_in_factors())
    k = queries.kpis(team, None, H, H + HOUR)
    assert k["requests"] == 0 and k["energy_per_inference_j"] is None
    assert k["inference_energy_kwh"] == 0
