"""Sites (facility PUE and grid intensity), host CPU/RAM energy, and codecarbon runs.

Host belongs to the telemetry app, so the link from a host to its site lives here (HostSite)
rather than as a column on Host.
"""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from greenops.teams.models import Team
from greenops.telemetry.models import Host

# A facility cannot use less energy than its IT load (PUE 1.0); above 3 is a data-entry error.
PUE_VALIDATORS = [MinValueValidator(1.0), MaxValueValidator(3.0)]
# The dirtiest grids are around 1,100 g/kWh (coal-only); 2,000 leaves room without allowing typos.
INTENSITY_VALIDATORS = [MinValueValidator(0.0), MaxValueValidator(2000.0)]


class Site(models.Model):
    """Where hosts run: a facility (or cloud region) with its PUE and, optionally, a measured grid
    intensity that overrides codecarbon's country/region figure."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="sites")
    name = models.CharField(max_length=100)
    pue = models.FloatField(null=True, blank=True, validators=PUE_VALIDATORS,
                            help_text="Facility energy / IT energy; empty = GREENOPS_DEFAULT_PUE")
    grid_intensity_override_g_per_kwh = models.FloatField(
        null=True, blank=True, validators=INTENSITY_VALIDATORS,
        help_text="g CO2e/kWh, e.g. from the utility's contract; empty = codecarbon data",
    )
    override_source = models.CharField(max_length=200, blank=True,
                                       help_text="Where the override figure comes from")
    country = models.CharField(max_length=3, blank=True, help_text="ISO 3166 alpha-3, e.g. DEU")
    region = models.CharField(max_length=64, blank=True,
                              help_text="US state (VA), or cloud region (us-east-1, eastus)")
    provider = models.CharField(max_length=20, blank=True, help_text="aws, gcp, azure or empty")
    # Market-based Scope 2 (GHG Protocol): the supplier-specific factor of the electricity the
    # site buys (contract, green tariff, residual mix); reports show it beside location-based.
    supplier_intensity_g_per_kwh = models.FloatField(
        null=True, blank=True, validators=INTENSITY_VALIDATORS,
        help_text="Supplier-specific factor, g CO2e/kWh (market-based); empty = not recorded")
    supplier_intensity_source = models.CharField(max_length=200, blank=True,
                                                 help_text="Contract or disclosure it comes from")
    supplier_intensity_year = models.PositiveSmallIntegerField(null=True, blank=True)
    # SCI's M: the hardware's manufacturing emissions amortised over its life, per GPU-hour.
    embodied_co2e_g_per_gpu_hour = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0)],
        help_text="Embodied emissions amortised per GPU-hour, g CO2e; empty = not recorded")
    embodied_source = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="site_name_per_team")]

    def __str__(self) -> str:
        return self.name


class HostSite(models.Model):
    """A host's site and its own PUE override (e.g. one rack with better cooling)."""

    host = models.OneToOneField(Host, models.CASCADE, primary_key=True, related_name="carbon_site")
    site = models.ForeignKey(Site, models.SET_NULL, null=True, blank=True, related_name="hosts")
    pue_override = models.FloatField(null=True, blank=True, validators=PUE_VALIDATORS)


class HostEnergySample(models.Model):
    """One CPU/RAM reading from the agent (codecarbon). Natural key (host, ts): replays no-op."""

    pk = models.CompositePrimaryKey("host_id", "ts")
    host = models.ForeignKey(Host, models.CASCADE, db_index=False, related_name="+")
    ts = models.DateTimeField()
    cpu_power_w = models.FloatField(null=True)
    cpu_energy_j = models.FloatField(null=True)  # over the interval ending at ts
    ram_power_w = models.FloatField(null=True)
    ram_energy_j = models.FloatField(null=True)
    cpu_method = models.CharField(max_length=16)
    ram_method = models.CharField(max_length=16)
    codecarbon_version = models.CharField(max_length=32, blank=True)
    tracking_mode = models.CharField(max_length=16, blank=True)
    simulated = models.BooleanField(default=False)


# HostEnergyHour, the hourly rollup of these samples, is telemetry's (greenops.telemetry.models):
# greenops.energy reads it, and carbon sits above energy.


class Source(models.TextChoices):
    CLIENT = "client", "codecarbon client"
    CSV = "csv", "emissions.csv upload"


class Experiment(models.Model):
    """A codecarbon experiment. Its id comes from the user's codecarbon config, and every user who
    sets none shares codecarbon's default id, so it is unique per team, not globally."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="codecarbon_experiments")
    external_id = models.UUIDField(help_text="experiment_id as codecarbon knows it")
    name = models.CharField(max_length=255)
    description = models.TextField(blank=True)
    project_id = models.CharField(max_length=64, blank=True)
    on_cloud = models.BooleanField(default=False)
    country_name = models.CharField(max_length=100, blank=True)
    country_iso_code = models.CharField(max_length=3, blank=True)
    region = models.CharField(max_length=100, blank=True)
    cloud_provider = models.CharField(max_length=50, blank=True)
    cloud_region = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "external_id"],
                                               name="experiment_id_per_team")]

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    """One codecarbon tracker run; its energy is the sum of its emissions rows."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    team = models.ForeignKey(Team, models.CASCADE, related_name="codecarbon_runs")
    # The client's runs get their id from us (codecarbon_run_id == id); an uploaded CSV brings
    # the run_id codecarbon generated, which is only unique within the team that uploads it.
    codecarbon_run_id = models.UUIDField()
    experiment = models.ForeignKey(Experiment, models.CASCADE, related_name="runs")
    source = models.CharField(max_length=10, choices=Source.choices)
    started_at = models.DateTimeField()
    project_name = models.CharField(max_length=255, blank=True)
    os = models.CharField(max_length=255, blank=True)
    python_version = models.CharField(max_length=32, blank=True)
    codecarbon_version = models.CharField(max_length=32, blank=True)
    cpu_count = models.IntegerField(null=True)
    cpu_model = models.CharField(max_length=255, blank=True)
    gpu_count = models.IntegerField(null=True)
    gpu_model = models.CharField(max_length=255, blank=True)
    longitude = models.FloatField(null=True)
    latitude = models.FloatField(null=True)
    country_name = models.CharField(max_length=100, blank=True)
    country_iso_code = models.CharField(max_length=3, blank=True)
    region = models.CharField(max_length=100, blank=True)
    provider = models.CharField(max_length=50, blank=True)
    cloud_region = models.CharField(max_length=100, blank=True)
    ram_total_size_gb = models.FloatField(null=True)
    tracking_mode = models.CharField(max_length=16, blank=True)
    pue = models.FloatField(null=True)  # as codecarbon applied it (CSV only)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["team", "-started_at"], name="run_team_started_idx")]
        constraints = [models.UniqueConstraint(fields=["team", "codecarbon_run_id"],
                                               name="codecarbon_run_per_team")]


class Emission(models.Model):
    """Energy and emissions of a run since its previous row (codecarbon sends deltas).

    Figures are codecarbon's own: its energy (kWh) and its emissions (kg CO2e, computed by
    codecarbon on the user's machine with its intensity and PUE), stored as received.
    """

    run = models.ForeignKey(Run, models.CASCADE, related_name="emissions")
    timestamp = models.DateTimeField()
    duration_s = models.FloatField()
    emissions_kg = models.FloatField()
    emissions_rate_kg_per_s = models.FloatField()
    cpu_power_w = models.FloatField()
    gpu_power_w = models.FloatField()
    ram_power_w = models.FloatField()
    cpu_energy_kwh = models.FloatField()
    gpu_energy_kwh = models.FloatField()
    ram_energy_kwh = models.FloatField()
    energy_consumed_kwh = models.FloatField()
    cpu_utilization_pct = models.FloatField(null=True)
    gpu_utilization_pct = models.FloatField(null=True)
    ram_utilization_pct = models.FloatField(null=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["timestamp"]
        constraints = [
            models.UniqueConstraint(fields=["run", "timestamp"], name="emission_per_run_ts")
        ]


class FactorsPeriod(models.Model):
    """The PUE and grid intensity a host had from `valid_from` until `valid_to` (null: still
    in force). Recorded when a site or a host's site assignment changes (greenops.carbon.
    accounting.record_factors), so an hour's carbon uses the factors of its own time."""

    host = models.ForeignKey(Host, models.CASCADE, related_name="+")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    pue = models.FloatField()
    pue_source = models.CharField(max_length=300)
    intensity_g_per_kwh = models.FloatField()
    intensity_source = models.CharField(max_length=300)

    class Meta:
        ordering = ["host", "valid_from"]
        indexes = [models.Index(fields=["host", "valid_from"], name="factors_period_host")]


def _hosts_of(instance) -> list[Host]:
    if isinstance(instance, HostSite):
        return [instance.host]
    if isinstance(instance, Host):
        return [instance]
    if instance.pk is None:
        return []
    return list(Host.objects.filter(carbon_site__site_id=instance.pk))


def _after_site_change(sender, instance, raw=False, **kwargs) -> None:
    """A site edit starts new factors from now for hosts whose factors were already used
    (recorded); past hours keep theirs. Hosts never accounted get theirs at first use."""
    from greenops.carbon.accounting import record_factors  # accounting imports these models

    if raw:
        return
    for host in _hosts_of(instance):
        if FactorsPeriod.objects.filter(host=host).exists():
            record_factors(host)


def _after_host_change(sender, instance: Host, raw: bool = False, created: bool = False,
                       update_fields=None, **kwargs) -> None:
    """A host's own location (provider, region, country) chooses its grid intensity when its
    site names none: an edit of it starts new factors from now, like a site edit."""
    if created or (update_fields is not None
                   and not set(update_fields) & {"provider", "region", "country"}):
        return
    _after_site_change(sender, instance, raw=raw)


models.signals.post_save.connect(_after_host_change, sender=Host,
                                 dispatch_uid="carbon.factors_after.Host")
for _model in (Site, HostSite):
    models.signals.post_save.connect(_after_site_change, sender=_model,
                                     dispatch_uid=f"carbon.factors_after.{_model.__name__}")
models.signals.post_delete.connect(_after_site_change, sender=HostSite,
                                   dispatch_uid="carbon.factors_after_delete")
