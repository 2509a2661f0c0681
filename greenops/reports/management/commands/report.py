"""manage.py report --team SLUG --month 2026-10 | --all | --backfill 6

Generates reports in this process (no worker needed), with a progress bar on stderr, and prints
one line per report: its revision, or "no change", or why it failed.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from greenops.errors import FieldError
from greenops.reports import generate
from greenops.reports.models import Status, Trigger
from greenops.reports.month_figures import Month, current_month
from greenops.teams.models import Team

BAR_WIDTH = 30


class Command(BaseCommand):
    help = "Generate monthly reports (a team or all teams; one month or the last N closed ones)."

    def add_arguments(self, parser) -> None:
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--team", help="team slug")
        who.add_argument("--all", action="store_true", help="every team")
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--month", help="YYYY-MM, a calendar month in the team's time zone "
                                          "(default: the previous month)")
        when.add_argument("--backfill", type=int, metavar="N",
                          help="the last N closed months, oldest first")

    def handle(self, *args, **opts) -> None:
        if opts["all"]:
            teams = list(Team.objects.order_by("slug"))
        else:
            teams = list(Team.objects.filter(slug=opts["team"]))
            if not teams:
                raise CommandError(f"--team: no team with slug {opts['team']!r}")
        if opts["backfill"] is not None and not 1 <= opts["backfill"] <= 120:
            raise CommandError("--backfill: give a number of months from 1 to 120")
        try:
            fixed = Month.parse(opts["month"], "--month") if opts["month"] else None
        except FieldError as exc:
            raise CommandError(f"--month: {exc.message}") from None
        jobs: list[tuple[Team, Month]] = []
        for team in teams:
            last_closed = current_month(team).previous()
            if fixed is not None:
                months = [fixed]
            elif opts["backfill"]:
                months, m = [], last_closed
                for _ in range(opts["backfill"]):
                    months.insert(0, m)
                    m = m.previous()
            else:
                months = [last_closed]
            jobs += [(team, m) for m in months]
        failed = 0
        for i, (team, month) in enumerate(jobs):
            self._bar(i, len(jobs), f"{team.slug} {month}")
            report = generate.request(team, month, Trigger.COMMAND, enqueue=False)
            done = generate.run(report.id) or report
            done.refresh_from_db()
            if done.status == Status.FAILED:
                failed += 1
                line = f"{team.slug} {month}: FAILED {done.error}"
            elif done.revision:
                line = f"{team.slug} {month}: revision {done.revision}" + (
                    f", {len(done.difference)} figure(s) restated" if done.difference else "")
            elif done.unchanged_from_id:
                line = (f"{team.slug} {month}: no change, revision "
                        f"{done.unchanged_from.revision} stands")
            else:
                line = f"{team.slug} {month}: {done.status} (generated elsewhere)"
            self._clear()
            self.stdout.write(line)
        self._bar(len(jobs), len(jobs), "done")
        sys.stderr.write("\n")
        if failed:
            raise CommandError(f"{failed} of {len(jobs)} report(s) failed")

    def _bar(self, done: int, total: int, label: str) -> None:
        filled = BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{total} {label[:40]:<40}")
        sys.stderr.flush()

    def _clear(self) -> None:
        sys.stderr.write("\r" + " " * (BAR_WIDTH + 60) + "\r")
