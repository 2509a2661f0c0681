"""Grid carbon intensity (g CO2e/kWh) for a location, from the data codecarbon ships.

codecarbon's own lookup code is not used: importing the package runs its __init__, which pulls in
the tracker, pandas and NVML. The data files are read straight from the installed package
directory, found with importlib.util.find_spec (which locates a top-level package without
executing it). AWS and Azure regions, which codecarbon does not cover, are mapped to a country or
US state through data/cloud_regions.csv. Every answer carries the source it came from.
"""

from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
CLOUD_REGIONS_CSV = DATA_DIR / "cloud_regions.csv"

COUNTRY_FILE = "data/private_infra/global_energy_mix.json"
US_STATE_FILE = "data/private_infra/2023/usa_emissions.json"
GCP_FILE = "data/cloud/impact.csv"
WORLD_FILE = "data/private_infra/carbon_intensity_per_source.json"

# eGRID publishes lb/MWh; 1 lb = 453.59237 g and 1 MWh = 1000 kWh (same factor codecarbon uses).
G_PER_KWH_PER_LB_PER_MWH = 0.45359237
CLOUD_PROVIDERS = ("aws", "azure", "gcp")


@dataclass(frozen=True)
class Intensity:
    g_per_kwh: float
    source: str


class CarbonDataMissing(RuntimeError):
    """codecarbon (the data it ships) is not installed."""


@cache
def codecarbon_dir() -> Path:
    spec = importlib.util.find_spec("codecarbon")
    if spec is None or not spec.submodule_search_locations:
        raise CarbonDataMissing("codecarbon is not installed; `pip install codecarbon`")
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def codecarbon_version() -> str:
    return importlib.metadata.version("codecarbon")


def _load_json(rel: str) -> dict:
    with open(codecarbon_dir() / rel, encoding="utf-8") as f:
        return json.load(f)


@cache
def country_table() -> dict[str, tuple[float, int | None]]:
    """ISO alpha-3 -> (g CO2e/kWh, data year), Our World in Data via codecarbon."""
    return {
        iso: (float(row["carbon_intensity"]), row.get("year"))
        for iso, row in _load_json(COUNTRY_FILE).items()
        if row.get("carbon_intensity") is not None
    }


@cache
def us_state_table() -> dict[str, tuple[str, float]]:
    """USPS state code -> (state name, g CO2e/kWh), EPA eGRID via codecarbon (lb/MWh there)."""
    out = {}
    for name, row in _load_json(US_STATE_FILE).items():
        if name.startswith("_") or name == "usa":
            continue
        out[row["regionCode"].upper()] = (name, row["emissions"] * G_PER_KWH_PER_LB_PER_MWH)
    return out


@cache
def us_state_year() -> int | None:
    return _load_json(US_STATE_FILE).get("_source", {}).get("year")


@cache
def gcp_table() -> dict[str, float]:
    """GCP region -> g CO2e/kWh (Google's published grid intensity, via codecarbon)."""
    with open(codecarbon_dir() / GCP_FILE, encoding="utf-8-sig", newline="") as f:
        return {r["region"]: float(r["impact"]) for r in csv.DictReader(f)
                if r["provider"] == "gcp" and r["impact"]}


@cache
def world_average() -> float:
    return float(_load_json(WORLD_FILE)["world_average"])


@dataclass(frozen=True)
class CloudRegion:
    provider: str
    region: str
    location: str
    country_iso3: str
    us_state: str


@cache
def cloud_regions() -> dict[tuple[str, str], CloudRegion]:
    with open(CLOUD_REGIONS_CSV, encoding="utf-8", newline="") as f:
        lines = [line for line in f if not line.startswith("#")]
    rows = {}
    for r in csv.DictReader(lines):
        rows[(r["provider"], r["region"])] = CloudRegion(
            r["provider"], r["region"], r["location"], r["country_iso3"], r["us_state"]
        )
    return rows


def cloud_region(provider: str, region: str) -> CloudRegion | None:
    """The AWS/Azure region's location; with no provider, a region name only one provider uses."""
    if provider:
        return cloud_regions().get((provider, region))
    matches = [row for (_p, name), row in cloud_regions().items() if name == region]
    return matches[0] if len(matches) == 1 else None


def us_state_code(region: str) -> str | None:
    """'VA', 'va' or 'Virginia' -> 'VA' when it names a US state in the eGRID table."""
    key = region.strip()
    table = us_state_table()
    if key.upper() in table:
        return key.upper()
    for code, (name, _g) in table.items():
        if name == key.lower():
            return code
    return None


def _cc() -> str:
    return f"codecarbon {codecarbon_version()}"


def for_country(iso3: str, via: str = "") -> Intensity | None:
    row = country_table().get(iso3.upper())
    if row is None:
        return None
    g, year = row
    return Intensity(g, f"{_cc()} country table: {iso3.upper()} ({year}){via}")


def for_us_state(code: str, via: str = "") -> Intensity:
    name, g = us_state_table()[code]
    return Intensity(g, f"{_cc()} US state table: {code} (eGRID {us_state_year()}){via}")


def resolve(*, provider: str = "", region: str = "", country: str = "") -> Intensity:
    """The most specific intensity known for a location.

    Order: GCP region (Google's own figure) -> AWS/Azure region mapped to US state or country ->
    US state given directly as region -> country -> world average, labelled as such.
    """
    provider, region, country = provider.strip().lower(), region.strip(), country.strip().upper()
    if region and provider in ("gcp", "") and region in gcp_table():
        return Intensity(gcp_table()[region], f"{_cc()} GCP region table: {region}")
    if region and provider in ("aws", "azure", ""):
        row = cloud_region(provider, region)
        if row is not None:
            via = f" via {row.provider} {row.region} (GreenOps cloud_regions.csv)"
            if row.us_state and row.us_state in us_state_table():
                return for_us_state(row.us_state, via)
            found = for_country(row.country_iso3, via)
            if found is not None:
                return found
    if region and country in ("USA", ""):
        code = us_state_code(region)
        if code is not None and (country == "USA" or provider not in CLOUD_PROVIDERS):
            return for_us_state(code)
    if country:
        found = for_country(country)
        if found is not None:
            return found
    where = "/".join(p for p in (provider, region, country) if p) or "no location configured"
    return Intensity(world_average(), f"{_cc()} world average (location unknown: {where})")
