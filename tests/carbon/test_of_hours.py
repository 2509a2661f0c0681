"""carbon_of over several hosts and hours, and the factor lookups' exact sources: cases that
mutation testing showed untested (tests/mutation/SURVIVORS.md). Arithmetic by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.carbon import accounting
from greenops.carbon.accounting import SiteFactors, carbon_of
from greenops.carbon.models import HostSite, Site
from greenops.energy import HourEnergy, ItEnergy
from greenops.telemetry.models import Host
from tests.support.factories import make_host

H = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def test_factors_apply_per_host_and_hour_then_sum():
    a, b = Host(id=1, name="A"), Host(id=2, name="B")

    def factors(host: Host, hour: dt.datetime) -> SiteFactors:
        # Host A's site changed its factors from hour H+2 on; host B has one set.
        if host.id == 2:
            return SiteFactors(1.1, "site B", 100.0, "grid B")
        if hour >= H + 2 * HOUR:
            return SiteFactors(1.2, "site A 2026", 300.0, "grid A new")
        return SiteFactors(1.5, "site A", 400.0, "grid A")

    energy = ItEnergy(H, H + 3 * HOUR, hosts={1: a, 2: b}, hours={
        (1, H): HourEnergy(0.0, 0.0),  # reported nothing: skipped, and the sum goes on
        (1, H + HOUR): HourEnergy(3_000_000.0, 600_000.0),  # 3.6 MJ = 1 kWh
        (1, H + 2 * HOUR): HourEnergy(7_200_000.0, 0.0),  # 2 kWh
        (2, H + HOUR): HourEnergy(1_800_000.0, 0.0),  # 0.5 kWh
    })
    c = carbon_of(energy, factors)
    # IT 1 + 2 + 0.5 = 3.5 kWh. Facility 1 x 1.5 + 2 x 1.2 + 0.5 x 1.1 = 4.45 kWh.
    # CO2e 1.5 x 400 + 2.4 x 300 + 0.55 x 100 = 600 + 720 + 55 = 1375 g.
    assert c.it_energy_j == pytest.approx(3.5 * 3_600_000)
    assert c.facility_energy_kwh == pytest.approx(4.45)
    assert c.co2e_g == pytest.approx(1375.0)
    assert c.pue == pytest.approx(4.45 / 3.5)
    # Every factor used is named once, in host then hour order.
    assert c.pue_source == "1.5 (site A); 1.2 (site A 2026); 1.1 (site B)"
    assert c.intensity_source == ("400 g/kWh (grid A); 300 g/kWh (grid A new); "
                                  "100 g/kWh (grid B)")


@pytest.mark.django_db
def test_cached_factors_are_looked_up_once_per_host(team, django_assert_num_queries):
    h1, _ = make_host(team, "h1")
    h2, _ = make_host(team, "h2")
    site = Site.objects.create(team=team, name="Lab", pue=1.3,
                               grid_intensity_override_g_per_kwh=250.0)
    HostSite.objects.create(host=h1, site=site)
    lookup = accounting.cached_site_factors()
    first = lookup(h1, H)
    assert (first.pue, first.intensity_g_per_kwh) == (1.3, 250.0)
    with django_assert_num_queries(0):
        assert lookup(h1, H + HOUR) == first
    other = lookup(h2, H)
    assert other.pue_source == "GreenOps default (GREENOPS_DEFAULT_PUE)"
    assert lookup(h1, H + 2 * HOUR) == first and lookup(h2, H + HOUR) == other


@pytest.mark.django_db
def test_a_hosts_factors_take_one_query(team, django_assert_num_queries):
    host, _ = make_host(team)
    site = Site.objects.create(team=team, name="Lab", pue=1.5,
                               grid_intensity_override_g_per_kwh=400.0)
    HostSite.objects.create(host=host, site=site)
    with django_assert_num_queries(1):  # the host's site comes with its link row
        f = accounting.site_factors(host)
    # An override without a named source says just that, nothing dangling.
    assert f.intensity_source == "site override (Lab)"
    c = accounting.carbon_for_energy(3_600_000.0, f)
    assert (c.pue_source, c.intensity_source) == ("site Lab", "site override (Lab)")


@pytest.mark.django_db
def test_unknown_locations_name_what_was_configured(team):
    # A site and a host whose cloud region is unknown: the world average, naming the provider
    # and region that were looked up.
    host, _ = make_host(team)
    host.region = "mars-north-1"
    host.save()
    f = accounting.site_factors(host)
    assert f.intensity_source.endswith("(location unknown: aws/mars-north-1)")
    site = Site.objects.create(team=team, name="Moon", provider="gcp", region="moon-1")
    HostSite.objects.create(host=host, site=site)
    f = accounting.site_factors(host)
    assert f.intensity_source.endswith("(location unknown: gcp/moon-1)")


@pytest.mark.django_db
def test_an_on_prem_host_is_placed_by_its_country(team):
    host, _ = make_host(team)
    host.provider, host.region, host.country = "on_prem", "", "FRA"
    host.save()
    f = accounting.site_factors(host)
    assert "country table: FRA" in f.intensity_source
