"""Celery tasks of the workloads app. Tasks take ids, never objects."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from greenops.beat import single_flight
from greenops.workloads import pods


@shared_task
@single_flight
def rollup_pod_hours() -> int:
    """Beat: price the Kubernetes nodes' recent finished GPU-hours and split them between the
    pods that held them (greenops.workloads.pods). Idempotent; the last few hours are redone
    because snapshots and samples arrive late."""
    now = timezone.now()
    return pods.rollup(now - pods.ROLLUP_LOOKBACK, now, now)
