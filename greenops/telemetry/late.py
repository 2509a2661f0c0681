"""Marking hours whose telemetry arrived late, for the KPI rollup to rebuild.

The rule that keeps every hour in the KPIs, whenever its telemetry is stored:
- each KPI rollup run (kpis.rollup.run) recomputes every hour from LOOKBACK_HOURS - 1 hours
  before the hour in which the *previous* run started, up to the current hour; so
- an hour H that is not older than that at the moment a batch for it is stored (H >= the
  current hour minus LOOKBACK_HOURS - 1) is reached by the next run, however late it comes,
  because that run's previous run started no later than the batch was stored;
- older hours are marked here and rebuilt by the next run from the marks.
A live agent's batches are never older than that, so they add no rows here.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from greenops.telemetry.models import LateHour
from greenops.windows import HOUR, floor_hour

# Hours a KPI rollup run recomputes counting the current one (kpis.rollup.run's default).
LOOKBACK_HOURS = 3


def reach(since: dt.datetime, lookback_hours: int = LOOKBACK_HOURS) -> dt.datetime:
    """The oldest hour a rollup run recomputes when the previous run started at `since`
    (or the oldest hour a batch stored at `since` may be for and still go unmarked)."""
    return floor_hour(since) - (lookback_hours - 1) * HOUR


def is_late(start: dt.datetime, now: dt.datetime | None = None) -> bool:
    return floor_hour(start) < reach(now or timezone.now())


def mark(team_id: int, start: dt.datetime, end: dt.datetime,
         now: dt.datetime | None = None) -> int:
    """Mark the hours in [start, end] that the next rollup run might not reach; returns how
    many."""
    return mark_many([(team_id, start, end)], now)


def mark_many(spans: list[tuple[int, dt.datetime, dt.datetime]],
              now: dt.datetime | None = None) -> int:
    """mark() for several (team id, start, end) spans in one INSERT -- an ingest worker's group
    of batches from an agent draining its spool is late batch after batch; returns how many
    distinct hours were marked."""
    limit = reach(now or timezone.now()) - HOUR
    hours: dict[tuple[int, dt.datetime], None] = {}
    for team_id, start, end in spans:
        hour, last = floor_hour(start), min(floor_hour(end), limit)
        while hour <= last:
            hours[(team_id, hour)] = None
            hour += HOUR
    LateHour.objects.bulk_create([LateHour(team_id=team_id, hour=hour) for team_id, hour in hours],
                                 ignore_conflicts=True, batch_size=1000)
    return len(hours)
