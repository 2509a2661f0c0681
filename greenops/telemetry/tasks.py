"""Celery tasks of the telemetry app. Tasks take ids, never objects."""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.db import OperationalError, transaction
from django.utils import timezone

from greenops.beat import single_flight
from greenops.telemetry import ingest, partitions
from greenops.telemetry.models import IngestBatch


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=8,
)
def store_batch(batch_id: str) -> int | None:
    """Write one received batch, and with it every other pending batch this worker can claim
    (group commit). Safe to run twice: batch rows are locked and claimed once."""
    return ingest.process_pending(batch_id)


@shared_task
@single_flight
def process_pending_batches(older_than_s: int = 60, limit: int = 500) -> int:
    """Beat safety net: batches whose queue message was lost (broker restart) still get stored."""
    cutoff = timezone.now() - dt.timedelta(seconds=older_than_s)
    ids = ingest.pending_batch_ids(cutoff, limit)
    for batch_id in ids:
        ingest.process_pending(str(batch_id))  # a no-op for those an earlier group took
    return len(ids)


@shared_task
@single_flight
def prune_batches(keep_days: int = 14) -> int:
    """Processed batch rows only serve replay detection; an agent never resends after days."""
    cutoff = timezone.now() - dt.timedelta(days=keep_days)
    with transaction.atomic():
        deleted, _ = IngestBatch.objects.filter(
            received_at__lt=cutoff, status=IngestBatch.Status.DONE
        ).delete()
    return deleted



@shared_task
@single_flight
def create_partitions() -> dict:
    """Partitions for the current and next days/weeks, and for periods only the default
    partition holds (greenops.telemetry.partitions)."""
    return partitions.create_ahead()


@shared_task
@single_flight
def apply_retention() -> dict:
    """Drop raw-sample days and minute-rollup weeks past their retention, a partition at a time,
    never one whose data is not rolled up yet (the refusal is logged and kept per table)."""
    return partitions.apply_retention()
