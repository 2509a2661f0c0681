"""Refreshing AWS prices with boto3: the Price List API and EC2 spot price history.

Parsing is separate from fetching so tests feed real-shaped responses through botocore's
Stubber. A refresh is made of parts (list prices, savings plans, spot per region), each fetched
and then written in its own transaction: a part that fails keeps its last good prices and is
recorded with its error, and the other parts still write theirs.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone

from greenops.costs.models import (
    InstanceType,
    Payment,
    Price,
    PriceMethod,
    PriceOption,
    PriceRefresh,
)

HOURS_PER_YEAR = 8760
PRICE_LIST_SOURCE = "AWS Price List API get_products (AmazonEC2, Linux, shared tenancy)"
SPOT_SOURCE = "EC2 DescribeSpotPriceHistory (Linux/UNIX)"
SAVINGS_PLAN_SOURCE = "AWS Savings Plans DescribeSavingsPlansOfferingRates (EC2 Instance SP, Linux)"
SECONDS_PER_YEAR = 31_536_000
PAYMENTS = {"No Upfront": Payment.NO_UPFRONT, "Partial Upfront": Payment.PARTIAL_UPFRONT,
            "All Upfront": Payment.ALL_UPFRONT}
TERMS = {"1yr": 1, "3yr": 3}


@dataclass
class ParsedOffer:
    region: str
    instance_type: str
    option: str
    usd_per_hour: Decimal
    term_years: int | None = None
    payment: str = ""
    published: dt.datetime | None = None
    detail: dict = field(default_factory=dict)


# What fetch_price_list asks for. The API is trusted to filter, but not blindly: an item that
# does not match (a Windows or BYOL product, another instance type) is dropped and counted, so
# it can never overwrite the Linux price.
REQUESTED_ATTRIBUTES = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                        "capacitystatus": "Used"}
SPOT_PRODUCT = "Linux/UNIX"


class PriceDataError(ValueError):
    """A response that cannot be priced safely: its whole part fails and keeps the last good
    prices, and the refresh log says why."""


def _usd(dimension: dict, where: str) -> Decimal:
    raw = (dimension.get("pricePerUnit") or {}).get("USD")
    if raw in (None, ""):
        raise PriceDataError(f"{where}: price dimension has no USD price")
    try:
        value = Decimal(raw)
    except ArithmeticError as exc:
        raise PriceDataError(f"{where}: USD price {raw!r} is not a number") from exc
    if not value.is_finite() or value < 0:
        raise PriceDataError(f"{where}: USD price {raw!r} is not a price")
    return value


def _dimensions(term: dict, where: str) -> list[dict]:
    dims = list((term.get("priceDimensions") or {}).values())
    if not dims:
        raise PriceDataError(f"{where}: term has no price dimensions")
    return dims


def mismatch(attrs: dict, instance_type: str | None) -> str:
    """Why a product does not match the request, or "" when it does."""
    for name, want in REQUESTED_ATTRIBUTES.items():
        if attrs.get(name) != want:
            return f"{name}={attrs.get(name)!r}, asked for {want!r}"
    if instance_type is not None and attrs.get("instanceType") != instance_type:
        return f"instanceType={attrs.get('instanceType')!r}, asked for {instance_type!r}"
    return ""


def parse_price_list_item(item: str | dict, instance_type: str | None = None
                          ) -> list[ParsedOffer]:
    """One PriceList entry (a JSON string in the API response) -> its on-demand and standard
    reserved offers. Upfront fees are spread over the term so every offer is an effective $/h.
    A product that does not match the request gives no offers; a term that cannot be priced
    (no dimension, no USD price, a unit other than hours and the upfront fee, an upfront
    payment option without its fee) raises PriceDataError."""
    doc = json.loads(item) if isinstance(item, str) else item
    attrs = doc["product"]["attributes"]
    # Local Zones and Wavelength Zones carry their parent's regionCode at their own, higher
    # prices: only the region's own products may write the region's price.
    if attrs.get("locationType") != "AWS Region" or mismatch(attrs, instance_type):
        return []
    region = attrs["regionCode"]
    itype = attrs["instanceType"]
    published = dt.datetime.fromisoformat(doc["publicationDate"].replace("Z", "+00:00")) \
        if doc.get("publicationDate") else None
    offers: list[ParsedOffer] = []
    terms = doc.get("terms") or {}
    for code, term in (terms.get("OnDemand") or {}).items():
        where = f"{itype} {region} on-demand term {code}"
        for dim in _dimensions(term, where):
            if dim.get("unit") != "Hrs":
                raise PriceDataError(f"{where}: unit {dim.get('unit')!r}, expected 'Hrs'")
            usd = _usd(dim, where)
            if usd == 0:
                raise PriceDataError(f"{where}: on-demand price is 0")
            offers.append(ParsedOffer(region, itype, PriceOption.ON_DEMAND, usd,
                                      published=published,
                                      detail={"rateCode": dim.get("rateCode", "")}))
    for term in (terms.get("Reserved") or {}).values():
        ta = term.get("termAttributes") or {}
        # Convertible RIs cost more for their flexibility; the recommendation is for standard.
        if ta.get("OfferingClass") != "standard" or ta.get("LeaseContractLength") not in TERMS:
            continue
        payment = PAYMENTS.get(ta.get("PurchaseOption", ""))
        if payment is None:
            continue
        where = f"{itype} {region} reserved {ta['LeaseContractLength']} {ta['PurchaseOption']}"
        years = TERMS[ta["LeaseContractLength"]]
        hourly: Decimal | None = None
        upfront: Decimal | None = None
        for dim in _dimensions(term, where):
            if dim.get("unit") == "Hrs":
                hourly = (hourly or Decimal(0)) + _usd(dim, where)
            elif dim.get("unit") == "Quantity":
                upfront = (upfront or Decimal(0)) + _usd(dim, where)
            else:
                raise PriceDataError(f"{where}: unit {dim.get('unit')!r}, expected 'Hrs' or "
                                     "'Quantity'")
        if hourly is None:
            raise PriceDataError(f"{where}: no hourly ('Hrs') dimension")
        # Without its fee a Partial Upfront rate looks half as dear as it is.
        if payment != Payment.NO_UPFRONT and not upfront:
            raise PriceDataError(f"{where}: upfront fee missing")
        upfront = upfront or Decimal(0)
        effective = hourly + upfront / (years * HOURS_PER_YEAR)
        offers.append(ParsedOffer(region, itype, PriceOption.RESERVED,
                                  effective.quantize(Decimal("0.000001")), years, payment,
                                  published, {"upfront_usd": str(upfront),
                                              "hourly_usd": str(hourly)}))
    return offers


def fetch_price_list(client, instance_types: Iterable[str],
                     ignored: list[str] | None = None) -> list[ParsedOffer]:
    """All regions' on-demand and reserved offers for the given instance types. Items that do
    not match the request are dropped, and why goes into `ignored`."""
    offers: list[ParsedOffer] = []
    for itype in instance_types:
        filters = [
            {"Type": "TERM_MATCH", "Field": "instanceType", "Value": itype},
            {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
            {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
            {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
            {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        ]
        token = None
        while True:
            kwargs = {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1",
                      "MaxResults": 100}
            if token:
                kwargs["NextToken"] = token
            page = client.get_products(**kwargs)
            for item in page.get("PriceList", []):
                doc = json.loads(item) if isinstance(item, str) else item
                why = mismatch(doc["product"]["attributes"], itype)
                if why and ignored is not None:
                    ignored.append(f"{doc['product'].get('sku', '?')}: {why}")
                offers.extend(parse_price_list_item(doc, itype))
            token = page.get("NextToken")
            if not token:
                break
    return offers


def parse_savings_plan_rates(results: list[dict]) -> list[ParsedOffer]:
    """EC2 Instance Savings Plan rates for shared-tenancy Linux box usage. EC2 Instance plans
    (one family, one region) are the cheaper kind and the one comparable with a standard RI."""
    offers = []
    for r in results:
        o = r["savingsPlanOffering"]
        props = {p["name"]: p["value"] for p in r.get("properties", [])}
        if (o["planType"] != "EC2Instance" or r["unit"] != "Hrs"
                or "BoxUsage" not in r["usageType"]
                or props.get("productDescription") != "Linux/UNIX"
                or props.get("tenancy", "shared") != "shared"
                or o["paymentOption"] not in PAYMENTS):
            continue
        offers.append(ParsedOffer(
            props["region"], props["instanceType"], PriceOption.SAVINGS_PLAN,
            Decimal(r["rate"]), round(o["durationSeconds"] / SECONDS_PER_YEAR),
            PAYMENTS[o["paymentOption"]],
            detail={"offeringId": o["offeringId"], "planType": o["planType"]},
        ))
    return offers


def fetch_savings_plan_rates(client, instance_types: Iterable[str]) -> list[ParsedOffer]:
    offers: list[ParsedOffer] = []
    for itype in instance_types:
        token = None
        while True:
            kwargs = {
                "savingsPlanTypes": ["EC2Instance"], "products": ["EC2"],
                "serviceCodes": ["AmazonEC2"],
                "filters": [{"name": "instanceType", "values": [itype]},
                            {"name": "productDescription", "values": ["Linux/UNIX"]},
                            {"name": "tenancy", "values": ["shared"]}],
                "maxResults": 1000,
            }
            if token:
                kwargs["nextToken"] = token
            page = client.describe_savings_plans_offering_rates(**kwargs)
            offers.extend(parse_savings_plan_rates(page.get("searchResults", [])))
            token = page.get("nextToken")
            if not token:
                break
    return offers


@dataclass
class SpotSummary:
    region: str
    instance_type: str
    zone: str  # the cheapest zone by median
    median_usd_per_hour: Decimal
    latest_usd_per_hour: Decimal
    latest_at: dt.datetime
    per_zone: dict[str, dict]


def summarise_spot(region: str, history: list[dict],
                   instance_types: Iterable[str] | None = None) -> list[SpotSummary]:
    """Per instance type: each zone's latest price and median over the lookback; the type's
    planning price is the zone with the lowest median (where one would launch). Records for
    another product, zone or instance type than asked are dropped; a record without a price
    raises PriceDataError."""
    instance_types = set(instance_types) if instance_types is not None else None
    by_type: dict[str, dict[str, list[tuple[dt.datetime, Decimal]]]] = defaultdict(
        lambda: defaultdict(list))
    for row in history:
        # Asked for Linux/UNIX in this region's zones only: anything else (Windows, SUSE,
        # another region's zone) must not become this region's Linux price.
        if (row.get("ProductDescription") != SPOT_PRODUCT
                or not str(row.get("AvailabilityZone", "")).startswith(region)
                or (instance_types is not None and row.get("InstanceType") not in instance_types)):
            continue
        where = f"spot {row.get('InstanceType')} {row.get('AvailabilityZone')}"
        price = _usd({"pricePerUnit": {"USD": row.get("SpotPrice")}}, where)
        if price == 0 or not isinstance(row.get("Timestamp"), dt.datetime):
            raise PriceDataError(f"{where}: record without a price or time")
        by_type[row["InstanceType"]][row["AvailabilityZone"]].append((row["Timestamp"], price))
    out = []
    for itype, zones in sorted(by_type.items()):
        per_zone = {}
        for zone, points in zones.items():
            points.sort()
            per_zone[zone] = {
                "median": statistics.median(p for _, p in points),
                "latest": points[-1][1], "latest_at": points[-1][0], "points": len(points),
            }
        zone = min(per_zone, key=lambda z: (per_zone[z]["median"], z))
        best = per_zone[zone]
        out.append(SpotSummary(
            region, itype, zone, best["median"], best["latest"], best["latest_at"],
            {z: {"median": str(v["median"]), "latest": str(v["latest"]),
                 "latest_at": v["latest_at"].isoformat(), "points": v["points"]}
             for z, v in sorted(per_zone.items())},
        ))
    return out


def fetch_spot_history(client, instance_types: list[str], start: dt.datetime) -> list[dict]:
    history: list[dict] = []
    token = None
    while True:
        kwargs = {"InstanceTypes": instance_types, "ProductDescriptions": ["Linux/UNIX"],
                  "StartTime": start}
        if token:
            kwargs["NextToken"] = token
        page = client.describe_spot_price_history(**kwargs)
        history.extend(page.get("SpotPriceHistory", []))
        token = page.get("NextToken")
        if not token:
            break
    return history


def save_offers(offers: list[ParsedOffer], now: dt.datetime) -> int:
    for o in offers:
        sp = o.option == PriceOption.SAVINGS_PLAN
        source = SAVINGS_PLAN_SOURCE if sp else PRICE_LIST_SOURCE
        method = PriceMethod.SAVINGS_PLANS_API if sp else PriceMethod.PRICE_LIST_API
        Price.objects.update_or_create(
            provider="aws", region=o.region, instance_type=o.instance_type, option=o.option,
            term_years=o.term_years, payment=o.payment,
            defaults={"usd_per_hour": o.usd_per_hour, "method": method,
                      "source": source, "as_of": now,
                      "detail": {**o.detail, "published": o.published.isoformat()
                                 if o.published else None}},
        )
    return len(offers)


def save_spot(summaries: list[SpotSummary], lookback: dt.timedelta, now: dt.datetime) -> int:
    """`as_of` is when this refresh saw the price: AWS reports the price in effect at the
    lookback's start with the time it last changed, so a steady price would otherwise look as
    old as its last change. That time stays in the detail."""
    for s in summaries:
        existing = Price.objects.filter(provider="aws", region=s.region,
                                        instance_type=s.instance_type,
                                        option=PriceOption.SPOT).first()
        changed = s.latest_at.astimezone(dt.UTC)
        Price.objects.update_or_create(
            provider="aws", region=s.region, instance_type=s.instance_type,
            option=PriceOption.SPOT, term_years=None, payment="",
            defaults={
                "usd_per_hour": s.median_usd_per_hour,
                "latest_usd_per_hour": s.latest_usd_per_hour,
                # The API has no interruption rate; keep the band we had (Spot Instance Advisor).
                "interruption_band": existing.interruption_band if existing else "",
                "method": PriceMethod.SPOT_HISTORY,
                "source": f"{SPOT_SOURCE}, median over {lookback.days} days in {s.zone}",
                "as_of": now,
                "detail": {"zone": s.zone, "zones": s.per_zone,
                           "last_change_at": changed.isoformat(),
                           "note": f"observed {now.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC; "
                                   f"price in {s.zone} last changed "
                                   f"{changed:%Y-%m-%d %H:%M} UTC"},
            },
        )
    return len(summaries)


T = TypeVar("T")


def run_part(name: str, fetch: Callable[[], T], save: Callable[[T], int]) -> dict:
    """Fetch, then write in one transaction: all of a part's prices or none of them."""
    try:
        data = fetch()
        with transaction.atomic():
            written = save(data)
    except Exception as exc:  # noqa: BLE001 -- one part's failure must not stop the others
        return {"part": name, "status": "failed", "prices": 0,
                "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"part": name, "status": "done", "prices": written, "error": ""}


def gpu_on_demand_regions(instance_types: Iterable[str]) -> list[str]:
    """Regions where the catalog has an on-demand price for one of these GPU instance types:
    the only places a spot price is worth asking for (and where the credentials are likely to
    be enabled; opt-in regions answer AuthFailure)."""
    gpu_types = InstanceType.objects.filter(provider="aws", name__in=list(instance_types),
                                            gpu_count__gt=0).values("name")
    return sorted(set(Price.objects.filter(
        provider="aws", option=PriceOption.ON_DEMAND, instance_type__in=gpu_types,
    ).values_list("region", flat=True)))


def refresh(pricing_client, ec2_clients: Mapping[str, Any] | Callable[[str], Any],
            savings_plans_client=None, *, instance_types: list[str] | None = None,
            spot_regions: Iterable[str] | None = None,
            spot_lookback: dt.timedelta = dt.timedelta(days=7),
            now: dt.datetime | None = None) -> PriceRefresh:
    """Refresh part by part. `ec2_clients` is a client per region, or a function making one.
    Spot is asked for in `spot_regions` when given, else in the regions with GPU on-demand
    prices once the list prices are written (with a mapping, only among its regions)."""
    now = now or timezone.now()
    log = PriceRefresh.objects.create(started_at=now)
    types = instance_types or list(
        InstanceType.objects.filter(provider="aws").values_list("name", flat=True))
    ignored: list[str] = []
    parts = [run_part("price_list", lambda: fetch_price_list(pricing_client, types, ignored),
                      lambda offers: save_offers(offers, now))]
    if ignored:
        parts[0]["ignored"] = ignored[:20]
    if savings_plans_client is not None:
        parts.append(run_part(
            "savings_plans", lambda: fetch_savings_plan_rates(savings_plans_client, types),
            lambda offers: save_offers(offers, now)))
    regions = list(spot_regions) if spot_regions is not None else gpu_on_demand_regions(types)
    if isinstance(ec2_clients, Mapping):
        regions = [r for r in regions if r in ec2_clients]
    for region in regions:
        def fetch(region: str = region) -> list[SpotSummary]:
            client = ec2_clients[region] if isinstance(ec2_clients, Mapping) \
                else ec2_clients(region)
            return summarise_spot(region, fetch_spot_history(client, types, now - spot_lookback),
                                  types)
        parts.append(run_part(f"spot {region}", fetch,
                              lambda summaries: save_spot(summaries, spot_lookback, now)))
    _finish(log, parts)
    return log


def _finish(log: PriceRefresh, parts: list[dict]) -> None:
    failed = [p for p in parts if p["status"] == "failed"]
    done = len(parts) - len(failed)
    log.parts = parts
    log.prices_updated = sum(p["prices"] for p in parts)
    log.status = (PriceRefresh.Status.DONE if not failed else
                  PriceRefresh.Status.FAILED if not done else PriceRefresh.Status.PARTIAL)
    log.message = f"{done} of {len(parts)} parts refreshed, {log.prices_updated} prices updated."
    ignored = sum(len(p.get("ignored", [])) for p in parts)
    if ignored:
        log.message += (f" {ignored} price list item(s) did not match the request (Linux, "
                        "shared tenancy, no pre-installed software, capacity Used) and were "
                        "ignored.")
    if failed:
        log.message += " Failed: " + "; ".join(f"{p['part']} ({p['error']})" for p in failed) \
            + ". For those, the previous prices are kept."
    log.finished_at = timezone.now()
    log.save()
