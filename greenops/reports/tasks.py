"""Celery tasks of the reports app: they take ids, never objects (saleor's habit)."""

from __future__ import annotations

from celery import shared_task

from greenops.beat import single_flight
from greenops.reports import generate


@shared_task
def generate_report(report_id: int) -> str:
    report = generate.run(report_id)
    return "already claimed" if report is None else report.status


@shared_task
@single_flight
def schedule_monthly() -> list[int]:
    """Beat, hourly: the previous month's report for every team whose month has closed in its
    own time zone, after REPORTS_GRACE_HOURS for late data."""
    return generate.schedule()
