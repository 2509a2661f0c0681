"""The embedded default a newcomer gets: SQLite and in-process tasks, no PostgreSQL or Redis.

These run Django in a subprocess with DATABASE_URL and REDIS_URL unset, as `make demo` does.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT
from tests.support.embedded import embedded_env

CHECK = r"""
import django, time
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
assert connection.vendor == "sqlite", connection.vendor
from greenops.teams.models import Team
from greenops.telemetry import store, wire
from greenops.telemetry.ingest import known_gpus
from greenops.telemetry.models import Gpu, GpuDay, GpuHour, GpuMinute, GpuSample, Host
from tests.support.factories import make_batch

team = Team.objects.create(name="Embedded")
host = Host(team=team, name="h"); host.set_new_token(); host.save()
for i in (0, 1):
    Gpu.objects.create(host=host, index=i)
start = (time.time() // 3600 - 3) * 3600 + 1800  # crosses two hour boundaries
doc = make_batch(n_per_gpu=200, step=37.0, start=start)
batch = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6, max_future_s=300,
                         max_age_s=86400)
assert store.store_batch(batch, known_gpus(host)) == 400
assert store.store_batch(batch, known_gpus(host)) == 0  # a replay stores nothing
assert GpuSample.objects.count() == 400
for model in (GpuMinute, GpuHour, GpuDay):
    rows = list(model.objects.all())
    assert sum(r.samples for r in rows) == 400, model
    assert abs(sum(r.energy_j for r in rows) - 199 * (200 + 210) * 37.0) < 1e-6, model
    assert {r.bucket.second for r in rows} == {0}
assert len({r.bucket for r in GpuHour.objects.all()}) == 3
print("ok")
"""


def test_sqlite_store_is_idempotent_and_rolls_up(tmp_path, sqlite_migrated):
    out = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=ROOT,
        env=embedded_env(tmp_path, sqlite_migrated),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")


def test_demo_sets_up_on_sqlite_and_prints_the_login(tmp_path):
    out = subprocess.run(
        [sys.executable, "manage.py", "demo", "--no-serve", "--days", "0.5", "--port", "8123"],
        cwd=ROOT,
        env=embedded_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "http://127.0.0.1:8123/" in out.stdout
    assert "login: demo / greenops-demo" in out.stdout
    assert (tmp_path / "greenops.sqlite3").exists()
    # The pages a newcomer opens first render on SQLite with the demo's data.
    pages = r"""
import django
django.setup()
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
settings.ALLOWED_HOSTS = ["testserver"]
c = Client()
c.force_login(User.objects.get(username="demo"))
for url in ["/", "/teams/ml-platform/", "/teams/ml-platform/?range=quarter",
            "/teams/ml-platform/kpis/", "/teams/ml-platform/kpis/workloads/chat-llm/",
            "/teams/ml-platform/costs/", "/teams/ml-platform/hosts/", "/methodology/"]:
    r = c.get(url)
    assert r.status_code == 200, (url, r.status_code)
assert b"Simulated data" in c.get("/teams/ml-platform/").content
# Every journey's result is there: an alert rule with its history, a budget rule, the last
# closed month's report as CSV and PDF, the benchmark history, the inference fleet.
from greenops.alerts.models import Notification, Rule, RuleEvent
from greenops.reports.models import Report
rules = Rule.objects.filter(team__slug="ml-platform")
assert {r.kind for r in rules} == {"threshold", "budget"}, rules
for event in RuleEvent.objects.filter(rule__kind="threshold", to_state="firing"):
    assert Notification.objects.filter(event=event, kind="firing", status="sent").exists()
assert b"Idle H100s on the trainer" in c.get("/teams/ml-platform/alerts/").content
report = Report.objects.get(team__slug="ml-platform")
for ext in ("csv", "pdf"):
    r = c.get(f"/teams/ml-platform/reports/{report.id}/report.{ext}")
    assert r.status_code == 200, (ext, r.status_code)
for url in ["/teams/ml-platform/reports/", "/teams/ml-platform/benchmarks/",
            "/teams/ml-platform/benchmarks/chat-llm/", "/teams/inference/"]:
    r = c.get(url)
    assert r.status_code == 200, (url, r.status_code)
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", pages],
        cwd=ROOT,
        env=embedded_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
