"""The price catalog, per-host cost settings and the log of price refreshes.

A price is one row per (provider, region, instance type, option, term, payment) and carries its
own source and as-of time, because rows of one catalog come from different places: on-demand from
the Price List API this morning, spot from last night's spot history, a 3-year rate from the
bundled snapshot.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from decimal import Decimal

from django.db import IntegrityError, models, transaction
from django.utils import timezone

from greenops.telemetry.models import Host

HOURS_PER_MONTH = 730  # AWS bills and quotes monthly figures with 730 hours


class PriceOption(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    SPOT = "spot", "Spot"
    RESERVED = "reserved", "Reserved instance"
    SAVINGS_PLAN = "savings_plan", "Savings plan"


class Payment(models.TextChoices):
    NONE = "", "n/a"
    NO_UPFRONT = "no_upfront", "No upfront"
    PARTIAL_UPFRONT = "partial_upfront", "Partial upfront"
    ALL_UPFRONT = "all_upfront", "All upfront"
    UNSPECIFIED = "unspecified", "Effective rate, payment not stated"


class PriceMethod(models.TextChoices):
    SNAPSHOT = "snapshot", "Bundled snapshot"
    PRICE_LIST_API = "aws_price_list_api", "AWS Price List API"
    SPOT_HISTORY = "aws_spot_price_history", "EC2 spot price history"
    SAVINGS_PLANS_API = "aws_savings_plans_api", "AWS Savings Plans offering rates"


# Spot Instance Advisor bands: the share of instances interrupted in a month. The upper bound is
# used for planning; ">20%" has no upper bound, so a pessimistic 30% stands in for it.
INTERRUPTION_BANDS: dict[str, float] = {
    "<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, ">20%": 0.30,
}


class InstanceType(models.Model):
    provider = models.CharField(max_length=20)
    name = models.CharField(max_length=64)
    gpu_model = models.CharField(max_length=64)
    gpu_count = models.PositiveSmallIntegerField()
    gpu_memory_gib = models.FloatField(help_text="Per GPU")
    source = models.CharField(max_length=200)

    class Meta:
        ordering = ["provider", "name"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "name"], name="instance_type_per_provider")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.gpu_count}x {self.gpu_model})"


class Price(models.Model):
    provider = models.CharField(max_length=20)
    region = models.CharField(max_length=32)
    instance_type = models.CharField(max_length=64)
    option = models.CharField(max_length=20, choices=PriceOption.choices)
    term_years = models.PositiveSmallIntegerField(null=True, blank=True)
    payment = models.CharField(max_length=20, choices=Payment.choices, blank=True, default="")
    # Effective $/h: an upfront fee is spread over the term's hours. For spot, the median over
    # the refresh lookback in the cheapest availability zone.
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    latest_usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6, null=True)
    interruption_band = models.CharField(max_length=8, blank=True)
    method = models.CharField(max_length=30, choices=PriceMethod.choices)
    source = models.CharField(max_length=300)
    as_of = models.DateTimeField(help_text="When the provider published or we observed the price")
    detail = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "region", "instance_type", "option", "term_years", "payment"]
        # Two conditional constraints rather than one with nulls_distinct=False: SQLite (the
        # embedded default) ignores nulls_distinct and would drop the constraint (models.W047);
        # partial unique indexes hold on both SQLite and PostgreSQL.
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "region", "instance_type", "option", "payment"],
                condition=models.Q(term_years__isnull=True),
                name="one_price_per_offer_without_term",
            ),
            models.UniqueConstraint(
                fields=["provider", "region", "instance_type", "option", "term_years", "payment"],
                condition=models.Q(term_years__isnull=False),
                name="one_price_per_offer_with_term",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.region} {self.label}: ${self.usd_per_hour}/h"

    @property
    def label(self) -> str:
        parts = [self.get_option_display()]
        if self.term_years:
            parts.append(f"{self.term_years}y")
        if self.payment:
            parts.append(self.get_payment_display().lower())
        return " ".join(parts)

    def age(self, now: dt.datetime | None = None) -> dt.timedelta:
        return (now or timezone.now()) - self.as_of


class HostCostConfig(models.Model):
    """What the telemetry Host row does not say about money: the commitment term behind a
    reserved/savings-plan host, and the hardware and electricity cost of an on-premises one.
    Its PUE is the host's site factor (greenops.carbon.accounting), like everywhere else."""

    host = models.OneToOneField(Host, models.CASCADE, related_name="cost_config")
    term_years = models.PositiveSmallIntegerField(default=1)
    payment = models.CharField(max_length=20, choices=Payment.choices, default=Payment.NO_UPFRONT)
    hardware_usd = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    amortisation_months = models.PositiveIntegerField(default=36)
    electricity_usd_per_kwh = models.DecimalField(
        max_digits=8, decimal_places=5, null=True, blank=True
    )
    source = models.CharField(max_length=200, blank=True, help_text="Invoice, contract, estimate")

    def hardware_usd_per_hour(self) -> Decimal | None:
        if self.hardware_usd is None or not self.amortisation_months:
            return None
        return self.hardware_usd / (self.amortisation_months * HOURS_PER_MONTH)


class PriceRefresh(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        PARTIAL = "partial", "Partial: some parts failed"
        FAILED = "failed"
        SKIPPED = "skipped"

    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    prices_updated = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    # One entry per part (list prices, savings plans, spot per region), each written on its
    # own: {"part", "status": done|failed, "prices", "error"}.
    parts = models.JSONField(default=list, blank=True)

    @property
    def failed_parts(self) -> list[dict]:
        return [p for p in self.parts if p.get("status") == "failed"]

    class Meta:
        ordering = ["-started_at"]


class PricePeriod(models.Model):
    """When an offer's price was in force: [valid_from, valid_to), valid_to null while it still
    is. Written whenever a Price row is created or its rate changes (see signals below), so an
    hour is costed at the price of its own time and a refresh never rewrites past months."""

    provider = models.CharField(max_length=20)
    region = models.CharField(max_length=32)
    instance_type = models.CharField(max_length=64)
    option = models.CharField(max_length=20, choices=PriceOption.choices)
    term_years = models.PositiveSmallIntegerField(null=True, blank=True)
    payment = models.CharField(max_length=20, choices=Payment.choices, blank=True, default="")
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=300)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["provider", "region", "instance_type", "option", "term_years", "payment",
                    "valid_from"]
        indexes = [models.Index(fields=["instance_type", "region", "option"],
                                name="price_period_offer")]

    @classmethod
    def offer_of(cls, price: Price) -> dict:
        return {"provider": price.provider, "region": price.region,
                "instance_type": price.instance_type, "option": price.option,
                "term_years": price.term_years, "payment": price.payment}

    @classmethod
    def record(cls, price: Price) -> None:
        """Open a period for the price's current rate if it differs from the open one. The
        new rate is in force from its as-of time (never before the open period's start)."""
        offer = cls.offer_of(price)
        current = cls.objects.filter(**offer, valid_to__isnull=True).order_by(
            "-valid_from").first()
        if current is not None and current.usd_per_hour == price.usd_per_hour:
            return
        start = price.as_of
        if current is not None:
            start = max(start, current.valid_from)
            current.valid_to = start
            current.save(update_fields=["valid_to"])
        cls.objects.create(**offer, usd_per_hour=price.usd_per_hour, valid_from=start,
                           source=price.source[:300])


def _record_price_period(sender, instance: Price, **kwargs) -> None:
    if not kwargs.get("raw"):
        PricePeriod.record(instance)


models.signals.post_save.connect(_record_price_period, sender=Price,
                                 dispatch_uid="costs.price_period")


# Hours before a host's first recorded terms use those first terms (nothing older is known).
SINCE_EVER = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
# The Host columns that choose its price: which offer of the catalog, or whether it is owned.
HOST_TERM_FIELDS = ("provider", "region", "instance_type", "purchase_option")


@dataclass(frozen=True)
class HostTerms:
    """Everything that prices a host's hour apart from the catalog itself: the Host columns
    that pick the offer and its HostCostConfig (a host without one gets the defaults
    catalog_price uses: 1 year, no upfront, no hardware or electricity cost)."""

    provider: str
    region: str
    instance_type: str
    purchase_option: str
    term_years: int
    payment: str
    hardware_usd: Decimal | None
    amortisation_months: int
    electricity_usd_per_kwh: Decimal | None
    source: str

    @classmethod
    def of(cls, columns: dict, config: HostCostConfig | None) -> HostTerms:
        c = config or HostCostConfig()
        return cls(**columns, term_years=c.term_years, payment=c.payment,
                   hardware_usd=c.hardware_usd, amortisation_months=c.amortisation_months,
                   electricity_usd_per_kwh=c.electricity_usd_per_kwh,
                   source=(c.source if config else "")[:200])

    @classmethod
    def current(cls, host: Host) -> HostTerms | None:
        """The host's terms as stored now (read from the database, not a possibly stale
        instance); None when the host row is gone."""
        row = Host.objects.filter(pk=host.pk).values(*HOST_TERM_FIELDS).first()
        if row is None:
            return None
        return cls.of(row, HostCostConfig.objects.filter(host_id=host.pk).first())

    def host_and_config(self, host: Host) -> tuple[Host, HostCostConfig]:
        """A copy of `host` carrying these terms and an unsaved cost config holding them, for
        the catalog lookup (the host's other columns and its id stay as they are)."""
        copy = Host(**{f.attname: getattr(host, f.attname) for f in Host._meta.concrete_fields})
        copy._state.adding, copy._state.db = False, host._state.db
        for name in HOST_TERM_FIELDS:
            setattr(copy, name, getattr(self, name))
        config = HostCostConfig(host_id=host.pk, term_years=self.term_years, payment=self.payment,
                                hardware_usd=self.hardware_usd,
                                amortisation_months=self.amortisation_months,
                                electricity_usd_per_kwh=self.electricity_usd_per_kwh,
                                source=self.source)
        return copy, config


class HostTermsPeriod(models.Model):
    """A host's cost terms (HostTerms) in force from `valid_from` until `valid_to` (null: still
    in force). Recorded when a host is first priced and whenever the host's provider, region,
    instance type or purchase option, or its cost settings, are saved with a change: the new
    terms apply from the moment of the edit and past hours keep theirs. Only the audited
    `manage.py restate_terms` rewrites a past period."""

    host = models.ForeignKey(Host, models.CASCADE, related_name="+")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    provider = models.CharField(max_length=20, blank=True)
    region = models.CharField(max_length=64, blank=True)
    instance_type = models.CharField(max_length=64, blank=True)
    purchase_option = models.CharField(max_length=20)
    term_years = models.PositiveSmallIntegerField()
    payment = models.CharField(max_length=20, choices=Payment.choices, blank=True)
    hardware_usd = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    amortisation_months = models.PositiveIntegerField()
    electricity_usd_per_kwh = models.DecimalField(max_digits=8, decimal_places=5, null=True,
                                                  blank=True)
    source = models.CharField(max_length=200, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host", "valid_from"]
        constraints = [models.UniqueConstraint(fields=["host", "valid_from"],
                                               name="one_terms_period_start_per_host")]

    @property
    def terms(self) -> HostTerms:
        return HostTerms(**{f: getattr(self, f) for f in HostTerms.__dataclass_fields__})

    @property
    def hardware_usd_per_hour(self) -> Decimal | None:
        if self.hardware_usd is None or not self.amortisation_months:
            return None
        return self.hardware_usd / (self.amortisation_months * HOURS_PER_MONTH)

    @classmethod
    def ensure(cls, host: Host) -> list[HostTermsPeriod]:
        """The host's periods, oldest first; its first pricing records today's terms as in
        force since ever (nothing older is known)."""
        periods = list(cls.objects.filter(host_id=host.pk).order_by("valid_from"))
        if periods:
            return periods
        terms = HostTerms.current(host)
        if terms is None:  # deleted meanwhile: price it as the instance says, record nothing
            terms = HostTerms.of({f: getattr(host, f) for f in HOST_TERM_FIELDS}, None)
            return [cls(host_id=host.pk, valid_from=SINCE_EVER, **asdict(terms))]
        try:
            with transaction.atomic():
                cls.objects.create(host_id=host.pk, valid_from=SINCE_EVER, **asdict(terms))
        except IntegrityError:  # a concurrent first use recorded them
            pass
        return list(cls.objects.filter(host_id=host.pk).order_by("valid_from"))

    @classmethod
    def record(cls, host: Host, at: dt.datetime | None = None) -> bool:
        """After an edit: if the host's terms changed, the open period ends at `at` (default
        now) and the new terms are in force from then. A host never priced records nothing
        (its first pricing records its terms). Returns whether a change was recorded."""
        at = at or timezone.now()
        with transaction.atomic():
            current = (cls.objects.select_for_update().filter(host_id=host.pk,
                                                              valid_to__isnull=True)
                       .order_by("-valid_from").first())
            if current is None:
                return False
            terms = HostTerms.current(host)
            if terms is None or terms == current.terms:
                return False
            if at <= current.valid_from:  # two edits at one instant: the later one stands
                cls.objects.filter(pk=current.pk).update(**asdict(terms))
                return True
            cls.objects.filter(pk=current.pk).update(valid_to=at)
            cls.objects.create(host_id=host.pk, valid_from=at, **asdict(terms))
        return True

    @classmethod
    def restate(cls, host: Host, since: dt.datetime) -> HostTerms | None:
        """Today's terms in force from `since`: periods that began at or after it are dropped
        and the one around it ends there. Only the audited restate_terms command calls this."""
        terms = HostTerms.current(host)
        if terms is None:
            return None
        with transaction.atomic():
            cls.objects.filter(host_id=host.pk, valid_from__gte=since).delete()
            cls.objects.filter(host_id=host.pk, valid_from__lt=since).filter(
                models.Q(valid_to__isnull=True) | models.Q(valid_to__gt=since)
            ).update(valid_to=since)
            cls.objects.create(host_id=host.pk, valid_from=since, **asdict(terms))
        return terms


def terms_at(periods: list[HostTermsPeriod], at: dt.datetime) -> HostTermsPeriod:
    """The period in force at `at`; before the first one, the first."""
    for p in reversed(periods):
        if p.valid_from <= at:
            return p
    return periods[0]


def _host_saved(sender, instance: Host, created: bool = False, raw: bool = False,
                update_fields=None, **kwargs) -> None:
    if raw or created:
        return
    if update_fields is not None and not set(update_fields) & set(HOST_TERM_FIELDS):
        return  # token rotation, removal, status: nothing that prices the host
    HostTermsPeriod.record(instance)


def _config_changed(sender, instance: HostCostConfig, raw: bool = False, origin=None,
                    **kwargs) -> None:
    if raw:
        return
    # A config deleted along with its host (origin: the host) leaves nothing to record.
    if origin is not None and not isinstance(origin, HostCostConfig | models.QuerySet):
        return
    if isinstance(origin, models.QuerySet) and origin.model is not HostCostConfig:
        return
    HostTermsPeriod.record(Host(pk=instance.host_id))


models.signals.post_save.connect(_host_saved, sender=Host, dispatch_uid="costs.host_terms")
models.signals.post_save.connect(_config_changed, sender=HostCostConfig,
                                 dispatch_uid="costs.config_terms")
models.signals.post_delete.connect(_config_changed, sender=HostCostConfig,
                                   dispatch_uid="costs.config_terms_deleted")


# A team's own prices live beside their lookup (greenops/costs/overrides.py); imported here so
# Django registers the model with the costs app.
from greenops.costs.overrides import PriceOverride  # noqa: E402, F401
