"""manage.py load_spot_advisor FILE: set spot interruption bands from AWS's advisor data."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from greenops.costs import spot_advisor


class Command(BaseCommand):
    help = "Load interruption-frequency bands from a downloaded spot-advisor-data.json."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--os", default="Linux", help="operating system (default Linux)")

    def handle(self, *args, file: Path, os: str, **options) -> None:
        try:
            doc = json.loads(file.read_text())
            bands = spot_advisor.parse(doc, os)
        except (OSError, json.JSONDecodeError, spot_advisor.AdvisorError) as exc:
            raise CommandError(f"{file}: {exc}") from None
        updated = spot_advisor.apply(bands, timezone.now())
        self.stdout.write(f"{len(bands)} bands in the file; set on {updated} spot prices")
