"""PUE and grid intensity: precedence, sources, and the arithmetic applied exactly once.

Expected intensities are read from codecarbon's data files here by hand (json/csv), not through
greenops.carbon.intensity, so a wrong lookup or unit conversion in the module fails the test.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from greenops.carbon import accounting, intensity
from greenops.carbon.models import HostSite, Site
from tests.conftest import make_host

CC = intensity.codecarbon_dir()
ROOT = Path(__file__).resolve().parent.parent


def country_g(iso3: str) -> float:
    with open(CC / "data/private_infra/global_energy_mix.json") as f:
        return json.load(f)[iso3]["carbon_intensity"]


def state_g(name: str) -> float:
    with open(CC / "data/private_infra/2023/usa_emissions.json") as f:
        lbs_per_mwh = json.load(f)[name]["emissions"]
    return lbs_per_mwh * 453.59237 / 1000  # lb -> g, per MWh -> per kWh


def gcp_g(region: str) -> float:
    with open(CC / "data/cloud/impact.csv", encoding="utf-8-sig") as f:
        return next(float(r["impact"]) for r in csv.DictReader(f) if r["region"] == region)


def test_codecarbon_data_read_without_importing_the_package():
    # In a fresh interpreter: another test in the same process may import codecarbon itself
    # (its client, the agent), and sys.modules would then say nothing about intensity.py.
    check = (
        "import sys\n"
        "from greenops.carbon import intensity\n"
        "assert intensity.country_table()\n"
        "assert 'codecarbon' not in sys.modules, 'intensity.py imported codecarbon'\n"
    )
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("provider", "region", "country", "expected", "source_bits"),
    [
        ("aws", "us-east-1", "", lambda: state_g("virginia"), ["US state table: VA", "aws"]),
        ("aws", "us-west-2", "", lambda: state_g("oregon"), ["US state table: OR"]),
        ("aws", "eu-central-1", "", lambda: country_g("DEU"), ["country table: DEU",
                                                               "eu-central-1"]),
        ("aws", "eu-north-1", "", lambda: country_g("SWE"), ["country table: SWE"]),
        ("azure", "westeurope", "", lambda: country_g("NLD"), ["country table: NLD", "azure"]),
        ("azure", "centralus", "", lambda: state_g("iowa"), ["US state table: IA"]),
        ("gcp", "europe-west1", "", lambda: gcp_g("europe-west1"), ["GCP region table"]),
        ("", "", "FRA", lambda: country_g("FRA"), ["country table: FRA"]),
        ("", "Virginia", "USA", lambda: state_g("virginia"), ["US state table: VA"]),
    ],
)
def test_region_mapping(provider, region, country, expected, source_bits):
    found = intensity.resolve(provider=provider, region=region, country=country)
    assert found.g_per_kwh == pytest.approx(expected(), rel=1e-12)
    for bit in source_bits:
        assert bit in found.source
    assert found.source.startswith("codecarbon ")


def test_us_east_1_is_virginia_not_the_us_average():
    found = intensity.resolve(provider="aws", region="us-east-1")
    # eGRID 2023 Virginia: 539.599 lb/MWh * 0.45359237 = 244.758 g/kWh
    assert found.g_per_kwh == pytest.approx(244.758, abs=1e-3)
    assert found.g_per_kwh != pytest.approx(country_g("USA"))


def test_unknown_location_is_labelled_world_average():
    found = intensity.resolve(provider="aws", region="mars-north-1")
    assert found.g_per_kwh == 475.0  # carbon_intensity_per_source.json world_average
    assert "world average" in found.source and "location unknown" in found.source


def test_every_cloud_region_row_resolves_to_codecarbon_data():
    for (provider, region), row in intensity.cloud_regions().items():
        assert row.country_iso3 in intensity.country_table(), (provider, region)
        if row.us_state:
            assert row.us_state in intensity.us_state_table(), (provider, region)
        found = intensity.resolve(provider=provider, region=region)
        assert "world average" not in found.source


@pytest.mark.django_db
def test_defaults_for_a_host_without_site(team, settings):
    settings.GREENOPS_DEFAULT_PUE = 1.56
    host, _ = make_host(team)  # aws us-east-1
    f = accounting.site_factors(host)
    assert f.pue == 1.56 and "default" in f.pue_source
    assert f.intensity_g_per_kwh == pytest.approx(state_g("virginia"))
    assert "US state table: VA" in f.intensity_source


@pytest.mark.django_db
def test_override_precedence(team, settings):
    settings.GREENOPS_DEFAULT_PUE = 1.56
    host, _ = make_host(team)
    site = Site.objects.create(team=team, name="Frankfurt DC", pue=1.3, country="DEU")
    link = HostSite.objects.create(host=host, site=site)
    f = accounting.site_factors(host)
    # The site's location wins over the host's cloud region; its PUE over the default.
    assert (f.pue, f.pue_source) == (1.3, "site Frankfurt DC")
    assert f.intensity_g_per_kwh == pytest.approx(country_g("DEU"))

    link.pue_override = 1.1
    link.save()
    site.grid_intensity_override_g_per_kwh = 123.0
    site.override_source = "PPA contract 2026"
    site.save()
    f = accounting.site_factors(host)
    assert (f.pue, f.pue_source) == (1.1, "host override")
    assert f.intensity_g_per_kwh == 123.0
    assert f.intensity_source == "site override (Frankfurt DC): PPA contract 2026"


@pytest.mark.django_db
def test_pue_and_intensity_applied_exactly_once(team):
    host, _ = make_host(team)
    site = Site.objects.create(team=team, name="Lab", pue=1.5,
                               grid_intensity_override_g_per_kwh=400.0)
    HostSite.objects.create(host=host, site=site)
    factors = accounting.site_factors(host)
    # 7.2 MJ = 2 kWh IT energy; x 1.5 PUE = 3 kWh facility; x 400 g/kWh = 1200 g.
    c = accounting.carbon_for_energy(7_200_000.0, factors)
    assert c.it_energy_kwh == 2.0
    assert c.facility_energy_kwh == 3.0
    assert c.co2e_g == 1200.0
    assert c.co2e_kg == 1.2
    assert (c.pue, c.intensity_g_per_kwh) == (1.5, 400.0)
    assert c.intensity_source.startswith("site override")
