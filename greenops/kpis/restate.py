"""The arguments every audited restate command takes (`manage.py restate_factors`,
`manage.py restate_terms`): a team, the moment from which its past is recomputed, and why."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import CommandError
from django.utils import timezone

from greenops.teams.models import Team


def add_arguments(parser) -> None:
    parser.add_argument("team", help="team slug")
    parser.add_argument("--since", required=True, help="ISO date or time (UTC)")
    parser.add_argument("--reason", required=True, help="why; kept in the audit log")


def parse(team: str, since: str, reason: str) -> tuple[Team, dt.datetime, str]:
    """The team, `since` as an aware UTC time, and the stripped reason; a CommandError naming
    the argument otherwise (nothing has been written yet)."""
    found = Team.objects.filter(slug=team).first()
    if found is None:
        raise CommandError(f"team: no team with slug {team!r}")
    try:
        start = dt.datetime.fromisoformat(since)
    except ValueError as exc:
        raise CommandError("--since: not an ISO date or time") from exc
    if start.tzinfo is None:
        start = start.replace(tzinfo=dt.UTC)
    if start > timezone.now():
        raise CommandError("--since: in the future; an edit already applies from now")
    if not reason.strip():
        raise CommandError("--reason: say why the past is restated")
    return found, start, reason.strip()
