"""Beat, on the rollups queue: the team home's cost figures (cost cards, month to date,
recommendations) taken per team ahead of the page views (dashboards.headline.take_snapshot),
and the team charts' fleet rollups (greenops.telemetry.fleetroll)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from dashboards import headline, refresh
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


# A team's refresh is queued once per this many seconds at most (dashboards.refresh).
REFRESH_MARK_S = refresh.MARK_S


def refresh_mark(team_id: int) -> str:
    return f"team-home:refreshing:{team_id}"


def request_refresh(team: Team) -> bool:
    """A page found no current snapshot: queue one refresh of the team's cost figures, unless
    one is already queued. True when this call queued it."""
    return refresh.request(refresh_team_home, refresh_mark(team.id), team.id)


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
        refresh.done(refresh_mark(team_id))


def kpis_refresh_mark(team_id: int, range_key: str) -> str:
    return f"team-home:kpis-refreshing:{team_id}:{headline.kpi_range(range_key)}"


def request_kpis_refresh(team: Team, range_key: str) -> bool:
    """A page found no current KPI figures for the range and did not compute them (too slow
    for a request): queue one refresh. True when this call queued it."""
    return refresh.request(refresh_team_kpis, kpis_refresh_mark(team.id, range_key), team.id,
                           headline.kpi_range(range_key))


@shared_task
def refresh_team_kpis(team_id: int, range_key: str) -> bool:
    """The team home's KPI figures (cards, month to date, daily bars) at `range_key`, computed
    now and kept (headline.keep_kpi_figures). False when the team is gone."""
    try:
        team = Team.objects.filter(id=team_id).first()
        if team is None:
            return False
        headline.keep_kpi_figures(team, range_key, timezone.now())
        return True
    finally:
        refresh.done(kpis_refresh_mark(team_id, range_key))


@shared_task
@single_flight
def fill_fleet_rollups() -> dict:
    """Each team's fleet rollups (the dashboard charts' closed display buckets), brought up to
    date from the per-GPU rollups: greenops.telemetry.fleetroll.fill. Returns per team and
    display step the buckets recomputed and the seconds taken."""
    return fleetroll.fill()
