"""Spot interruption-frequency bands from the data file behind AWS's Spot Instance Advisor.

AWS publishes the bands only as the JSON the Spot Instance Advisor page reads
(https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json); no API returns them, so the
boto3 refresh cannot. An operator downloads that file and loads it with
`manage.py load_spot_advisor FILE`; the bands then stay on the spot prices through later
refreshes. Shape of the file (only the parts read here):

    {"ranges": [{"index": 0, "label": "<5%", ...}, ...],
     "spot_advisor": {"us-east-1": {"Linux": {"p5.48xlarge": {"s": 70, "r": 1}, ...}, ...}}}

where "r" is the index of the interruption range and "s" the advertised saving in percent.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction

from greenops.costs.models import INTERRUPTION_BANDS, Price, PriceOption

SOURCE = "AWS Spot Instance Advisor data (spot-advisor-data.json)"


class AdvisorError(ValueError):
    pass


def parse(doc, os_name: str = "Linux") -> dict[tuple[str, str], str]:
    """(region, instance type) -> band label, for one operating system."""
    try:
        labels = {int(r["index"]): str(r["label"]).replace(" ", "") for r in doc["ranges"]}
        regions = doc["spot_advisor"]
    except (KeyError, TypeError, ValueError):
        raise AdvisorError("not a Spot Instance Advisor file: needs 'ranges' and "
                           "'spot_advisor'") from None
    unknown = set(labels.values()) - set(INTERRUPTION_BANDS)
    if unknown:
        raise AdvisorError(f"unknown interruption range labels: {sorted(unknown)}")
    bands = {}
    for region, by_os in regions.items():
        for itype, entry in (by_os or {}).get(os_name, {}).items():
            try:
                bands[(region, itype)] = labels[int(entry["r"])]
            except (KeyError, TypeError, ValueError):
                raise AdvisorError(f"{region} {itype}: no valid range index 'r'") from None
    return bands


@transaction.atomic
def apply(bands: dict[tuple[str, str], str], observed: dt.datetime) -> int:
    """Set the band on every AWS spot price the file covers; returns how many were set."""
    updated = 0
    for price in Price.objects.filter(provider="aws", option=PriceOption.SPOT):
        band = bands.get((price.region, price.instance_type))
        if band is None:
            continue
        price.interruption_band = band
        price.detail = {**price.detail, "interruption_band_source": SOURCE,
                        "interruption_band_observed": observed.isoformat()}
        price.save(update_fields=["interruption_band", "detail", "updated_at"])
        updated += 1
    return updated
