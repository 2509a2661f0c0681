"""Celery tasks of the kpis app. Tasks take ids, never objects."""

from __future__ import annotations

from celery import shared_task

from greenops.beat import single_flight
from greenops.kpis import rollup
from greenops.telemetry import late


@shared_task
@single_flight
def rollup_kpis(lookback_h: int = late.LOOKBACK_HOURS) -> dict:
    """Beat: rebuild the recent hourly/daily KPI rollups and refresh recent training jobs.
    Idempotent: every bucket is recomputed from its sources and overwritten."""
    return rollup.run(lookback_h=lookback_h)
