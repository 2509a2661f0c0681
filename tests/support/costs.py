"""Cost test helpers: prices, GPU hours and host enrolment with hand-checkable figures."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from unittest import mock

from greenops.costs.models import (
    HostCostConfig,
    Price,
    PriceMethod,
    PricePeriod,
)
from greenops.telemetry.models import GpuHour, GpuMinute, Host

NOW = dt.datetime(2026, 11, 30, 6, 30, tzinfo=dt.UTC)
END = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)  # window end: start of the current hour
UTC = dt.UTC
SWITCH = dt.datetime(2026, 11, 1, 0, 0, tzinfo=UTC)  # the edit: first instant of November


def set_price(instance_type: str, region: str, option: str, usd: str, *, as_of=None,
              term_years=None, payment="", band="") -> Price:
    price, _ = Price.objects.update_or_create(
        provider="aws", region=region, instance_type=instance_type, option=option,
        term_years=term_years, payment=payment,
        defaults={"usd_per_hour": Decimal(usd), "method": PriceMethod.PRICE_LIST_API,
                  "source": "test", "as_of": as_of or NOW - dt.timedelta(days=1),
                  "interruption_band": band},
    )
    return price


def add_hours(gpu, n: int, util: float, *, end=END, kwh_per_hour: float = 0.3,
              mem_mib: float = 20_000.0, minutes: bool = True) -> None:
    """n hours ending at `end`, as the rollups hold them: one GpuHour row per hour and (unless
    `minutes` is off) its 60 GpuMinute rows at the same utilisation."""
    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=end - dt.timedelta(hours=i + 1), samples=60, util_sum=util * 60,
                util_n=60, energy_j=kwh_per_hour * 3_600_000, mem_used_max_mib=mem_mib)
        for i in range(n)
    ])
    if minutes:
        GpuMinute.objects.bulk_create([
            GpuMinute(gpu=gpu, bucket=end - dt.timedelta(hours=i + 1, minutes=-m), samples=1,
                      util_sum=util, util_n=1, energy_j=kwh_per_hour * 60_000,
                      mem_used_max_mib=mem_mib)
            for i in range(n) for m in range(60)
        ], batch_size=5000)


def enrolled(host, at: dt.datetime, removed: dt.datetime | None = None) -> None:
    """created_at is auto_now_add: set it (and removed_at) the way an old host has them."""
    Host.objects.filter(pk=host.pk).update(created_at=at, removed_at=removed)
    host.refresh_from_db()


def only_prices(**rates: str) -> None:
    """p4d.24xlarge us-east-1 at the given rates from 2026-01-01 on, nothing else."""
    Price.objects.filter(instance_type="p4d.24xlarge", region="us-east-1").delete()
    PricePeriod.objects.filter(instance_type="p4d.24xlarge", region="us-east-1").delete()
    since = dt.datetime(2026, 1, 1, tzinfo=UTC)
    if "on_demand" in rates:
        set_price("p4d.24xlarge", "us-east-1", "on_demand", rates["on_demand"], as_of=since)
    if "reserved" in rates:
        set_price("p4d.24xlarge", "us-east-1", "reserved", rates["reserved"], as_of=since,
                  term_years=1, payment="no_upfront")


def switch_to_reserved(host, when: dt.datetime = SWITCH) -> None:
    """What the host page and the cost settings do: save the host, then its terms."""
    with at(when):
        host.purchase_option = "reserved"
        host.save()
        HostCostConfig.objects.create(host=host, term_years=1, payment="no_upfront",
                                      source="RI purchase 2026-11")


def at(when: dt.datetime):
    """Run an edit as if it were made at `when` (the terms recorded from then on)."""
    return mock.patch("django.utils.timezone.now", return_value=when)
