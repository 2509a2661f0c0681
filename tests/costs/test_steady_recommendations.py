"""Issue 8 item 14: recommendations that hold still. Figures worked out by hand in comments."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.carbon.models import HostSite, Site
from greenops.costs.team_recommendations import team_recommendations
from tests.support.costs import END, NOW, add_hours, enrolled, set_price
from tests.support.factories import make_host


def recs(team, days: int, **kw) -> list[dict]:
    return team_recommendations(team, days, NOW, **kw)["recommendations"]


def flat_p4d(team, days: int):
    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=90))
    for gpu in host.gpus.all():
        add_hours(gpu, days * 24, 90.0, minutes=False)
    return host


def test_too_little_history_says_so_instead_of_committing(team):
    # 14 days of flat use: on the 30-day lookback, 14 days measured (not 30).
    flat_p4d(team, 14)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726", as_of=NOW)
    set_price("p4d.24xlarge", "us-east-1", "reserved", "11.57", as_of=NOW, term_years=3,
              payment="no_upfront")
    for days in (7, 30):
        found = [r for r in recs(team, days) if r["kind"] in ("commit", "no_commitment")]
        assert [r["kind"] for r in found] == ["no_commitment"]
        measured = min(days, 14)
        assert f"{measured} days measured; commitments need 30" in found[0]["reasoning"]
        assert found[0]["monthly_usd_saved"] == 0.0


def test_thirty_days_measured_may_commit(team):
    # 30 flat days: 1 instance all the time; 3y no upfront at $11.57 against $32.7726:
    # (32.7726 - 11.57) x 730 = $15,477.80 a month.
    flat_p4d(team, 30)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726", as_of=NOW)
    set_price("p4d.24xlarge", "us-east-1", "reserved", "11.57", as_of=NOW, term_years=3,
              payment="no_upfront")
    [c] = [r for r in recs(team, 30) if r["kind"] == "commit"]
    assert c["monthly_usd_saved"] == pytest.approx((32.7726 - 11.57) * 730)
    assert c["detail"]["measured_days"] == 30


def test_an_older_reserved_rate_is_never_set_against_a_newer_on_demand_price(team):
    # On-demand was cut to $20.00 on the day before NOW; the only reserved rate, $24.00, is
    # from the old price list (60 days before): a "reservation" dearer than on-demand. It is
    # left out, so there is nothing to commit to, and the reasoning says why.
    flat_p4d(team, 30)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "20.00", as_of=NOW - dt.timedelta(days=1))
    for kind, term in (("reserved", 1), ("reserved", 3)):
        set_price("p4d.24xlarge", "us-east-1", kind, "24.00" if term == 1 else "18.00",
                  as_of=NOW - dt.timedelta(days=60), term_years=term, payment="no_upfront")
    found = [r for r in recs(team, 30) if r["kind"] in ("commit", "no_commitment")]
    assert [r["kind"] for r in found] == ["no_commitment"]
    why = found[0]["reasoning"]
    assert "Reserved instance 1y no upfront (as of" in why
    assert "older than the on-demand price of" in why
    # the old 3-year rate ($18 < $20) would have "saved" (20 - 18) x 730 = $1,460 a month
    # on a price list that no longer exists: it is left out too
    assert "Reserved instance 3y no upfront (as of" in why
    assert all(p["label"] == "On-demand" for p in found[0]["prices"])


def test_carbon_effect_uses_the_region_that_labels_it(team):
    # Two hosts: "virginia" (us-east-1, listed first) busy, "dublin" (eu-west-1) idle for
    # 50 hours at 0.05 kW per GPU. The stop-idle advice is about dublin, so its CO2e uses
    # dublin's site: PUE 1.2, 300 g/kWh. kWh/month = -(2 x 0.05 kW) x (50 x 730/720 h) x 1.2
    # = -6.083 kWh; CO2e = -6.083 x 300 / 1000 = -1.825 kg.
    virginia, _ = make_host(team, "virginia")
    dublin, _ = make_host(team, "dublin")
    dublin.region = "eu-west-1"
    dublin.save()
    for h in (virginia, dublin):
        enrolled(h, END - dt.timedelta(days=90))
    site = Site.objects.create(team=team, name="Dublin DC", pue=1.2,
                               grid_intensity_override_g_per_kwh=300.0,
                               override_source="supplier contract")
    HostSite.objects.create(host=dublin, site=site)
    for g in virginia.gpus.all():
        add_hours(g, 50, 90.0, minutes=False)
    for g in dublin.gpus.all():
        add_hours(g, 50, 1.0, kwh_per_hour=0.05)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726", as_of=NOW)
    set_price("p4d.24xlarge", "eu-west-1", "on_demand", "35.0", as_of=NOW)
    report = team_recommendations(team, 7, NOW)
    [stop] = [r for r in report["recommendations"] if r["kind"] == "stop_idle"]
    assert stop["subject"] == "dublin"
    hours = 50 * 730 / 720  # 50 h of the 30-day savings basis, whatever the lookback
    assert stop["kwh_per_month"] == pytest.approx(-2 * 0.05 * hours * 1.2)
    assert stop["co2e_kg_per_month"] == pytest.approx(-2 * 0.05 * hours * 1.2 * 300 / 1000)
    assert stop["carbon_source"].startswith("dublin (eu-west-1): PUE 1.2 (site Dublin DC)")
    assert "300 g CO2e/kWh" in stop["carbon_source"]


def test_methodology_page_states_the_recommendation_rules(client, users):
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    part = html[html.index('id="recommendations"'):]
    assert "14 days measured; commitments need 30" in part
    assert "older than the on-demand price" in part
    assert "PUE and grid intensity of the host it is about" in part
    assert "projected to a month from the latest 30 days, whatever lookback" in part


def busy_last_week(team, enrolled_days: int = 90, hours: int = 7 * 24):
    """One p4d host running flat out for the last `hours` and idle (off) before that, its GPUs
    used by one checkpointed training job; on-demand $20/h, spot $8/h in the <5% band."""
    from greenops.workloads.models import Workload

    host, _ = make_host(team)
    enrolled(host, END - dt.timedelta(days=enrolled_days))
    for gpu in host.gpus.all():
        add_hours(gpu, hours, 90.0, minutes=False)
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "20", as_of=NOW)
    set_price("p4d.24xlarge", "us-east-1", "spot", "8", band="<5%",
              as_of=NOW - dt.timedelta(hours=1))
    w = Workload.objects.create(team=team, name="trainer", kind="training", interruptible=True,
                                checkpoint_interval_min=30)
    w.hosts.add(host)
    return host


# 30-minute checkpoints in the <5% band: 0.05/730 x (15 + 10)/60 extra run time
SPOT_EFFECTIVE = 8 * (1 + 0.05 / 730 * 25 / 60)


def test_spot_saving_does_not_swing_with_the_lookback(team):
    # The host ran all 168 h of the last week and not at all in the 23 days before. Before
    # item 14 the 7-day lookback projected 168 x 730/168 = 730 h a month ($8,759.83) and the
    # 30-day one 168 x 730/720 = 170.33 h ($2,043.96): the "same" advice 4.3x apart. Now both
    # (and 60) project from the latest 30 days: (20 - 8.000228) x 170.33 = $2,043.96 a month.
    busy_last_week(team)
    expected = (20 - SPOT_EFFECTIVE) * 168 * 730 / 720
    for days in (7, 30, 60):
        report = team_recommendations(team, days, NOW)
        [spot] = [r for r in report["recommendations"] if r["kind"] == "spot"]
        assert spot["monthly_usd_saved"] == pytest.approx(expected), days
        assert spot["detail"]["basis_days"] == 30
        assert "based on the last 30 days measured, whatever the lookback" in spot["reasoning"]
        assert report["savings_basis"]["days"] == 30


def test_short_history_projects_from_the_days_it_has_and_says_so(team):
    # Enrolled 10 days ago and running every hour since: 240 h measured, all running, so a
    # month is 240 x 730/240 = 730 h: (20 - 8.000228) x 730 = $8,759.83, on any lookback.
    busy_last_week(team, enrolled_days=10, hours=240)
    for days in (7, 30):
        [spot] = [r for r in team_recommendations(team, days, NOW)["recommendations"]
                  if r["kind"] == "spot"]
        assert spot["monthly_usd_saved"] == pytest.approx((20 - SPOT_EFFECTIVE) * 730), days
        assert spot["detail"]["basis_days"] == 10
        assert "based on only 10.0 days measured" in spot["reasoning"]
