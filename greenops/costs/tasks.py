"""Celery tasks of the costs app."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from greenops.costs import aws_refresh, catalog
from greenops.costs.models import Price, PriceRefresh

# Regions refreshed even before any host runs there, so the catalog can price a move.
DEFAULT_REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1")


@shared_task
def refresh_prices() -> dict:
    """Beat task: make sure the bundled snapshot is loaded, then refresh from AWS where
    credentials exist. Without them the snapshot stays, labelled with its date."""
    import boto3

    catalog.load_snapshots()
    session = boto3.Session()
    if session.get_credentials() is None:
        log = PriceRefresh.objects.create(
            status=PriceRefresh.Status.SKIPPED,
            message="No AWS credentials: prices stay as of their shown date.",
            finished_at=timezone.now(),
        )
        return {"status": log.status, "message": log.message}
    regions = set(DEFAULT_REGIONS) | set(
        Price.objects.filter(provider="aws").values_list("region", flat=True))
    # The Price List API is served from us-east-1 and answers for every region.
    pricing = session.client("pricing", region_name="us-east-1")
    ec2 = {r: session.client("ec2", region_name=r) for r in sorted(regions)}
    savings_plans = session.client("savingsplans", region_name="us-east-1")
    log = aws_refresh.refresh(pricing, ec2, savings_plans)
    return {"status": log.status, "message": log.message, "prices_updated": log.prices_updated}
