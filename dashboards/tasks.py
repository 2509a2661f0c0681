"""Beat, on the rollups queue: the team home's cost figures (cost cards, month to date,
recommendations) taken per team ahead of the page views (dashboards.headline.take_snapshot),
and the team charts' fleet rollups (greenops.telemetry.fleetroll)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from dashboards import headline
from greenops import queueing
from greenops.beat import single_flight
from greenops.teams.models import Team
from greenops.telemetry import fleetroll

log = logging.getLogger(__name__)


@shared_task
@single_flight
def snapshot_team_homes() -> int:
    """Each team with hosts: its snapshot for this hour, unless one under
    SNAPSHOT_REFRESH_S old exists. Returns the number taken."""
    taken = 0
    for team in Team.objects.filter(hosts__isnull=False).distinct().order_by("id"):
        now = timezone.now()
        snap = headline.cache.get(headline.snapshot_key(team.id, headline.windows.floor_hour(now)))
        if (
            snap is not None
            and (now - snap["computed_at"]).total_seconds() < headline.SNAPSHOT_REFRESH_S
        ):
            continue
        headline.take_snapshot(team, now)
        taken += 1
    return taken


# A team's refresh is queued once per this many seconds at most (a burst of page views after
# an edit queues one task); the task clears the mark when it is done.
REFRESH_MARK_S = 600


def refresh_mark(team_id: int) -> str:
    return f"team-home:refreshing:{team_id}"


def request_refresh(team: Team) -> bool:
    """A page found no current snapshot: queue one refresh of the team's cost figures, unless
    one is already queued. True when this call queued it."""
    if not cache.add(refresh_mark(team.id), 1, REFRESH_MARK_S):
        return False
    queueing.publish_after_response(refresh_team_home, team.id)
    return True


@shared_task
def refresh_team_home(team_id: int) -> bool:
    """The team's cost snapshot for this hour, taken now (what its home page showed as "being
    computed" or as of an older time). False when the team is gone."""
    try:
        team = Team.objects.filter(id=team_id).first()
        if team is None:
            return False
        headline.take_snapshot(team, timezone.now())
        return True
    finally:
        cache.delete(refresh_mark(team_id))


@shared_task
@single_flight
def fill_fleet_rollups() -> dict:
    """Each team's fleet rollups (the dashboard charts' closed display buckets), brought up to
    date from the per-GPU rollups: greenops.telemetry.fleetroll.fill. Returns per team and
    display step the buckets recomputed and the seconds taken."""
    return fleetroll.fill()
