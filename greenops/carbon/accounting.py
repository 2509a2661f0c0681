"""The carbon arithmetic everyone checks: facility energy = IT energy x PUE, carbon = facility
energy x grid intensity. PUE and intensity are applied here and nowhere else, exactly once.

Precedence (most specific wins, and the answer says which one it used):
  PUE:       host override (HostSite.pue_override) -> its site's PUE
             -> settings.GREENOPS_DEFAULT_PUE
  Intensity: site override (g CO2e/kWh) -> the site's location -> the host's provider/region/country
             -> codecarbon's world average (labelled "location unknown")
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from greenops.carbon import intensity
from greenops.carbon.models import HostSite, Site
from greenops.telemetry.models import Host
from greenops.units import j_to_kwh


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
