"""The recommendations page and API: access, validation, and end-to-end recommendations."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops.workloads.models import Workload
from tests.support.costs import add_hours, enrolled, set_price
from tests.support.factories import make_host


def hour_end() -> dt.datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0)


def fresh_p4d_prices() -> None:
    now = timezone.now()
    set_price("p4d.24xlarge", "us-east-1", "on_demand", "32.7726", as_of=now)
    set_price("p4d.24xlarge", "us-east-1", "reserved", "19.22", as_of=now, term_years=1,
              payment="no_upfront")
    set_price("p4d.24xlarge", "us-east-1", "reserved", "11.57", as_of=now, term_years=3,
              payment="no_upfront")


@pytest.mark.parametrize("who,status", [("owner", 200), ("member", 200), ("outsider", 404)])
def test_page_access(client, users, team, other_team, who, status):
    client.force_login(users[who])
    assert client.get(f"/teams/{team.slug}/costs/").status_code == status


def test_page_requires_login(client, team):
    r = client.get(f"/teams/{team.slug}/costs/")
    assert r.status_code == 302 and "/login/" in r["Location"]


def test_page_rejects_unknown_lookback(client, users, team):
    client.force_login(users["owner"])
    assert client.get(f"/teams/{team.slug}/costs/?lookback=14").status_code == 404


@pytest.mark.parametrize("who,status", [("owner", 200), ("member", 200), ("outsider", 404)])
def test_api_access(client, users, team, other_team, who, status):
    client.force_login(users[who])
    r = client.get(f"/api/v1/teams/{team.slug}/recommendations?lookback=30")
    assert r.status_code == status
    if status == 404:
        assert r.json()["error"] == "not_found"


def test_api_requires_login(client, team):
    assert client.get(f"/api/v1/teams/{team.slug}/recommendations").status_code == 401


@pytest.mark.parametrize("value", ["14", "abc", "-7", "30.5"])
def test_api_bad_lookback_is_a_422_naming_the_field(client, users, team, value):
    client.force_login(users["owner"])
    for path in ("recommendations", "costs"):
        r = client.get(f"/api/v1/teams/{team.slug}/{path}?lookback={value}")
        assert r.status_code == 422
        body = r.json()
        assert body["error"] == "validation_error" and body["field"] == "lookback"
        assert "7, 30, 60" in body["message"]


def test_flat_load_recommends_reserved_end_to_end(client, users, team):
    # Commitments need 30 days measured: a flat 30 days on the 30-day lookback.
    host, _ = make_host(team)
    for gpu in host.gpus.all():
        add_hours(gpu, 30 * 24, 90.0, end=hour_end(), minutes=False)
    fresh_p4d_prices()
    client.force_login(users["member"])
    body = client.get(f"/api/v1/teams/{team.slug}/recommendations?lookback=30").json()
    commits = [r for r in body["recommendations"] if r["kind"] == "commit"]
    assert len(commits) == 1
    c = commits[0]
    assert c["subject"] == "p4d.24xlarge in us-east-1" and c["detail"]["level"] == 1
    assert c["monthly_usd_saved"] == pytest.approx((32.7726 - 11.57) * 730)
    assert c["prices_stale"] is False
    assert {p["label"] for p in c["prices"]} >= {"On-demand", "Reserved instance 3y no upfront"}
    assert not any(r["kind"] in ("stop_idle", "consolidate") for r in body["recommendations"])
    html = client.get(f"/teams/{team.slug}/costs/?lookback=30").content.decode()
    assert 'data-kind="commit"' in html and 'data-figure="fig-commit-0"' in html
    assert "Commit to 1 x p4d.24xlarge in us-east-1 (Reserved instance 3y no upfront)" in html


def test_office_hours_load_gets_no_commitment_but_spot_for_checkpointed_training(
        client, users, team):
    host, _ = make_host(team)
    enrolled(host, hour_end() - dt.timedelta(days=90))  # the savings basis is 30 whole days
    end = hour_end()
    for gpu in host.gpus.all():
        for day in range(7):  # 8 hours a day, 5 days of the last week
            if day < 5:
                add_hours(gpu, 8, 90.0, end=end - dt.timedelta(days=day))
    fresh_p4d_prices()
    set_price("p4d.24xlarge", "us-east-1", "spot", "12.00", as_of=timezone.now(), band="5-10%")
    w = Workload.objects.create(team=team, name="trainer", kind="training", interruptible=True,
                                checkpoint_interval_min=30)
    w.hosts.add(host)
    client.force_login(users["owner"])
    recs = client.get(f"/api/v1/teams/{team.slug}/recommendations?lookback=7").json()[
        "recommendations"]
    kinds = {r["kind"]: r for r in recs}
    assert "commit" not in kinds and kinds["no_commitment"]["monthly_usd_saved"] == 0.0
    spot = kinds["spot"]
    # 40 host-hours in the 720 of the 30-day savings basis (the 7-day lookback does not
    # change it) -> 40 x 730/720 = 40.56 h/month; overhead 0.10/730 x 25/60
    overhead = 0.10 / 730 * 25 / 60
    hours = 40 * 730 / 720
    assert spot["monthly_usd_saved"] == pytest.approx((32.7726 - 12.0 * (1 + overhead)) * hours)
    # the page states the basis, and the 7-day and 30-day pages show the same spot figure
    pages = [client.get(f"/teams/{team.slug}/costs/?lookback={d}").content.decode()
             for d in (7, 30)]
    assert "projected from the latest 30 days whatever the lookback" in pages[0]
    shown = f"${spot['monthly_usd_saved']:.2f}"
    assert shown in pages[0] and shown in pages[1]


def test_gpu_idle_for_days_is_stopped(client, users, team):
    host, _ = make_host(team)
    enrolled(host, hour_end() - dt.timedelta(days=90))
    for gpu in host.gpus.all():
        add_hours(gpu, 72, 1.0, end=hour_end(), kwh_per_hour=0.05)
    fresh_p4d_prices()
    client.force_login(users["owner"])
    recs = client.get(f"/api/v1/teams/{team.slug}/recommendations?lookback=7").json()[
        "recommendations"]
    stop = next(r for r in recs if r["kind"] == "stop_idle")
    assert stop["subject"] == host.name
    # it ran 72 of the savings basis' 720 hours (30 days, whatever the lookback):
    # 72 x 730/720 = 73 h a month, not 730
    assert stop["monthly_usd_saved"] == pytest.approx(32.7726 * 72 * 730 / 720)
    # 2 GPUs x 0.05 kW x 73 h, PUE and intensity from the carbon app
    assert stop["kwh_per_month"] < 0


def test_page_shows_stale_prices_and_price_problems(client, users, team):
    host, _ = make_host(team)
    # p4d on-demand in eu-west-1: only the snapshot's row exists, dated with its lower bound
    host.region = "eu-west-1"
    host.save()
    other, _ = make_host(team, name="mystery")
    other.instance_type = "p9.mega"
    other.save()
    for gpu in host.gpus.all():
        add_hours(gpu, 24, 90.0, end=hour_end())
    # mystery ran too: a host that never ran costs nothing whatever its price
    # (test_one_figure.py), so only one that ran leaves the total unknown.
    for gpu in other.gpus.all():
        add_hours(gpu, 2, 90.0, end=hour_end())
    client.force_login(users["owner"])
    html = client.get(f"/teams/{team.slug}/costs/?lookback=7").content.decode()
    assert "stale" in html and "as of 2025-06-01" in html
    assert "&#x27;p9.mega&#x27; is not in the aws price catalog" in html
    # A host without a price: no total, the priced hosts' cost shown as a lower bound.
    assert "1 host unpriced: the total is at least" in html
    assert f"≥ ${24 * 23.71569:,.2f}" in html
    body = client.get(f"/api/v1/teams/{team.slug}/costs?lookback=7").json()
    assert body["total_cost_usd"] is None
    assert body["priced_cost_usd"] == pytest.approx(24 * 23.71569)


def test_prices_api_shows_age_and_source(client, users, team):
    client.force_login(users["owner"])
    rows = client.get("/api/v1/prices?region=us-west-2&instance_type=p5.48xlarge").json()[
        "prices"]
    od = next(r for r in rows if r["option"] == "on_demand")
    assert od["usd_per_hour"] == 55.04 and od["stale"] is True and od["age_days"] > 90
    assert od["as_of"].startswith("2025-06-01") and od["method"] == "snapshot"
    assert "skypilot-catalog" in od["source"]
    spot = next(r for r in rows if r["option"] == "spot")
    assert spot["usd_per_hour"] == 12.6935 and spot["stale"] is True
    assert spot["interruption_band"] == ""


def test_costs_list_training_jobs_with_their_accounted_cost(client, users, team):
    from greenops.workloads.models import TrainingJob

    w = Workload.objects.create(team=team, name="trainer", kind="training")
    TrainingJob.objects.create(team=team, workload=w, name="run-7",
                               started_at=timezone.now() - dt.timedelta(days=2),
                               stopped_at=timezone.now() - dt.timedelta(days=1),
                               gpu_hours=16.0, cost_usd=262.18, cost_source="test price")
    TrainingJob.objects.create(team=team, workload=w, name="ancient",
                               started_at=timezone.now() - dt.timedelta(days=90),
                               stopped_at=timezone.now() - dt.timedelta(days=89))
    client.force_login(users["owner"])
    jobs = client.get(f"/api/v1/teams/{team.slug}/costs?lookback=7").json()["training_jobs"]
    assert [(j["name"], j["cost_usd"]) for j in jobs] == [("run-7", 262.18)]
    html = client.get(f"/teams/{team.slug}/costs/?lookback=7").content.decode()
    assert "run-7" in html and "$262.18" in html and "ancient" not in html


def test_snapshot_reserved_rates_older_than_the_on_demand_price_are_left_out(
        client, users, team):
    # The bundled snapshots: p4d on-demand $21.957642 as of 2026-11-09 (after AWS's 2025 P4
    # price cut), reserved 1y/3y $19.22/$11.57 from the P4 page as of 2025-05-31 (before it).
    # An old rate against a new on-demand price is no comparison: both are left out and the
    # page says so instead of recommending a commitment.
    host, _ = make_host(team)
    for gpu in host.gpus.all():
        add_hours(gpu, 30 * 24, 90.0, end=hour_end(), minutes=False)
    client.force_login(users["owner"])
    recs = client.get(f"/api/v1/teams/{team.slug}/recommendations?lookback=30").json()[
        "recommendations"]
    assert not [r for r in recs if r["kind"] == "commit"]
    none = next(r for r in recs if r["kind"] == "no_commitment")
    assert ("Reserved instance 3y effective rate, payment not stated (as of 2025-05-31, older "
            "than the on-demand price of 2026-11-09)") in none["reasoning"]
    assert none["detail"]["measured_days"] == 30


def test_page_names_the_parts_a_partial_refresh_missed(client, users, team):
    from greenops.costs.models import PriceRefresh

    PriceRefresh.objects.create(
        status=PriceRefresh.Status.PARTIAL, prices_updated=9, finished_at=timezone.now(),
        message="2 of 3 parts refreshed, 9 prices updated.",
        parts=[{"part": "price_list", "status": "done", "prices": 8, "error": ""},
               {"part": "spot us-east-1", "status": "done", "prices": 1, "error": ""},
               {"part": "spot af-south-1", "status": "failed", "prices": 0,
                "error": "ClientError: AuthFailure"}])
    client.force_login(users["member"])
    html = client.get(f"/teams/{team.slug}/costs/?lookback=7").content.decode()
    assert "partial" in html
    assert "1 part not refreshed: spot af-south-1" in html
