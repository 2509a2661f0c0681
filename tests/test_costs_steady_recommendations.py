"""Issue 8 item 14: recommendations that hold still. Figures worked out by hand in comments."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.carbon.models import HostSite, Site
from greenops.costs.team_recommendations import team_recommendations
from tests.conftest import make_host
from tests.test_costs_accounting import END, NOW, add_hours, enrolled, set_price


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
    # dublin's site: PUE 1.2, 300 g/kWh. kWh/month = -(2 x 0.05 kW) x (50 x 730/168 h) x 1.2
    # = -26.071 kWh; CO2e = -26.071 x 300 / 1000 = -7.821 kg.
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
    hours = 50 * 730 / 168
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
