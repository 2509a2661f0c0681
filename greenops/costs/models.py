"""The price catalog, per-host cost settings and the log of price refreshes.

A price is one row per (provider, region, instance type, option, term, payment) and carries its
own source and as-of time, because rows of one catalog come from different places: on-demand from
the Price List API this morning, spot from last night's spot history, a 3-year rate from the
bundled snapshot.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import models
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


# A team's own prices live beside their lookup (greenops/costs/overrides.py); imported here so
# Django registers the model with the costs app.
from greenops.costs.overrides import PriceOverride  # noqa: E402, F401
