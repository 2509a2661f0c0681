"""Reading the price catalog: the bundled snapshot, lookups, and whether a price is too old.

Lookups never guess: a missing price is `None` with a message that says what is missing, and a
price past its shelf life is returned flagged stale, so pages can show it as such.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

from django.db import transaction

from greenops.costs import overrides
from greenops.costs.models import (
    HostCostConfig,
    InstanceType,
    Payment,
    Price,
    PriceMethod,
    PriceOption,
)
from greenops.costs.prices import HourlyPrice, PriceProblem
from greenops.telemetry.models import Host, PurchaseOption

DATA_DIR = Path(__file__).resolve().parent / "data"
# Oldest first. Each later file re-sources part of the catalog; rows it lacks stay as the older
# file left them (with their own date and source), so no file is complete on its own.
SNAPSHOTS = (
    DATA_DIR / "aws_prices_2025-05-31.json",
    DATA_DIR / "aws_prices_2026-11-09.json",
    # GCP and Azure from SkyPilot's catalogs; its rows name their own provider (no AWS row
    # overlaps). Loaded by migrations 0005 (GCP) and 0006 (re-run after the Azure rows).
    DATA_DIR / "cloud_prices_2025-01-01.json",
)
SNAPSHOT = SNAPSHOTS[-1]

# List prices change a few times a year; spot prices hourly. Past these ages a price is shown
# flagged as stale (still shown: an old figure labelled old beats a blank).
MAX_AGE = {
    PriceOption.SPOT: dt.timedelta(days=3),
    PriceOption.ON_DEMAND: dt.timedelta(days=90),
    PriceOption.RESERVED: dt.timedelta(days=90),
    PriceOption.SAVINGS_PLAN: dt.timedelta(days=90),
}


def load_snapshot(path: Path = SNAPSHOT, instance_type_model=InstanceType,
                  price_model=Price) -> int:
    """Upsert one bundled snapshot. A row already refreshed after the row's date is kept:
    a newer observed price must never be overwritten by an older list price. A row may carry
    its own `as_of` (figures of one file come from sources of different dates); otherwise the
    file's date applies. Likewise a row or instance type may name its own `provider`, so one
    file can carry several clouds; otherwise the file's provider applies. (The model arguments
    let data migrations pass historical models.)"""
    doc = json.loads(path.read_text())
    meta = doc["metadata"]
    file_provider = meta.get("provider")
    file_as_of = _parse_date(meta["as_of"])
    written = 0
    with transaction.atomic():
        for name, spec in doc["instance_types"].items():
            spec = dict(spec)
            instance_type_model.objects.update_or_create(
                provider=spec.pop("provider", file_provider), name=name,
                defaults={**spec, "source": f"snapshot {path.name}"},
            )
        for row in doc["prices"]:
            key = {
                "provider": row.get("provider", file_provider), "region": row["region"],
                "instance_type": row["instance_type"], "option": row["option"],
                "term_years": row.get("term_years"), "payment": row.get("payment", ""),
            }
            as_of = _parse_date(row["as_of"]) if row.get("as_of") else file_as_of
            current = price_model.objects.filter(**key).first()
            if current is not None and current.as_of > as_of:
                continue
            price_model.objects.update_or_create(**key, defaults={
                "usd_per_hour": Decimal(row["usd_per_hour"]),
                "interruption_band": row.get("interruption_band", ""),
                "method": PriceMethod.SNAPSHOT,
                "source": row["source"],
                "as_of": as_of,
                "detail": {"snapshot": path.name, "confidence": row.get("confidence", "")},
            })
            written += 1
    return written


def load_snapshots(instance_type_model=InstanceType, price_model=Price) -> int:
    """Load every bundled snapshot, oldest first."""
    return sum(load_snapshot(path, instance_type_model, price_model) for path in SNAPSHOTS)


def _parse_date(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)


def is_stale(price: Price, now: dt.datetime | None = None) -> bool:
    return price.age(now) > MAX_AGE[PriceOption(price.option)]


def instance_type(provider: str, name: str) -> InstanceType | None:
    return InstanceType.objects.filter(provider=provider, name=name).first()


def find_price(provider: str, region: str, instance_type_name: str, option: str,
               term_years: int | None = None, payment: str | None = None) -> Price | None:
    qs = Price.objects.filter(provider=provider, region=region, instance_type=instance_type_name,
                              option=option)
    if option not in (PriceOption.RESERVED, PriceOption.SAVINGS_PLAN):
        return qs.order_by("-as_of").first()
    qs = qs.filter(term_years=term_years or 1)
    if not payment:
        return qs.order_by("-as_of").first()
    # The exact payment option first; a product-page effective rate is the best we have when
    # it is missing, and it is labelled as such wherever it is shown.
    return (qs.filter(payment=payment).order_by("-as_of").first()
            or qs.filter(payment=Payment.UNSPECIFIED).order_by("-as_of").first())


def host_price(host: Host, now: dt.datetime | None = None) -> HourlyPrice | PriceProblem:
    """The hourly price of a host under its own purchase option, or why there is none: the
    catalog's, after the team's own price overrides (greenops.costs.overrides)."""
    return overrides.apply(host, now, catalog_price(host, now))


_STORED = object()


def catalog_price(host: Host, now: dt.datetime | None = None,
                  config: HostCostConfig | None | object = _STORED
                  ) -> HourlyPrice | PriceProblem:
    """The catalog's (or the host's own cost settings') hourly price, before team overrides.
    `config`: the cost settings to use (greenops.costs.accounting passes those in force in
    the hour it prices); by default the host's stored ones."""
    if config is _STORED:
        config = HostCostConfig.objects.filter(host=host).first()
    if host.purchase_option == PurchaseOption.ON_PREM or host.provider == "on_prem":
        per_hour = config.hardware_usd_per_hour() if config else None
        if per_hour is None:
            return PriceProblem("missing_on_prem_cost",
                                f"{host.name}: on-premises host without hardware cost; "
                                "set its hardware price and amortisation period.")
        return HourlyPrice(
            usd_per_hour=float(per_hour), option=PurchaseOption.ON_PREM,
            source=config.source or "host cost settings", as_of=None, stale=False,
            electricity_usd_per_kwh=(float(config.electricity_usd_per_kwh)
                                     if config.electricity_usd_per_kwh is not None else None),
        )
    if not host.instance_type or not host.region:
        return PriceProblem("no_instance_type",
                            f"{host.name}: no instance type or region recorded for this host.")
    if instance_type(host.provider or "aws", host.instance_type) is None:
        return PriceProblem("unknown_instance_type",
                            f"{host.name}: instance type {host.instance_type!r} is not in the "
                            f"{host.provider or 'aws'} price catalog.")
    option = host.purchase_option
    term = config.term_years if config else 1
    payment = config.payment if config else Payment.NO_UPFRONT
    price = find_price(host.provider or "aws", host.region, host.instance_type, option,
                       term, payment)
    if price is None:
        what = option if option in (PriceOption.ON_DEMAND, PriceOption.SPOT) else \
            f"{option} {term}y {payment}"
        return PriceProblem("missing_price",
                            f"{host.name}: no {what} price for {host.instance_type} in "
                            f"{host.region}; refresh prices or add one.")
    return HourlyPrice(usd_per_hour=float(price.usd_per_hour), option=option,
                       source=price.source, as_of=price.as_of, stale=is_stale(price, now),
                       price=price)


def hourly_price(host: Host, now: dt.datetime | None = None) -> HourlyPrice | None:
    """For other apps (KPIs: cost per 1k inferences): the host's hourly price, or None."""
    result = host_price(host, now)
    return result if isinstance(result, HourlyPrice) else None
