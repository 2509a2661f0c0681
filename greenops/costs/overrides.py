"""A team's own prices, set in the product: what a contract says beats the list price.

Three kinds, each a row valid from a moment on (ending one keeps it in the history):
- a custom $/h for an instance type under a purchase option (a private rate, a GPU cloud the
  catalog does not list);
- a negotiated discount in % off list prices (all instance types, or one);
- on-premises hardware amortised as $/h, plus electricity in $/kWh.

`apply()` is the one place they enter the price lookup (catalog.host_price calls it), so every
page, report and alert that prices a host sees them.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from greenops.costs.prices import HourlyPrice
from greenops.teams.models import Team
from greenops.telemetry.models import Host, PurchaseOption


class OverrideKind(models.TextChoices):
    HOURLY = "hourly", "Custom $/h for an instance type"
    DISCOUNT = "discount", "Negotiated discount on list prices"
    ON_PREM = "on_prem", "On-premises amortised $/h and electricity"


def plain(value: Decimal | float) -> str:
    """A figure as the user typed it: every digit, no trailing zeros ("40", "3.25",
    "10.49264"). A DecimalField read back from the database keeps its declared places, and
    format(Decimal("40.00"), "g") is "40.00"."""
    exact = value if isinstance(value, Decimal) else Decimal(str(value))
    return format(exact.normalize(), "f")


class PriceOverride(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="price_overrides")
    kind = models.CharField(max_length=10, choices=OverrideKind.choices)
    # Blank instance type: every instance type (discounts, on-premises hosts of the team).
    instance_type = models.CharField(max_length=64, blank=True)
    purchase_option = models.CharField(max_length=20, choices=PurchaseOption.choices,
                                       blank=True)
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=5, null=True, blank=True,
                                       validators=[MinValueValidator(Decimal("0"))])
    discount_pct = models.DecimalField(
        max_digits=5, decimal_places=2, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(Decimal("99.99"))])
    electricity_usd_per_kwh = models.DecimalField(
        max_digits=8, decimal_places=5, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0"))])
    source = models.CharField(max_length=200,
                              help_text="Where the figure comes from: contract, invoice, quote")
    valid_from = models.DateTimeField(default=timezone.now)
    valid_until = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True,
                                   blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "costs"
        ordering = ["-valid_from", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.describe()}"

    def describe(self) -> str:
        what = self.instance_type or "every instance type"
        option = self.get_purchase_option_display() if self.purchase_option else "any option"
        if self.kind == OverrideKind.DISCOUNT:
            return f"{plain(self.discount_pct)} % off list prices of {what} ({option})"
        if self.kind == OverrideKind.ON_PREM:
            power = (f" + ${plain(self.electricity_usd_per_kwh)}/kWh"
                     if self.electricity_usd_per_kwh is not None else "")
            return f"${plain(self.usd_per_hour)}/h{power} for on-premises {what}"
        return f"${plain(self.usd_per_hour)}/h for {what} ({option})"

    def matches(self, host: Host) -> bool:
        if self.instance_type and self.instance_type != host.instance_type:
            return False
        return not self.purchase_option or self.purchase_option == host.purchase_option

    def end(self, at: dt.datetime | None = None) -> bool:
        """End the override's validity (once); it stays in the history."""
        at = at or timezone.now()
        done = PriceOverride.objects.filter(id=self.id, valid_until__isnull=True).update(
            valid_until=at)
        if done:
            self.valid_until = at
        return bool(done)


def team_overrides(team_id: int) -> list[PriceOverride]:
    """All of a team's overrides, ended ones too: callers pick those in force per hour."""
    return list(PriceOverride.objects.filter(team_id=team_id))


def in_force(rows: list[PriceOverride], at: dt.datetime) -> list[PriceOverride]:
    return [r for r in rows if r.valid_from <= at and (r.valid_until is None
                                                       or at < r.valid_until)]


def _most_specific(rows: list[PriceOverride], host: Host) -> PriceOverride | None:
    """An override naming the instance type beats one for every type; then the newest."""
    found = [r for r in rows if r.matches(host)]
    found.sort(key=lambda r: (bool(r.instance_type), bool(r.purchase_option), r.valid_from),
               reverse=True)
    return found[0] if found else None


def apply(host: Host, at: dt.datetime | None, found,
          rows: list[PriceOverride] | None = None):
    """The host's price at `at` after the team's overrides in force then: a custom or
    on-premises rate replaces the catalog's answer (or fills its blank); a discount reduces a
    list price. `found` is the catalog's HourlyPrice or PriceProblem; `rows` the team's
    overrides when the caller prices many hours (team_overrides, fetched once)."""
    rows = in_force(team_overrides(host.team_id) if rows is None else rows,
                    at or timezone.now())
    if not rows:
        return found
    on_prem = host.purchase_option == PurchaseOption.ON_PREM or host.provider == "on_prem"
    kind = OverrideKind.ON_PREM if on_prem else OverrideKind.HOURLY
    rate = _most_specific([r for r in rows if r.kind == kind], host)
    if rate is not None:
        return HourlyPrice(
            usd_per_hour=float(rate.usd_per_hour), option=host.purchase_option,
            source=f"team price override: {rate.describe()} ({rate.source})",
            as_of=rate.valid_from, stale=False,
            electricity_usd_per_kwh=(float(rate.electricity_usd_per_kwh)
                                     if rate.electricity_usd_per_kwh is not None else None))
    discount = _most_specific([r for r in rows if r.kind == OverrideKind.DISCOUNT], host)
    if discount is None or not isinstance(found, HourlyPrice) or on_prem:
        return found
    factor = 1 - float(discount.discount_pct) / 100
    return HourlyPrice(
        usd_per_hour=found.usd_per_hour * factor, option=found.option,
        source=f"{found.source}, less {plain(discount.discount_pct)} % negotiated discount "
               f"({discount.source})",
        as_of=found.as_of, stale=found.stale,
        electricity_usd_per_kwh=found.electricity_usd_per_kwh, price=found.price)
