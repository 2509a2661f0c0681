"""The carbon arithmetic everyone checks: facility energy = IT energy x PUE, carbon = facility
energy x grid intensity. PUE and intensity are applied here and nowhere else, exactly once.

Precedence (most specific wins, and the answer says which one it used):
  PUE:       host override (HostSite.pue_override) -> its site's PUE
             -> settings.GREENOPS_DEFAULT_PUE
  Intensity: site override (g CO2e/kWh) -> the site's location -> the host's provider/region/country
             -> codecarbon's world average (labelled "location unknown")
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

from greenops.carbon import intensity
from greenops.carbon.models import HostSite, Site
from greenops.telemetry.models import Host
from greenops.units import J_PER_KWH, j_to_kwh

if TYPE_CHECKING:
    from greenops.energy import ItEnergy


@dataclass(frozen=True)
class SiteFactors:
    pue: float
    pue_source: str
    intensity_g_per_kwh: float
    intensity_source: str


@dataclass(frozen=True)
class Carbon:
    """One accounted figure, keeping the factors and sources it used."""

    it_energy_kwh: float
    facility_energy_kwh: float
    co2e_g: float
    pue: float
    pue_source: str
    intensity_g_per_kwh: float
    intensity_source: str

    @property
    def co2e_kg(self) -> float:
        return self.co2e_g / 1000.0


def _host_site(host: Host) -> HostSite | None:
    return HostSite.objects.filter(host=host).select_related("site").first()


def site_pue(host_site: HostSite | None) -> tuple[float, str]:
    if host_site is not None and host_site.pue_override is not None:
        return host_site.pue_override, "host override"
    site = host_site.site if host_site is not None else None
    if site is not None and site.pue is not None:
        return site.pue, f"site {site.name}"
    return settings.GREENOPS_DEFAULT_PUE, "GreenOps default (GREENOPS_DEFAULT_PUE)"


def location_intensity(site: Site | None, host: Host | None) -> intensity.Intensity:
    if site is not None and site.grid_intensity_override_g_per_kwh is not None:
        why = f": {site.override_source}" if site.override_source else ""
        return intensity.Intensity(site.grid_intensity_override_g_per_kwh,
                                   f"site override ({site.name}){why}")
    if site is not None and (site.country or site.region):
        return intensity.resolve(provider=site.provider, region=site.region, country=site.country)
    if host is not None:
        return intensity.resolve(provider=host.provider, region=host.region, country=host.country)
    return intensity.resolve()


def site_factors(host: Host) -> SiteFactors:
    """PUE and grid intensity for a host, each with the source it came from."""
    host_site = _host_site(host)
    pue, pue_source = site_pue(host_site)
    site = host_site.site if host_site is not None else None
    found = location_intensity(site, host)
    return SiteFactors(pue, pue_source, found.g_per_kwh, found.source)


def carbon_for_energy(it_energy_j: float, factors: SiteFactors) -> Carbon:
    """IT energy measured at the host -> facility energy and CO2e. Never call twice on a figure."""
    it_kwh = j_to_kwh(it_energy_j)
    facility_kwh = it_kwh * factors.pue
    return Carbon(
        it_energy_kwh=it_kwh,
        facility_energy_kwh=facility_kwh,
        co2e_g=facility_kwh * factors.intensity_g_per_kwh,
        pue=factors.pue,
        pue_source=factors.pue_source,
        intensity_g_per_kwh=factors.intensity_g_per_kwh,
        intensity_source=factors.intensity_source,
    )


# The factors in force for a host in a given hour.
FactorsFor = Callable[[Host, dt.datetime], SiteFactors]


def cached_site_factors() -> FactorsFor:
    """Site factors looked up once per host: accounting many hours would otherwise repeat the
    same queries for every hour."""
    seen: dict[int, SiteFactors] = {}

    def lookup(host: Host, hour: dt.datetime) -> SiteFactors:
        if host.id not in seen:
            seen[host.id] = site_factors(host)
        return seen[host.id]

    return lookup


@dataclass
class CarbonTotals:
    """Facility energy and CO2e of a measured IT energy, with the factors' sources."""

    it_energy_j: float = 0.0
    facility_energy_j: float = 0.0
    co2e_g: float = 0.0
    pue_source: str = ""
    intensity_source: str = ""

    @property
    def facility_energy_kwh(self) -> float:
        return self.facility_energy_j / J_PER_KWH

    @property
    def co2e_kg(self) -> float:
        return self.co2e_g / 1000.0

    @property
    def pue(self) -> float | None:
        """Energy-weighted PUE of the hosts and hours."""
        return self.facility_energy_j / self.it_energy_j if self.it_energy_j else None


def carbon_of(energy: ItEnergy, factors: FactorsFor | None = None) -> CarbonTotals:
    """PUE and grid intensity applied once per host and hour, on that host-hour's IT energy,
    then summed: work spread over sites (or over a change of factors) gets each one's own."""
    factors = factors or cached_site_factors()
    out = CarbonTotals()
    pue_sources: list[str] = []
    intensity_sources: list[str] = []
    for (host_id, bucket), e in sorted(energy.hours.items(), key=lambda kv: kv[0]):
        if not e.it_energy_j:
            continue
        f = factors(energy.hosts[host_id], bucket)
        carbon = carbon_for_energy(e.it_energy_j, f)
        out.it_energy_j += e.it_energy_j
        out.facility_energy_j += carbon.facility_energy_kwh * J_PER_KWH
        out.co2e_g += carbon.co2e_g
        pue_sources.append(f"{f.pue:g} ({f.pue_source})")
        intensity_sources.append(f"{f.intensity_g_per_kwh:g} g/kWh ({f.intensity_source})")
    out.pue_source = "; ".join(dict.fromkeys(pue_sources))
    out.intensity_source = "; ".join(dict.fromkeys(intensity_sources))
    return out
