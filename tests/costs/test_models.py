"""The price catalog's uniqueness holds on SQLite (the embedded default) as on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT
from tests.support.embedded import embedded_env

CHECK = r"""
import django
django.setup()
from django.core import checks
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
call_command("migrate", verbosity=0)
assert connection.vendor == "sqlite", connection.vendor
found = [m.id for m in checks.run_checks(databases=["default"])]
print("checks", found)
from greenops.costs.models import Price
dupes = []
for term, payment in ((None, ""), (1, "no_upfront")):
    row = dict(provider="aws", region="xx-test-1", instance_type="g5.xlarge",
               option="reserved" if term else "on_demand", term_years=term, payment=payment,
               usd_per_hour="1", method="snapshot", source="t", as_of="2026-01-01T00:00Z")
    Price.objects.create(**row)
    try:
        with transaction.atomic():
            Price.objects.create(**row)
        dupes.append(term)
    except IntegrityError:
        pass
print("duplicates", dupes)
"""


def test_one_price_per_offer_is_enforced_on_sqlite(tmp_path, sqlite_migrated):
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT,
                         env=embedded_env(tmp_path, sqlite_migrated),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    # models.W047: SQLite ignores nulls_distinct=False, i.e. drops the whole constraint
    assert "models.W047" not in out.stdout
    assert "duplicates []" in out.stdout, out.stdout
