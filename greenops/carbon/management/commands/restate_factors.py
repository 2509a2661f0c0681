"""The one way to apply today's site factors to past hours: explicit, recorded in the team's
audit log, and followed by a rebuild of the KPI rollups it changes.

    python manage.py restate_factors TEAM_SLUG --since 2026-11-01 --reason "meter data for Q4"
"""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from greenops.carbon.accounting import restate_factors
from greenops.kpis import rollup
from greenops.teams import audit
from greenops.teams.models import Team


class Command(BaseCommand):
    help = ("Apply each host's current PUE and grid intensity from --since on (past hours keep "
            "their own factors otherwise), audit it, and rebuild the team's KPI rollups.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("team", help="team slug")
        parser.add_argument("--since", required=True, help="ISO date or time (UTC)")
        parser.add_argument("--reason", required=True, help="why; kept in the audit log")

    def handle(self, team: str, since: str, reason: str, **options) -> None:
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"team: no team with slug {team!r}")
        try:
            start = dt.datetime.fromisoformat(since)
        except ValueError as exc:
            raise CommandError("--since: not an ISO date or time") from exc
        if start.tzinfo is None:
            start = start.replace(tzinfo=dt.UTC)
        if not reason.strip():
            raise CommandError("--reason: say why the past is restated")
        hosts = list(found.hosts.all())
        for host in hosts:
            restate_factors(host, start)
        audit.record(found, None, "carbon.restate_factors", f"{len(hosts)} host(s)",
                     actor_label="manage.py restate_factors", since=start.isoformat(),
                     reason=reason.strip())
        hours = rollup.rebuild(found, start, timezone.now())
        self.stdout.write(f"Restated factors from {start.isoformat()} for {len(hosts)} host(s); "
                          f"rebuilt {hours} hour(s) of KPIs.")
