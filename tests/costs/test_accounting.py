"""Cost accounting from GpuHour rollups and the catalog, with hand-computed figures."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from greenops.costs.accounting import collect, team_costs
from greenops.costs.catalog import host_price, hourly_price, is_stale
from greenops.costs.models import INTERRUPTION_BANDS, HostCostConfig, Price, PriceMethod
from greenops.telemetry.models import GpuHour
from greenops.workloads.models import Workload
from tests.support.costs import END, NOW, add_hours, enrolled, set_price
from tests.support.factories import make_host

P4D_OD = 32.7726








@pytest.fixture
def busy_and_idle(team):
    """p4d host (2 GPUs registered, enrolled long before the windows used here): GPU 0 at 80 %
    and GPU 1 at 2 % for the last 10 hours."""
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    g0, g1 = host.gpus.order_by("index")
    add_hours(g0, 10, 80.0)
    add_hours(g1, 10, 2.0, kwh_per_hour=0.06)
    return host, g0, g1


def test_on_demand_cost_and_idle_cost(busy_and_idle):
    host, g0, _ = busy_and_idle
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726")
    out = team_costs(collect(host.team, 7, NOW))
    [row] = out["hosts"]
    assert row["running_hours"] == 10 and row["billed_hours"] == 10
    assert row["cost_usd"] == pytest.approx(327.726)  # 10 h x 32.7726
    # GPU 1 is idle for 10 h; per-GPU rate 32.7726 / 2 GPUs = 16.3863
    assert row["idle_gpu_hours"] == 10
    assert row["idle_cost_usd"] == pytest.approx(163.863)
    assert row["energy_kwh"] == pytest.approx(3.6)  # 10 x 0.3 + 10 x 0.06
    assert out["total_cost_usd"] == pytest.approx(327.726)
    assert row["price_stale"] is False and out["problems"] == []


def test_workload_cost_counts_only_its_gpus(busy_and_idle):
    host, g0, _ = busy_and_idle
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726")
    w = Workload.objects.create(team=host.team, name="trainer", kind="training")
    w.gpus.add(g0)
    out = team_costs(collect(host.team, 7, NOW))
    [wl] = out["workloads"]
    assert wl["gpu_hours"] == 10 and wl["cost_usd"] == pytest.approx(163.863)


def test_reserved_host_pays_every_hour_and_old_prices_are_flagged_stale(busy_and_idle):
    host, _, _ = busy_and_idle
    host.purchase_option = "reserved"
    host.save()
    HostCostConfig.objects.create(host=host, term_years=1, payment="no_upfront")
    # The catalog has only the P4 page's 1y effective rate (payment unspecified), dated
    # 2025-05-31: it is used, labelled as such, and flagged stale.
    [row] = team_costs(collect(host.team, 7, NOW))["hosts"]
    assert row["billed_hours"] == 168 and row["running_hours"] == 10
    assert row["cost_usd"] == pytest.approx(168 * 19.22)
    assert row["price_stale"] is True
    assert row["price_as_of"].startswith("2025-05-31")
    assert "P4 instance page" in row["price_source"]


def test_committed_host_is_billed_only_from_its_enrollment(busy_and_idle):
    host, _, _ = busy_and_idle
    host.purchase_option = "reserved"
    host.save()
    HostCostConfig.objects.create(host=host, term_years=1, payment="no_upfront")
    set_price("p4d.24xlarge", "us-east-1", "reserved", "10", term_years=1, payment="no_upfront")
    # enrolled 48.5 h before the window's end: the hour it joined counts, so 49 hours of 720
    enrolled(host, END - dt.timedelta(hours=48, minutes=30))
    [row] = team_costs(collect(host.team, 30, NOW))["hosts"]
    assert row["billed_hours"] == 49 and row["running_hours"] == 10
    assert row["cost_usd"] == pytest.approx(490.0)


def test_removed_host_is_billed_only_until_its_removal(busy_and_idle):
    host, g0, g1 = busy_and_idle
    host.purchase_option = "reserved"
    host.save()
    HostCostConfig.objects.create(host=host, term_years=1, payment="no_upfront")
    set_price("p4d.24xlarge", "us-east-1", "reserved", "10", term_years=1, payment="no_upfront")
    GpuHour.objects.filter(gpu__host=host).delete()
    add_hours(g0, 10, 80.0, end=END - dt.timedelta(hours=80))
    # enrolled 10 days before the end, removed 72.5 h before it: the hours starting at END-240h
    # up to END-73h, 168 of them (the data it reported falls inside them)
    enrolled(host, END - dt.timedelta(days=10), END - dt.timedelta(hours=72, minutes=30))
    [row] = team_costs(collect(host.team, 30, NOW))["hosts"]
    assert row["billed_hours"] == 168 and row["running_hours"] == 10
    assert row["cost_usd"] == pytest.approx(1680.0)


def test_reported_hours_are_billed_even_before_a_late_enrollment_record(busy_and_idle):
    # Data before created_at (a re-enrolled host replaying its spool): those hours ran, so
    # they are paid, on top of the hours since enrollment.
    host, _, _ = busy_and_idle
    host.purchase_option = "reserved"
    host.save()
    HostCostConfig.objects.create(host=host, term_years=1, payment="no_upfront")
    set_price("p4d.24xlarge", "us-east-1", "reserved", "10", term_years=1, payment="no_upfront")
    enrolled(host, END - dt.timedelta(hours=4))  # reported the last 10 hours
    [row] = team_costs(collect(host.team, 7, NOW))["hosts"]
    assert row["billed_hours"] == 10 and row["cost_usd"] == pytest.approx(100.0)


def test_on_prem_hardware_is_billed_only_while_the_host_existed(busy_and_idle):
    host, _, _ = busy_and_idle
    host.purchase_option, host.provider = "on_prem", "on_prem"
    host.save()
    HostCostConfig.objects.create(host=host, hardware_usd=Decimal("262800"),
                                  amortisation_months=36)
    enrolled(host, END - dt.timedelta(hours=24))
    [row] = team_costs(collect(host.team, 7, NOW))["hosts"]
    # 262800 / (36 x 730 h) = 10 $/h x 24 h
    assert row["billed_hours"] == 24 and row["cost_usd"] == pytest.approx(240.0)


def test_on_prem_host_is_amortised_hardware_plus_electricity(busy_and_idle, settings):
    # The PUE is the host's site factor (here the configured default), never a costs default.
    settings.GREENOPS_DEFAULT_PUE = 1.5
    host, _, _ = busy_and_idle
    host.purchase_option, host.provider = "on_prem", "on_prem"
    host.save()
    HostCostConfig.objects.create(host=host, hardware_usd=Decimal("250000"),
                                  amortisation_months=36,
                                  electricity_usd_per_kwh=Decimal("0.20"))
    [row] = team_costs(collect(host.team, 7, NOW))["hosts"]
    # 250000 / (36 x 730 h) = 9.512938 $/h x 168 h = 1598.1735; 3.6 kWh x 1.5 x 0.20 = 1.08
    assert row["cost_usd"] == pytest.approx(250000 / 26280 * 168 + 1.08)


def test_missing_price_gives_no_total_and_says_what_is_missing(busy_and_idle):
    host, _, _ = busy_and_idle
    host.instance_type, host.region = "g6.xlarge", "eu-west-1"
    host.save()
    out = team_costs(collect(host.team, 7, NOW))
    assert out["total_cost_usd"] is None  # never a partial sum shown as the total
    assert out["hosts"][0]["problem_code"] == "missing_price"
    assert "no on_demand price for g6.xlarge in eu-west-1" in out["problems"][0]
    assert hourly_price(host) is None


def test_unknown_instance_type_is_named(busy_and_idle):
    host, _, _ = busy_and_idle
    host.instance_type = "p9.mega"
    host.save()
    problem = host_price(host, NOW)
    assert problem.code == "unknown_instance_type"
    assert "'p9.mega' is not in the aws price catalog" in problem.message


def test_on_prem_without_hardware_cost_is_a_problem_not_zero(team):
    host, _ = make_host(team)
    host.purchase_option = "on_prem"
    host.save()
    assert host_price(host).code == "missing_on_prem_cost"


def test_hourly_price_for_other_apps(team):
    host, _ = make_host(team)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726")
    found = hourly_price(host, NOW)
    assert found.usd_per_hour == pytest.approx(P4D_OD)
    assert found.source == "test" and found.stale is False
    # the same price seen 100 days later is stale: shown, but flagged
    assert hourly_price(host, NOW + dt.timedelta(days=100)).stale is True


def test_snapshot_is_loaded_with_its_date_and_source(db):
    # The 2026-11-09 snapshot carries the June 2025 P5 reduction, dated by its own source.
    p = Price.objects.get(region="us-east-1", instance_type="p5.48xlarge", option="on_demand")
    assert p.usd_per_hour == Decimal("55.04")
    assert p.as_of.date() == dt.date(2026, 11, 9)
    assert p.method == PriceMethod.SNAPSHOT and "datareceipts" in p.source
    assert p.detail["snapshot"] == "aws_prices_2026-11-09.json"
    # rows a later snapshot does not re-source stay as the older one left them
    g5 = Price.objects.get(region="us-east-1", instance_type="g5.xlarge", option="on_demand")
    assert g5.as_of.date() == dt.date(2025, 5, 31) and "On-Demand pricing page" in g5.source
    # nothing the snapshots do not know is filled in: p5e has no on-demand list price
    assert not Price.objects.filter(instance_type="p5e.48xlarge", option="on_demand").exists()
    assert Price.objects.filter(instance_type="p5en.48xlarge", option="on_demand").count() == 3


def test_snapshot_spot_rows_say_where_and_when_they_were_sampled(db):
    spot = Price.objects.get(region="us-west-2", instance_type="p5.48xlarge", option="spot")
    assert spot.usd_per_hour == Decimal("12.6935") and "usw2-az1" in spot.source
    # no Spot Advisor band could be cited, so none is claimed
    assert spot.interruption_band == ""
    # the sample's date is unknown: as_of is the conservative lower bound, so it shows stale
    assert spot.as_of.date() == dt.date(2025, 6, 1) and is_stale(spot)
    assert "lower bound" in spot.detail["confidence"]
    every = Price.objects.filter(method=PriceMethod.SNAPSHOT)
    assert all(p.source for p in every)
    assert all(p.as_of for p in every)


def test_every_bundled_snapshot_row_names_a_source_and_a_date():
    import json

    from greenops.costs.catalog import SNAPSHOTS

    for path in SNAPSHOTS:
        doc = json.loads(path.read_text())
        assert doc["metadata"]["as_of"]
        for row in doc["prices"]:
            assert row["source"] and len(row["source"]) <= 300, row
            assert row.get("confidence"), row
            assert row.get("interruption_band", "") in ("", *INTERRUPTION_BANDS), row
