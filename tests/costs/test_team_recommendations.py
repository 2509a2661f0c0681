"""A team's recommendations from measured usage: each host's saving is counted once, and
workloads sharing a host share its saving. Figures worked out by hand in the comments."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.costs.models import HostCostConfig
from greenops.costs.team_recommendations import team_recommendations
from greenops.workloads.models import Workload
from tests.support.costs import END, NOW, add_hours, enrolled, set_price
from tests.support.factories import make_host as _make_host

# 100 running hours in the last 30 days (the savings basis, whatever the 7-day lookback shown),
# projected to a month: 100 x 730 / 720 = 101.39 h
HOURS = 100 * 730 / 720
P4D = 21.957642  # the catalog's p4d on-demand rate: p4de (27.44705) is no cheaper A100 to move to
IDLE_FAMILY = ("stop_idle", "consolidate", "rightsize")


def make_host(team, name: str = "gpu-node-1", gpus: int = 2):
    """A host enrolled long before the savings basis: its 30 days are all history."""
    host, token = _make_host(team, name=name, gpus=gpus)
    enrolled(host, END - dt.timedelta(days=90))
    return host, token


def recs(team) -> list[dict]:
    return team_recommendations(team, 7, NOW, pue=1.1, intensity_g_per_kwh=400.0)[
        "recommendations"]


def test_a_host_is_rightsized_or_consolidated_never_both(team):
    host, _ = make_host(team, gpus=4)
    host.instance_type = "g5.12xlarge"
    host.save()
    set_price("g5.12xlarge", "us-east-1", "on_demand", "5.672")
    set_price("g5.xlarge", "us-east-1", "on_demand", "1.006")
    g0, *idle = host.gpus.order_by("index")
    add_hours(g0, 100, 80.0, mem_mib=8000.0)
    for g in idle:
        add_hours(g, 100, 1.0, kwh_per_hour=0.02, mem_mib=500.0)
    found = [r for r in recs(team) if r["kind"] in IDLE_FAMILY]
    assert [r["kind"] for r in found] == ["rightsize"]
    # (5.672 - 1.006) $/h x 101.39 h = 473.08 $/month
    assert found[0]["monthly_usd_saved"] == pytest.approx(4.666 * HOURS)
    # never more than the host costs a month: 5.672 x 101.39 = 575.08 $
    assert sum(r["monthly_usd_saved"] for r in found) <= 5.672 * HOURS


def test_two_half_idle_hosts_free_one_whole_host(team):
    # Two p4d hosts (2 GPUs registered each), one busy and one idle GPU each: the two busy
    # GPUs fit on one host. No cheaper A100 instance exists, so there is no rightsizing.
    set_price("p4d.24xlarge", "us-east-1", "on_demand", str(P4D))
    for name in ("node-a", "node-b"):
        host, _ = make_host(team, name=name)
        g0, g1 = host.gpus.order_by("index")
        add_hours(g0, 100, 80.0)
        add_hours(g1, 100, 1.0, kwh_per_hour=0.05)
    found = [r for r in recs(team) if r["kind"] in IDLE_FAMILY]
    assert [r["kind"] for r in found] == ["consolidate"]
    [c] = found
    assert c["detail"]["freed"] == ["node-b"] and "onto fewer hosts" in c["title"]
    # one host's 101.39 h a month at 21.957642 $/h = 2226.26 $, half of the two hosts' cost
    assert c["monthly_usd_saved"] == pytest.approx(P4D * HOURS)
    assert c["pct_saved"] == pytest.approx(50.0)
    # the freed host's 2 GPUs at the idle draw of 0.05 kW each, PUE 1.1
    assert c["kwh_per_month"] == pytest.approx(-2 * 0.05 * HOURS * 1.1)


def test_one_half_idle_host_claims_no_dollars(team):
    set_price("p4d.24xlarge", "us-east-1", "on_demand", str(P4D))
    host, _ = make_host(team)
    g0, g1 = host.gpus.order_by("index")
    add_hours(g0, 100, 80.0)
    add_hours(g1, 100, 1.0, kwh_per_hour=0.05)
    [c] = [r for r in recs(team) if r["kind"] in IDLE_FAMILY]
    assert c["kind"] == "consolidate" and c["monthly_usd_saved"] == 0.0
    assert c["kwh_per_month"] == pytest.approx(-0.05 * HOURS * 1.1)


def test_stopping_an_idle_host_saves_the_hours_it_runs(team):
    set_price("p4d.24xlarge", "us-east-1", "on_demand", str(P4D))
    host, _ = make_host(team)
    for g in host.gpus.all():
        add_hours(g, 100, 1.0, kwh_per_hour=0.05)
    [s] = [r for r in recs(team) if r["kind"] in IDLE_FAMILY]
    assert s["kind"] == "stop_idle"
    assert s["monthly_usd_saved"] == pytest.approx(P4D * HOURS)  # 2226.26 $, not x 730 h


@pytest.fixture
def shared_host(team):
    """One p4d host (2 GPUs registered), both GPUs busy for 100 h; on-demand 20 $/h, spot
    8 $/h in the <5% interruption band."""
    host, _ = make_host(team)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "20")
    set_price("p4d.24xlarge", "us-east-1", "spot", "8", band="<5%",
              as_of=NOW - dt.timedelta(hours=1))
    g0, g1 = host.gpus.order_by("index")
    add_hours(g0, 100, 80.0)
    add_hours(g1, 100, 80.0)
    return host, g0, g1


# 30-minute checkpoints in the <5% band: 0.05/730 x (15 + 10)/60 extra run time
SPOT_EFFECTIVE = 8 * (1 + 0.05 / 730 * 25 / 60)


def test_a_workload_on_half_a_host_claims_half_its_spot_saving(team, shared_host):
    host, g0, g1 = shared_host
    trainer = Workload.objects.create(team=team, name="trainer", kind="training",
                                      interruptible=True, checkpoint_interval_min=30)
    trainer.gpus.add(g0)
    chat = Workload.objects.create(team=team, name="chat", kind="inference",
                                   latency_critical=True)
    chat.gpus.add(g1)
    by_subject = {r["subject"]: r for r in recs(team) if r["kind"] in ("spot", "stay_on_demand")}
    spot = by_subject["trainer"]
    assert spot["kind"] == "spot"
    # (20 - 8.000228) $/h x 100 h x 1/2 x 730/720 = 608.32 $/month, not the whole host's
    assert spot["monthly_usd_saved"] == pytest.approx((20 - SPOT_EFFECTIVE) * HOURS / 2)
    assert spot["detail"]["gpu_share"] == pytest.approx(0.5)
    assert spot["detail"]["shared_with"] == ["chat"]
    assert "shares gpu-node-1 with chat" in spot["reasoning"]
    # the other half stays on-demand, and says it is the same machine
    stay = by_subject["chat"]
    assert stay["kind"] == "stay_on_demand"
    assert "shares gpu-node-1 with trainer" in stay["reasoning"]


def test_two_workloads_on_the_same_gpus_split_the_saving(team, shared_host):
    host, _, _ = shared_host
    for name in ("train-a", "train-b"):
        w = Workload.objects.create(team=team, name=name, kind="training", interruptible=True,
                                    checkpoint_interval_min=30)
        w.hosts.add(host)
    spots = [r for r in recs(team) if r["kind"] == "spot"]
    assert len(spots) == 2
    # each GPU is claimed by both workloads: each gets half, together the whole host
    whole = (20 - SPOT_EFFECTIVE) * HOURS
    assert [r["monthly_usd_saved"] for r in spots] == pytest.approx([whole / 2, whole / 2])


def test_spot_advice_uses_the_latest_stored_spot_price_and_says_since_when(team, shared_host):
    # The refresh stored a 7-day median of 8 $/h and the latest price, 6.50 $/h, in force
    # since three hours before NOW: spot moves hourly, so the advice uses the latest.
    from decimal import Decimal

    from greenops.costs.models import Price

    changed = NOW - dt.timedelta(hours=3)
    Price.objects.filter(option="spot").update(
        latest_usd_per_hour=Decimal("6.5"), detail={"last_change_at": changed.isoformat()})
    host, g0, g1 = shared_host
    trainer = Workload.objects.create(team=team, name="trainer", kind="training",
                                      interruptible=True, checkpoint_interval_min=30)
    trainer.gpus.add(g0, g1)
    (spot,) = [r for r in recs(team) if r["kind"] == "spot"]
    effective = 6.5 * (1 + 0.05 / 730 * 25 / 60)  # the same redo allowance as SPOT_EFFECTIVE
    # (20 - 6.500186) $/h x 101.39 h = 1368.74 $/month (the median would say 1216.64 $)
    assert spot["monthly_usd_saved"] == pytest.approx((20 - effective) * HOURS)
    (price,) = [p for p in spot["prices"] if p.get("used")]  # the on-demand row has none
    assert price["usd_per_hour"] == 6.5 and price["median_usd_per_hour"] == 8.0
    assert price["used"] == "latest" and price["price_at"] == changed.isoformat()
    stamp = changed.strftime("%Y-%m-%d %H:%M")
    assert f"Spot at $6.5000/h: the latest price, in force since {stamp} UTC" in \
        spot["reasoning"]


def test_an_on_prem_host_left_on_demand_gets_no_spot_advice_and_no_crash(team):
    """An on-premises server enrolled with provider on_prem but the default purchase option
    (on_demand): its price is the amortised hardware (no catalog price behind it), so there is
    no on-demand rate to compare spot with. It used to raise AttributeError (None.usd_per_hour)
    and take the whole recommendations list down with it."""
    host, _ = make_host(team, name="rack-7")
    host.provider, host.instance_type = "on_prem", ""
    host.save()
    assert host.purchase_option == "on_demand"
    # $36,000 over 36 months = 1,000 $/month = 1000 / 730 = 1.3699 $/h
    HostCostConfig.objects.create(host=host, hardware_usd=36000, amortisation_months=36)
    for g in host.gpus.all():
        add_hours(g, 100, 80.0)
    w = Workload.objects.create(
        team=team, name="batch", kind="training", interruptible=True, checkpoint_interval_min=30
    )
    w.hosts.add(host)
    found = recs(team)
    assert [r for r in found if r["kind"] in ("spot", "stay_on_demand")] == []
