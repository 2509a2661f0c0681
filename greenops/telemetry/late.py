"""Marking hours whose telemetry arrived late, for the KPI rollup to rebuild.

Regular rollup runs recompute the most recent hours anyway (kpis.rollup.run's lookback), so only
data older than RECENT is marked: a live agent's batches add no rows here.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from greenops.telemetry.models import LateHour
from greenops.windows import floor_hour

# Must stay below the KPI rollup's lookback (3 hours) so no hour falls between the two.
RECENT = dt.timedelta(hours=2)
HOUR = dt.timedelta(hours=1)


def _cutoff(now: dt.datetime | None) -> dt.datetime:
    """Hours before this one are past the regular rollup's reach."""
    return floor_hour((now or timezone.now()) - RECENT)


def is_late(start: dt.datetime, now: dt.datetime | None = None) -> bool:
    return floor_hour(start) < _cutoff(now)


def mark(team_id: int, start: dt.datetime, end: dt.datetime,
         now: dt.datetime | None = None) -> int:
    """Mark the hours in [start, end] that are older than RECENT; returns how many."""
    hour, last = floor_hour(start), min(floor_hour(end), _cutoff(now) - HOUR)
    rows = []
    while hour <= last:
        rows.append(LateHour(team_id=team_id, hour=hour))
        hour += HOUR
    LateHour.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    return len(rows)
