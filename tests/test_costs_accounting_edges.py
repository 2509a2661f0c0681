"""Edges of greenops/costs/accounting.py that its mutation run found untested (issue 16).

Every figure is worked out by hand in the test's docstring or comments; each test was checked
to fail on the mutant it names (tests/mutation/SURVIVORS.md, cost-accounting section).
"""

from __future__ import annotations

import datetime as dt

from greenops.costs.accounting import existing_hours
from greenops.telemetry.models import Host

T0 = dt.datetime(2026, 11, 1, 0, 0, tzinfo=dt.UTC)


def h(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def test_owned_hours_run_from_the_enrolment_hour_to_the_removal():
    """Window 00:00-06:00; enrolled 01:30 (its started hour 01:00 counts whole), removed at
    04:00 sharp: owned hours 01:00, 02:00, 03:00 -- not 04:00, in which it no longer existed."""
    host = Host(name="h", created_at=h(1.5), removed_at=h(4))
    assert existing_hours(host, h(0), h(6)) == {h(1), h(2), h(3)}
    # Removed one minute into 04:00: it existed in part of that hour, which counts.
    host.removed_at = h(4) + dt.timedelta(minutes=1)
    assert existing_hours(host, h(0), h(6)) == {h(1), h(2), h(3), h(4)}
