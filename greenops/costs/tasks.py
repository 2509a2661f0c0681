"""Celery tasks of the costs app."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from greenops.beat import single_flight
from greenops.costs import aws_refresh, catalog
from greenops.costs.models import PriceRefresh


@shared_task
@single_flight
def refresh_prices() -> dict:
    """Beat task: make sure the bundled snapshot is loaded, then refresh from AWS where
    credentials exist. Without them the snapshot stays, labelled with its date."""
    import boto3  # ~0.6 s to import; only the price refresh needs it

    catalog.load_snapshots()
    session = boto3.Session()
    if session.get_credentials() is None:
        log = PriceRefresh.objects.create(
            status=PriceRefresh.Status.SKIPPED,
            message="No AWS credentials: prices stay as of their shown date.",
            finished_at=timezone.now(),
        )
        return {"status": log.status, "message": log.message}
    # The Price List API is served from us-east-1 and answers for every region. Spot is asked
    # region by region: the configured list, else the regions with GPU on-demand prices.
    pricing = session.client("pricing", region_name="us-east-1")
    savings_plans = session.client("savingsplans", region_name="us-east-1")
    log = aws_refresh.refresh(
        pricing, lambda region: session.client("ec2", region_name=region), savings_plans,
        spot_regions=getattr(settings, "GREENOPS_SPOT_REGIONS", None) or None)
    return {"status": log.status, "message": log.message, "prices_updated": log.prices_updated,
            "failed_parts": [p["part"] for p in log.failed_parts]}
