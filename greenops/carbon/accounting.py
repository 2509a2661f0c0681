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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from greenops.carbon import intensity
from greenops.carbon.models import FactorsPeriod, HostSite, Site
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


def effect_of_it_kwh(it_kwh: float, pue: float, intensity_g_per_kwh: float | None
                     ) -> tuple[float, float | None]:
    """(facility kWh, kg CO2e or None) of a change of `it_kwh` in IT energy, through
    carbon_for_energy: recommendations estimate an energy change and state its carbon with the
    same formula (PUE applied once, here) as every measured figure. CO2e is None where no grid
    intensity is known."""
    c = carbon_for_energy(it_kwh * J_PER_KWH, SiteFactors(pue, "", intensity_g_per_kwh or 0.0,
                                                          ""))
    return c.facility_energy_kwh, None if intensity_g_per_kwh is None else c.co2e_g / 1000


# The factors in force for a host in a given hour.
FactorsFor = Callable[[Host, dt.datetime], SiteFactors]


# Hours before a host's first recorded factors use those first factors.
SINCE_EVER = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def _as_factors(p: FactorsPeriod) -> SiteFactors:
    return SiteFactors(p.pue, p.pue_source, p.intensity_g_per_kwh, p.intensity_source)


def ensure_factors(host: Host) -> list[FactorsPeriod]:
    """The host's recorded factor periods, oldest first; the first lookup records today's
    factors as in force since ever (nothing older is known)."""
    periods = list(FactorsPeriod.objects.filter(host=host).order_by("valid_from"))
    if not periods:
        f = site_factors(host)
        periods = [FactorsPeriod.objects.create(
            host=host, valid_from=SINCE_EVER, pue=f.pue, pue_source=f.pue_source[:300],
            intensity_g_per_kwh=f.intensity_g_per_kwh,
            intensity_source=f.intensity_source[:300])]
    return periods


def record_factors(host: Host, at: dt.datetime | None = None) -> None:
    """After a site edit: if the host's factors changed, the open period ends at `at` and the
    new factors are in force from then. Past hours keep the factors they had."""
    at = at or timezone.now()
    periods = ensure_factors(host)
    current = periods[-1]
    f = site_factors(host)
    if (f.pue, f.intensity_g_per_kwh, f.pue_source[:300], f.intensity_source[:300]) == (
            current.pue, current.intensity_g_per_kwh, current.pue_source,
            current.intensity_source):
        return
    with transaction.atomic():
        FactorsPeriod.objects.filter(pk=current.pk).update(valid_to=at)
        FactorsPeriod.objects.create(
            host=host, valid_from=at, pue=f.pue, pue_source=f.pue_source[:300],
            intensity_g_per_kwh=f.intensity_g_per_kwh, intensity_source=f.intensity_source[:300])


def restate_factors(host: Host, since: dt.datetime) -> None:
    """Today's factors in force from `since`: periods that began after it are dropped and the
    one around it ends there. Only the audited restate_factors command calls this."""
    f = site_factors(host)
    with transaction.atomic():
        FactorsPeriod.objects.filter(host=host, valid_from__gte=since).delete()
        FactorsPeriod.objects.filter(host=host, valid_from__lt=since).filter(
            models.Q(valid_to__isnull=True) | models.Q(valid_to__gt=since)).update(valid_to=since)
        FactorsPeriod.objects.create(
            host=host, valid_from=since, pue=f.pue, pue_source=f.pue_source[:300],
            intensity_g_per_kwh=f.intensity_g_per_kwh, intensity_source=f.intensity_source[:300])


def factors_at(periods: list[FactorsPeriod], hour: dt.datetime) -> SiteFactors:
    """The factors in force at the start of `hour`."""
    for p in reversed(periods):
        if p.valid_from <= hour:
            return _as_factors(p)
    return _as_factors(periods[0])


def cached_site_factors() -> FactorsFor:
    """Site factors in force in each hour, each host's periods read once."""
    seen: dict[int, list[FactorsPeriod]] = {}

    def lookup(host: Host, hour: dt.datetime) -> SiteFactors:
        if host.id not in seen:
            seen[host.id] = ensure_factors(host)
        return factors_at(seen[host.id], hour)

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
    return carbon_over((e.it_energy_j, factors(energy.hosts[host_id], bucket))
                       for (host_id, bucket), e in sorted(energy.hours.items(),
                                                          key=lambda kv: kv[0])
                       if e.it_energy_j)


def carbon_over(parts: Iterable[tuple[float, SiteFactors]]) -> CarbonTotals:
    """Each part's IT energy (a host-hour, or a span of a host's hours under one set of
    factors: costs.month_cost) under its own PUE and grid intensity, summed, with each factor's
    source named once."""
    out = CarbonTotals()
    pue_sources: list[str] = []
    intensity_sources: list[str] = []
    for it_energy_j, f in parts:
        carbon = carbon_for_energy(it_energy_j, f)
        out.it_energy_j += it_energy_j
        out.facility_energy_j += carbon.facility_energy_kwh * J_PER_KWH
        out.co2e_g += carbon.co2e_g
        pue_sources.append(f"{f.pue:g} ({f.pue_source})")
        intensity_sources.append(f"{f.intensity_g_per_kwh:g} g/kWh ({f.intensity_source})")
    out.pue_source = "; ".join(dict.fromkeys(pue_sources))
    out.intensity_source = "; ".join(dict.fromkeys(intensity_sources))
    return out
