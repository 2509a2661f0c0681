"""Issue 8 items 10 and 12: one cost model for the KPI pages and the Costs page, and idle
judged minute by minute. Every figure is worked out by hand in the comments."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from greenops.costs.accounting import collect, team_costs
from greenops.costs.models import HostCostConfig
from greenops.costs.team_recommendations import team_recommendations
from greenops.kpis import queries, rollup
from greenops.kpis.models import Period
from greenops.telemetry.models import GpuHour, GpuMinute, HostEnergyHour
from tests.support.costs import END, NOW, add_hours, enrolled, set_price
from tests.support.factories import make_host

WEEK = dt.timedelta(days=7)


def both_pages(team) -> tuple[float | None, float | None]:
    """(KPI page cost over the Costs page's 7-day window, Costs page total)."""
    costs = team_costs(collect(team, 7, NOW))["total_cost_usd"]
    rollup.rebuild(team, END - WEEK, END)  # the real factors and catalog, as beat runs it
    kpi = queries.kpis(team, None, END - WEEK, END, Period.HOUR)["cost_usd"]
    return kpi, costs


def test_on_demand_host_costs_the_same_on_both_pages(team):
    # p4d (2 GPUs registered): GPU 0 ran 10 hours, GPU 1 never reported.
    # Host-hours: 10 h x $32.7726 = $327.726 on both (the KPI page used to bill GPU-minutes:
    # 600 min x $32.7726 / 2 GPUs / 60 = $163.863).
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726")
    add_hours(host.gpus.get(index=0), 10, 80.0)
    kpi, costs = both_pages(team)
    assert costs == pytest.approx(327.726)
    assert kpi == pytest.approx(327.726)


def test_reserved_host_pays_every_owned_hour_on_both_pages(team):
    # Enrolled 24 h before the window's end, ran 10 of them: 24 h x $20 = $480 on both.
    host, _ = make_host(team)
    host.purchase_option = "reserved"
    host.save()
    enrolled(host, END - dt.timedelta(hours=24))
    set_price("p4d.24xlarge", "us-east-1", "reserved", "20.0", term_years=1,
              payment="no_upfront")
    add_hours(host.gpus.get(index=0), 10, 80.0)
    kpi, costs = both_pages(team)
    assert costs == pytest.approx(480.0)
    assert kpi == pytest.approx(480.0)


def test_on_prem_is_hardware_plus_it_electricity_with_the_site_pue(team, settings):
    # GREENOPS_DEFAULT_PUE is honoured (no site): 1.4, not the costs app's old 1.56.
    settings.GREENOPS_DEFAULT_PUE = 1.4
    host, _ = make_host(team)
    host.purchase_option, host.provider = "on_prem", "on_prem"
    host.save()
    enrolled(host, END - dt.timedelta(hours=24))
    HostCostConfig.objects.create(host=host, hardware_usd=Decimal("262800"),
                                  amortisation_months=36,
                                  electricity_usd_per_kwh=Decimal("0.20"))
    add_hours(host.gpus.get(index=0), 10, 80.0, kwh_per_hour=0.3)
    for i in range(10):  # CPU + RAM: 0.1 kWh in each of the same 10 hours
        HostEnergyHour.objects.create(host=host, bucket=END - dt.timedelta(hours=i + 1),
                                      cpu_energy_j=288_000, ram_energy_j=72_000,
                                      cpu_method="rapl", ram_method="constant", samples=60)
    kpi, costs = both_pages(team)
    # hardware 262800 / (36 x 730 h) = $10/h x 24 h owned = $240
    # electricity (10 x 0.3 GPU + 10 x 0.1 CPU/RAM) = 4 kWh x PUE 1.4 x $0.20 = $1.12
    assert costs == pytest.approx(241.12)
    assert kpi == pytest.approx(241.12)


def add_bursty_hours(gpu, n: int, busy_minutes: int = 3, kwh_per_hour: float = 0.06) -> None:
    """n hours ending at END in which the GPU is at 100 % for `busy_minutes` and 0 % for the
    rest: with 3 busy minutes the hourly average is exactly 5 %, not under the 5 % threshold."""
    avg = 100.0 * busy_minutes / 60
    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=END - dt.timedelta(hours=i + 1), samples=60, util_sum=avg * 60,
                util_n=60, energy_j=kwh_per_hour * 3_600_000, mem_used_max_mib=2000.0)
        for i in range(n)])
    GpuMinute.objects.bulk_create([
        GpuMinute(gpu=gpu, bucket=END - dt.timedelta(hours=i + 1, minutes=-m), samples=1,
                  util_sum=100.0 if m < busy_minutes else 0.0, util_n=1,
                  energy_j=kwh_per_hour * 60_000, mem_used_max_mib=2000.0)
        for i in range(n) for m in range(60)], batch_size=5000)


def test_idle_gpu_minutes_give_idle_cost_and_stop_idle(team):
    # Both GPUs: 57 idle minutes and 3 busy ones in each of the last 50 hours. Judged on
    # hourly averages (5.0 %, not < 5 %) nothing was idle: $0 idle and no advice.
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    # In force for all 50 hours (from the snapshot's 2026-11-09 on): each hour's idle minutes
    # are costed at the price of that hour, like its cost.
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726", as_of=END - dt.timedelta(days=7))
    for g in host.gpus.all():
        add_bursty_hours(g, 50)
    [row] = team_costs(collect(team, 7, NOW))["hosts"]
    # 2 GPUs x 50 h x 57/60 = 95 idle GPU-hours x $32.7726 / 2 GPUs = $1556.6985
    assert row["idle_gpu_hours"] == pytest.approx(95.0)
    assert row["idle_cost_usd"] == pytest.approx(95.0 * 16.3863)
    recs = team_recommendations(team, 7, NOW, pue=1.1, intensity_g_per_kwh=400.0)
    kinds = [r["kind"] for r in recs["recommendations"]]
    assert "stop_idle" in kinds  # 95 % of the last 48 hours' minutes idle (>= 90 %)


def test_a_gpu_busy_only_in_bursts_is_not_counted_as_used_for_rightsizing(team):
    # g5.12xlarge (4 x A10G): GPU 0 busy at 80 %, GPUs 1-3 bursty (3 busy minutes an hour,
    # hourly average 5 %: "used" when judged by hours). By minutes only GPU 0 is used, so the
    # host fits a g5.xlarge: (5.672 - 1.006) $/h x 100 h x 730 / 720 = $473.08 a month (the
    # 30-day savings basis, whatever the 7-day lookback; enrolled long before it).
    host, _ = make_host(team, gpus=4)
    host.instance_type = "g5.12xlarge"
    host.save()
    enrolled(host, END - dt.timedelta(days=90))
    set_price("g5.12xlarge", "us-east-1", "on_demand", "5.672")
    set_price("g5.xlarge", "us-east-1", "on_demand", "1.006")
    g0, *rest = host.gpus.order_by("index")
    add_hours(g0, 100, 80.0, mem_mib=8000.0)
    for g in rest:
        add_bursty_hours(g, 40)  # fewer than 48 hours: no stop-idle/consolidation streak
    recs = team_recommendations(team, 7, NOW, pue=1.1, intensity_g_per_kwh=400.0)
    [r] = [r for r in recs["recommendations"] if r["kind"] == "rightsize"]
    assert r["detail"]["to"] == "g5.xlarge"
    assert r["monthly_usd_saved"] == pytest.approx(4.666 * 100 * 730 / 720)


def test_methodology_page_states_the_cost_idle_refresh_and_team_inference_rules(client, users):
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    cost = html[html.index('id="cost"'):]
    assert "One cost model serves every page" in cost
    assert "every hour of the window the host existed" in cost
    assert "there is one PUE per host" in cost
    assert "idle GPU-hours = idle GPU-minutes ÷ 60" in cost and "5.0 % utilisation" in cost
    assert "at least 90 % of those minutes" in cost
    assert "is ignored and counted in the refresh log" in cost
    assert "without its fee" in cost and "keeps its last good prices" in cost
    assert "inference workloads only" in html[html.index('id="team-per-inference"'):]
