"""PUE and grid intensity: precedence, sources, and the arithmetic applied exactly once.

Expected intensities are read from codecarbon's data files here by hand (json/csv), not through
greenops.carbon.intensity, so a wrong lookup or unit conversion in the module fails the test.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from greenops.carbon import accounting, intensity
from greenops.carbon.models import HostSite, Site
from tests.support import ROOT
from tests.support.factories import make_host

CC = intensity.codecarbon_dir()


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


# Killed mutants of `make mutate MODULES=intensity` (issue 16, tests/mutation/SURVIVORS.md).


def test_a_region_named_without_its_provider_is_found_when_only_one_provider_uses_it():
    # cloud_region_3, 4, 6, 8: with no provider, the region name is looked up across providers
    # (cloud_regions.csv: eu-west-1 is AWS Ireland, no other provider has that name). The
    # mutants found no row (or all the others) and fell to the world average, or raised.
    found = intensity.resolve(region="eu-west-1")
    assert found.g_per_kwh == pytest.approx(country_g("IRL"), rel=1e-12)  # 290.805 (2023)
    assert found.source.endswith(
        "country table: IRL (2023) via aws eu-west-1 (GreenOps cloud_regions.csv)")


def test_a_us_state_code_in_any_case_names_the_state():
    # us_state_code_3 (key.lower() in table) and _5 (returns key.lower(), which the table does
    # not hold): "VA" and "va" both are eGRID 2023 Virginia, 539.599 lb/MWh x 0.45359237.
    for region in ("VA", "va", " va "):
        found = intensity.resolve(region=region, country="USA")
        assert found.g_per_kwh == pytest.approx(539.599 * 0.45359237, rel=1e-12)
        # for_us_state_1 / for_country_1 (default `via` "XXXX"): nothing follows the year.
        assert found.source == f"codecarbon {intensity.codecarbon_version()} US state table: " \
                               "VA (eGRID 2023)"
    found = intensity.resolve(country="fra")
    assert found.source == f"codecarbon {intensity.codecarbon_version()} country table: FRA (2023)"


def _world(where: str) -> str:
    v = intensity.codecarbon_version()
    return f"codecarbon {v} world average (location unknown: {where})"


def test_the_fallback_order_of_resolve():
    # resolve_1..3 (defaults "XXXX"), _62..67 (the "where" text): the world average (475 g/kWh,
    # carbon_intensity_per_source.json) names exactly what was configured.
    assert intensity.resolve() == intensity.Intensity(475.0, _world("no location configured"))
    assert intensity.resolve(provider="aws", region="mars-north-1").source == \
        _world("aws/mars-north-1")
    # _12: a GCP region without a provider is Google's figure (impact.csv: europe-west1 122).
    assert intensity.resolve(region="europe-west1").g_per_kwh == gcp_g("europe-west1") == 122.0
    # _26: an Azure region name under provider "aws" is no AWS region: not Azure's Virginia.
    assert intensity.resolve(provider="aws", region="eastus").source == _world("aws/eastus")
    # _48, _57: a state name with no provider and no country is that state (eGRID 2023
    # Virginia 539.599 lb/MWh x 0.45359237) ...
    assert intensity.resolve(region="Virginia").g_per_kwh == \
        pytest.approx(539.599 * 0.45359237, rel=1e-12)
    # ... but under a cloud provider, an unknown region name is not read as a state ...
    assert intensity.resolve(provider="aws", region="virginia").source == _world("aws/virginia")
    # ... unless the country says USA (_53..56): eGRID 2023 Texas 771.179 lb/MWh.
    found = intensity.resolve(provider="aws", region="texas", country="USA")
    assert found.g_per_kwh == pytest.approx(771.179 * 0.45359237, rel=1e-12)
    assert "US state table: TX" in found.source
    # _51: a region that is no state, in the USA, is the country's figure (369.473, 2023).
    found = intensity.resolve(region="mars", country="USA")
    assert found.g_per_kwh == country_g("USA") == 369.473
