"""Prices, hosts and sites a team sets in the product: a price override fills a blank cost, a
discount reduces a list price, a host edit re-prices it, a site is created and edited; each
change is audited, and viewers (and members) change nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests.support.factories import make_host


@pytest.fixture
def viewer(team):
    from django.contrib.auth.models import User

    from greenops.teams.models import Membership, Role

    user = User.objects.create_user("viewer", "viewer@example.com", "pw-viewer")
    Membership.objects.create(team=team, user=user, role=Role.VIEWER)
    return user


def _ran(host, hours: int) -> None:
    from greenops.telemetry.models import GpuHour

    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=end - dt.timedelta(hours=h + 1), samples=60, util_sum=60 * 50.0,
                util_n=60, power_sum_w=60 * 300.0, power_n=60, energy_j=1_080_000.0)
        for g in host.gpus.all() for h in range(hours)])


def _total(team) -> float | None:
    from greenops.costs import accounting

    return accounting.team_costs(accounting.collect(team, 1))["total_cost_usd"]


def test_a_price_override_fills_a_blank_team_cost(client, users, team):
    from greenops.teams.models import AuditEvent

    host, _ = make_host(team, "lambda-1", gpus=8)
    host.instance_type = "gpu_8x_h100_sxm5"  # a GPU cloud the catalog does not list
    host.save()
    _ran(host, 5)
    assert _total(team) is None  # one unpriced host blanks the total
    client.force_login(users["owner"])
    client.get(f"/teams/{team.slug}/")  # no snapshot: its refresh runs after this response
    assert "1 host unpriced (40 GPU-hours without a price)" in client.get(
        f"/teams/{team.slug}/").content.decode()
    r = client.post(f"/teams/{team.slug}/costs/prices/new", {
        "kind": "hourly", "instance_type": "gpu_8x_h100_sxm5", "purchase_option": "on_demand",
        "usd_per_hour": "23.92", "source": "Lambda on-demand price list",
        "valid_from": f"{timezone.now() - dt.timedelta(days=1):%Y-%m-%d %H:%M}"})
    assert r.status_code == 302
    # 5 running hours x $23.92 = $119.60
    assert _total(team) == pytest.approx(5 * 23.92)
    # The view after the edit shows the last figures, labelled, and queues their refresh
    # (in-process after its response); the next one shows the new figures.
    html = client.get(f"/teams/{team.slug}/").content.decode()
    assert "1 host unpriced" in html and ", refreshing." in html
    html = client.get(f"/teams/{team.slug}/").content.decode()
    assert "without a price" not in html and 'data-kpi="cost_usd">$119.60<' in html
    event = AuditEvent.objects.get(team=team, action=AuditEvent.Action.PRICE_OVERRIDE_SET)
    assert event.actor == users["owner"] and event.detail["usd_per_hour"] == "23.92"


def test_a_discount_reduces_list_prices_and_ending_it_restores_them(client, users, team):
    from greenops.costs.overrides import PriceOverride

    host, _ = make_host(team, gpus=2)  # p4d.24xlarge us-east-1 on-demand: $21.957642/h
    _ran(host, 3)
    client.force_login(users["owner"])
    client.post(f"/teams/{team.slug}/costs/prices/new",
                {"kind": "discount", "discount_pct": "12.5", "source": "EDP 2026",
                 "valid_from": f"{timezone.now() - dt.timedelta(days=1):%Y-%m-%d %H:%M}"})
    # 3 h x 21.957642 x (1 - 0.125) = $57.638810
    assert _total(team) == pytest.approx(3 * 21.957642 * 0.875)
    row = PriceOverride.objects.get(team=team)
    assert client.post(f"/teams/{team.slug}/costs/prices/{row.id}/end").status_code == 302
    row.refresh_from_db()
    assert row.valid_until is not None  # ended, kept in the history
    # The hours it was in force keep it: ending a discount does not reprice the past.
    assert _total(team) == pytest.approx(3 * 21.957642 * 0.875)
    from greenops.costs.catalog import host_price

    assert host_price(host).usd_per_hour == pytest.approx(21.957642)  # from now on


def test_an_override_prices_only_the_hours_it_was_in_force(db, team):
    """Set two hours ago: of 4 running hours, the last 2 at the custom $10/h, the first 2 at
    the catalog's $21.957642/h -> 2 x 21.957642 + 2 x 10 = $63.915284."""
    from greenops.costs.overrides import PriceOverride

    host, _ = make_host(team, gpus=2)
    _ran(host, 4)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    PriceOverride.objects.create(team=team, kind="hourly", instance_type="p4d.24xlarge",
                                 usd_per_hour=10, source="quote",
                                 valid_from=hour - dt.timedelta(hours=2))
    assert _total(team) == pytest.approx(2 * 21.957642 + 2 * 10)


def test_an_override_beyond_its_validity_does_not_price_earlier_hours(db, team):
    from greenops.costs.catalog import host_price
    from greenops.costs.overrides import PriceOverride

    host, _ = make_host(team, gpus=2)
    now = timezone.now()
    PriceOverride.objects.create(team=team, kind="hourly", instance_type="p4d.24xlarge",
                                 usd_per_hour=10, source="quote", valid_from=now)
    assert host_price(host, now + dt.timedelta(minutes=1)).usd_per_hour == 10.0
    assert host_price(host, now - dt.timedelta(days=1)).usd_per_hour == pytest.approx(21.957642)


@pytest.mark.parametrize(("data", "field"), [
    ({"kind": "discount", "source": "x"}, "discount_pct"),
    ({"kind": "discount", "discount_pct": "120", "source": "x"}, "discount_pct"),
    ({"kind": "hourly", "usd_per_hour": "5", "source": "x"}, "instance_type"),
    ({"kind": "hourly", "instance_type": "p4d.24xlarge", "source": "x"}, "usd_per_hour"),
    ({"kind": "hourly", "instance_type": "p4d.24xlarge", "usd_per_hour": "5",
      "electricity_usd_per_kwh": "0.2", "source": "x"}, "electricity_usd_per_kwh"),
    ({"kind": "on_prem", "usd_per_hour": "-1", "source": "x"}, "usd_per_hour"),
    ({"kind": "discount", "discount_pct": "10"}, "source"),
    ({"kind": "discount", "discount_pct": "10", "source": "x", "valid_from": "soon"},
     "valid_from"),
])
def test_bad_price_input_names_the_field_and_stores_nothing(client, users, team, data, field):
    from greenops.costs.overrides import PriceOverride

    client.force_login(users["owner"])
    r = client.post(f"/teams/{team.slug}/costs/prices/new",
                    {"valid_from": "2026-11-01 00:00", **data})
    assert r.status_code == 400
    assert field in r.context["form"].errors
    assert not PriceOverride.objects.exists()


def test_on_premises_override_prices_hardware_and_electricity(db, team):
    from greenops.costs.catalog import host_price
    from greenops.costs.overrides import PriceOverride

    host, _ = make_host(team, "dgx-1", gpus=8)
    host.provider, host.purchase_option = "on_prem", "on_prem"
    host.save()
    assert host_price(host).code == "missing_on_prem_cost"
    PriceOverride.objects.create(team=team, kind="on_prem", purchase_option="on_prem",
                                 usd_per_hour=9.5, electricity_usd_per_kwh=0.14,
                                 source="DGX invoice / 36 months")
    price = host_price(host)
    assert price.usd_per_hour == 9.5 and price.electricity_usd_per_kwh == pytest.approx(0.14)
    assert "DGX invoice" in price.source


def test_host_edit_reprices_the_host_sets_its_site_and_is_audited(client, users, team):
    from greenops.carbon.models import HostSite, Site
    from greenops.costs.catalog import host_price
    from greenops.teams.models import AuditEvent

    host, _ = make_host(team, "box", gpus=1)
    host.instance_type = "g9.unknown"
    host.save()
    site = Site.objects.create(team=team, name="us-east-1", pue=1.15)
    assert host_price(host).code == "unknown_instance_type"
    client.force_login(users["owner"])
    r = client.post(f"/teams/{team.slug}/hosts/{host.id}/edit/", {
        "provider": "aws", "region": "us-east-1", "instance_type": "g6e.xlarge",
        "purchase_option": "on_demand", "country": "usa", "site": str(site.id)})
    assert r.status_code == 302
    host.refresh_from_db()
    assert host.instance_type == "g6e.xlarge" and host.country == "USA"
    assert host_price(host).usd_per_hour == pytest.approx(1.861)  # catalog, us-east-1
    assert HostSite.objects.get(host=host).site == site
    event = AuditEvent.objects.get(team=team, action=AuditEvent.Action.HOST_CHANGED)
    assert event.detail["changes"]["instance_type"] == ["g9.unknown", "g6e.xlarge"]
    assert event.detail["changes"]["site"] == [None, "us-east-1"]
    bad = client.post(f"/teams/{team.slug}/hosts/{host.id}/edit/", {
        "provider": "aws", "region": "us-east-1", "instance_type": "g6e.xlarge",
        "purchase_option": "forever", "country": "USA"})
    assert bad.status_code == 400 and "purchase_option" in bad.context["form"].errors


def test_site_create_and_edit_are_audited_and_validated(client, users, team):
    from greenops.carbon.models import Site
    from greenops.teams.models import AuditEvent

    client.force_login(users["owner"])
    r = client.post(f"/teams/{team.slug}/carbon/sites/new/",
                    {"name": "Frankfurt DC", "pue": "1.3", "country": "deu"})
    assert r.status_code == 302
    site = Site.objects.get(team=team, name="Frankfurt DC")
    assert site.pue == 1.3 and site.country == "DEU"
    r = client.post(f"/teams/{team.slug}/carbon/sites/{site.id}/edit/",
                    {"name": "Frankfurt DC", "pue": "1.25", "country": "DEU",
                     "grid_intensity_override_g_per_kwh": "320"})
    assert r.status_code == 400 and "override_source" in r.context["form"].errors
    r = client.post(f"/teams/{team.slug}/carbon/sites/{site.id}/edit/",
                    {"name": "Frankfurt DC", "pue": "0.9", "country": "DEU"})
    assert r.status_code == 400 and "pue" in r.context["form"].errors  # PUE is at least 1
    r = client.post(f"/teams/{team.slug}/carbon/sites/{site.id}/edit/",
                    {"name": "Frankfurt DC", "pue": "1.25", "country": "DEU"})
    assert r.status_code == 302
    site.refresh_from_db()
    assert site.pue == 1.25
    actions = list(AuditEvent.objects.filter(team=team).values_list("action", flat=True))
    assert AuditEvent.Action.SITE_CREATED in actions and AuditEvent.Action.SITE_CHANGED in actions


@pytest.mark.parametrize("who", ["viewer", "member"])
def test_a_viewer_or_member_cannot_change_prices_hosts_or_sites(client, users, team, viewer,
                                                                who):
    from greenops.carbon.models import Site
    from greenops.costs.overrides import PriceOverride

    host, _ = make_host(team, gpus=1)
    site = Site.objects.create(team=team, name="DC", pue=1.4)
    client.force_login(viewer if who == "viewer" else users["member"])
    assert client.post(f"/teams/{team.slug}/costs/prices/new", {
        "kind": "discount", "discount_pct": "50", "source": "x"}).status_code == 403
    assert client.get(f"/teams/{team.slug}/hosts/{host.id}/edit/").status_code == 403
    assert client.post(f"/teams/{team.slug}/hosts/{host.id}/edit/", {
        "provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge",
        "purchase_option": "on_demand"}).status_code == 403
    assert client.post(f"/teams/{team.slug}/carbon/sites/{site.id}/edit/",
                       {"name": "DC", "pue": "1.0"}).status_code == 403
    assert not PriceOverride.objects.exists()
    host.refresh_from_db()
    site.refresh_from_db()
    assert host.instance_type == "p4d.24xlarge" and site.pue == 1.4
    # They see the prices page, without the form.
    html = client.get(f"/teams/{team.slug}/costs/prices/").content.decode()
    assert "override-form" not in html and "Admins and owners set prices" in html


def test_override_figures_read_as_typed_after_a_round_trip_through_the_database(db, team):
    """DecimalFields come back from the database with all their declared places: a 40 %
    discount must not read "40.00 %", nor $3.25/h "$3.25000/h", in the override list and in
    the cost source every page shows."""
    from decimal import Decimal

    from greenops.costs.catalog import HourlyPrice
    from greenops.costs.overrides import PriceOverride, apply

    def saved(**fields) -> PriceOverride:
        row = PriceOverride.objects.create(team=team, source="contract 7", **fields)
        return PriceOverride.objects.get(id=row.id)

    discount = saved(kind="discount", discount_pct=Decimal("40"))
    assert discount.describe() == "40 % off list prices of every instance type (any option)"
    on_prem = saved(kind="on_prem", usd_per_hour=Decimal("3.25"),
                    electricity_usd_per_kwh=Decimal("0.12"))
    assert on_prem.describe() == "$3.25/h + $0.12/kWh for on-premises every instance type"
    hourly = saved(kind="hourly", instance_type="g6e.12xlarge", usd_per_hour=Decimal("10.49264"),
                   discount_pct=None)
    assert hourly.describe() == "$10.49264/h for g6e.12xlarge (any option)"
    host, _ = make_host(team, "listed")
    listed = HourlyPrice(usd_per_hour=10.0, option="on_demand", source="AWS price list",
                         as_of=timezone.now(), stale=False)
    priced = apply(host, timezone.now(), listed, [discount])
    assert priced.usd_per_hour == pytest.approx(6.0)
    assert priced.source == "AWS price list, less 40 % negotiated discount (contract 7)"
