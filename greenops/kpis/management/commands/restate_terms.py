"""The one way to apply a host's current cost terms to past hours: explicit, recorded in the
team's audit log, and followed by a rebuild of the KPI rollups it changes.

    python manage.py restate_terms TEAM_SLUG --since 2026-10-15 --reason "RI bought 15 Oct" \
        [--host gpu-node-1]

An edit of a host (provider, region, instance type, purchase option) or of its cost settings
(commitment term, payment, hardware cost, $/kWh) applies from the moment it is saved; use this
when it should have applied earlier (the reservation was bought before anyone edited the host).
"""

from __future__ import annotations

from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from greenops.costs.models import HostTermsPeriod
from greenops.kpis import restate, rollup
from greenops.teams import audit


class Command(BaseCommand):
    help = ("Apply each host's current cost terms (purchase option, offer, commitment, on-prem "
            "hardware and electricity) from --since on (past hours keep their own terms "
            "otherwise), audit it, and rebuild the team's KPI rollups.")

    def add_arguments(self, parser) -> None:
        restate.add_arguments(parser)
        parser.add_argument("--host", action="append", default=[],
                            help="host name (repeatable); default every host of the team")

    def handle(self, team: str, since: str, reason: str, host: list[str], **options) -> None:
        found, start, reason = restate.parse(team, since, reason)
        now = timezone.now()
        hosts = list(found.hosts.all())
        if host:
            unknown = sorted(set(host) - {h.name for h in hosts})
            if unknown:
                raise CommandError(f"--host: no host {', '.join(unknown)} in team {team}")
            hosts = [h for h in hosts if h.name in host]
        with transaction.atomic():
            terms = {h.name: HostTermsPeriod.restate(h, start) for h in hosts}
            audit.record(found, None, "costs.restate_terms",
                         f"{len(hosts)} host(s)", actor_label="manage.py restate_terms",
                         since=start.isoformat(), reason=reason,
                         terms={name: {k: str(v) if v is not None else None
                                       for k, v in asdict(t).items()}
                                for name, t in terms.items() if t is not None})
        hours = rollup.rebuild(found, start, now)
        self.stdout.write(f"Restated cost terms from {start.isoformat()} for {len(hosts)} "
                          f"host(s); rebuilt {hours} hour(s) of KPIs. Reports of the months "
                          "it touches show a new revision when regenerated.")
