"""The one way to apply today's site factors to past hours: explicit, recorded in the team's
audit log, and followed by a rebuild of the KPI rollups it changes.

    python manage.py restate_factors TEAM_SLUG --since 2026-11-01 --reason "meter data for Q4"
"""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.utils import timezone

from greenops.carbon.accounting import restate_factors
from greenops.kpis import restate, rollup
from greenops.teams import audit


class Command(BaseCommand):
    help = ("Apply each host's current PUE and grid intensity from --since on (past hours keep "
            "their own factors otherwise), audit it, and rebuild the team's KPI rollups.")

    def add_arguments(self, parser) -> None:
        restate.add_arguments(parser)

    def handle(self, team: str, since: str, reason: str, **options) -> None:
        found, start, reason = restate.parse(team, since, reason)
        hosts = list(found.hosts.all())
        for host in hosts:
            restate_factors(host, start)
        audit.record(found, None, "carbon.restate_factors", f"{len(hosts)} host(s)",
                     actor_label="manage.py restate_factors", since=start.isoformat(),
                     reason=reason)
        hours = rollup.rebuild(found, start, timezone.now())
        self.stdout.write(f"Restated factors from {start.isoformat()} for {len(hosts)} host(s); "
                          f"rebuilt {hours} hour(s) of KPIs.")
