"""The /metrics text itself: names and units by Prometheus' conventions, unknown cost kept out
of the cost counter (and counted), another team's figures never in a team's page."""

from __future__ import annotations

import datetime as dt

from prometheus_client.parser import text_string_to_metric_families

from greenops.kpis.exposition import exposition
from greenops.kpis.models import KpiRollup, Period
from tests.support.factories import make_host

H = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)


def _row(team, hour, **kw):
    return KpiRollup.objects.create(team=team, period=Period.HOUR, bucket=hour, **kw)


def _samples(team) -> dict:
    text = exposition(team).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_counters_sum_the_hours_and_an_unpriced_hour_is_counted_not_added(team, other_team):
    # Hour 1: 1,000,000 J GPU, 100,000 J CPU/RAM, facility 1,320,000 J, 110 g, $4.
    # Hour 2: 500,000 J GPU, no price (cost unknown).
    _row(team, H, gpu_energy_j=1_000_000, cpu_ram_energy_j=100_000,
         facility_energy_j=1_320_000, co2e_g=110.0, cost_usd=4.0, requests=10)
    _row(team, H + dt.timedelta(hours=1), gpu_energy_j=500_000, cost_usd=None)
    _row(other_team, H, gpu_energy_j=9e9, cost_usd=99.0)
    s = _samples(team)
    t = (("team", "vision"),)
    assert s[("greenops_gpu_energy_joules_total", t)] == 1_500_000
    assert s[("greenops_it_energy_joules_total", t)] == 1_600_000
    assert s[("greenops_facility_energy_joules_total", t)] == 1_320_000
    assert s[("greenops_co2e_grams_total", t)] == 110.0
    assert s[("greenops_cost_usd_total", t)] == 4.0  # the priced hour only
    assert s[("greenops_unpriced_hours_total", t)] == 1
    assert s[("greenops_inferences_total", t)] == 10
    # Nothing of the other team, and no gauge without a fresh minute (unknown, not 0 W).
    assert not any(dict(labels).get("team") == other_team.slug for _, labels in s)
    assert not any(name == "greenops_gpu_power_watts" for name, _ in s)


def test_a_team_without_rollups_has_no_counters_at_all(team):
    make_host(team)
    s = _samples(team)
    assert not any(name.endswith("_total") for name, _ in s)
