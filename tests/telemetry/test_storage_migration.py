"""The partitioning migration on a PostgreSQL database that already holds samples keeps every
row (count and an exact digest of every row, before and after, and back again), and the
embedded SQLite default applies the same retention settings with a DELETE by age.

Both run in a subprocess: the migration against a scratch database of its own (migrated to the
migration before, filled, then migrated forward), SQLite in a temporary data directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psycopg
from django.db.migrations.loader import MigrationLoader

from tests.support import ROOT
from tests.support.embedded import embedded_env


def partition_migration() -> tuple[str, str, str]:
    """(this migration, the telemetry migration it follows, the latest telemetry migration),
    whatever their numbers are."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    name = next(n for app, n in loader.disk_migrations
                if app == "telemetry" and n.endswith("_partitions"))
    prev = next(d for app, d in loader.disk_migrations["telemetry", name].dependencies
                if app == "telemetry")
    return name, prev, loader.graph.leaf_nodes("telemetry")[0][1]


def fill_sql(table: str, key: str, step: str, cur) -> str:
    """An INSERT of one row per GPU (8) per `step` over four days, every column filled: random
    numbers, so the digest checks real values; whatever columns the table has now."""
    cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = %s ORDER BY ordinal_position", [table])
    cols, exprs = [], []
    for name, kind in cur.fetchall():
        cols.append(name)
        if name == "gpu_id":
            exprs.append("g")
        elif name == key:
            exprs.append("t")
        elif kind == "boolean":
            exprs.append("random() < 0.5")
        elif kind in ("integer", "bigint", "smallint"):
            exprs.append(f"(random() * 1000)::{kind}")
        else:
            exprs.append("random() * 1000")
    return (f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} "
            f"FROM generate_series(1, 8) g, generate_series('2026-10-03 10:00+00'::timestamptz, "
            f"'2026-10-07 09:59+00', '{step}') t")


def digest(cur, table: str, key: str) -> tuple[int, str]:
    cur.execute(f"SELECT count(*), md5(string_agg(t::text, '|' ORDER BY gpu_id, {key})) "
                f"FROM {table} t")
    return cur.fetchone()


def test_the_migration_keeps_every_row_of_a_filled_database():
    base = os.environ["DATABASE_URL"]
    admin_url = base.rsplit("/", 1)[0] + "/postgres"
    scratch = f"greenops_migcheck_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DATABASE_URL": base.rsplit("/", 1)[0] + "/" + scratch}
    name, prev, latest = partition_migration()

    def migrate(target: str) -> float:
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "manage.py", "migrate", "telemetry", target,
                              "-v0"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return time.monotonic() - t0

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {scratch}")
    try:
        migrate(prev)
        tables = {"telemetry_gpusample": ("ts", "1 minute"),
                  "telemetry_gpuminute": ("bucket", "5 minutes")}
        with psycopg.connect(env["DATABASE_URL"], autocommit=True) as db, db.cursor() as cur:
            for table, (key, step) in tables.items():
                cur.execute(fill_sql(table, key, step, cur))
            before = {t: digest(cur, t, key) for t, (key, _) in tables.items()}
        # 4 days x 1440 minutes x 8 GPUs, and a fifth of that in 5-minute steps.
        assert before["telemetry_gpusample"][0] == 46_080
        assert before["telemetry_gpuminute"][0] == 9_216

        migrate(name)
        with psycopg.connect(env["DATABASE_URL"]) as db, db.cursor() as cur:
            assert {t: digest(cur, t, key) for t, (key, _) in tables.items()} == before
            cur.execute("SELECT tableoid::regclass::text, count(*) FROM telemetry_gpusample "
                        "GROUP BY 1 ORDER BY 1")
            # One partition per UTC day that has rows (3-7 October), none left in the default.
            assert cur.fetchall() == [("telemetry_gpusample_p20261003", 8 * 14 * 60),
                                      ("telemetry_gpusample_p20261004", 8 * 1440),
                                      ("telemetry_gpusample_p20261005", 8 * 1440),
                                      ("telemetry_gpusample_p20261006", 8 * 1440),
                                      ("telemetry_gpusample_p20261007", 8 * 10 * 60)]
            cur.execute("SELECT tableoid::regclass::text, count(*) FROM telemetry_gpuminute "
                        "GROUP BY 1 ORDER BY 1")
            # ISO weeks: Monday 28 September (3-4 Oct) and Monday 5 October (5-7 Oct).
            assert cur.fetchall() == [("telemetry_gpuminute_p20260928", 8 * (14 + 24) * 12),
                                      ("telemetry_gpuminute_p20261005", 8 * (48 + 10) * 12)]

        # Later migrations add columns to the partitioned tables: the partitions get them too.
        migrate(latest)
        with psycopg.connect(env["DATABASE_URL"]) as db, db.cursor() as cur:
            for table in tables:
                cur.execute(f"SELECT count(*) FROM {table}")
                assert cur.fetchone()[0] == before[table][0]
                cur.execute("SELECT c.relname, count(a.attnum) FROM pg_class c JOIN pg_attribute a "
                            "ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
                            "WHERE c.relname LIKE %s AND c.relkind IN ('r', 'p') GROUP BY 1",
                            [table + "%"])
                widths = dict(cur.fetchall())
                assert len(set(widths.values())) == 1 and len(widths) > 3, widths

        migrate(prev)  # and back: one plain table with the same rows
        with psycopg.connect(env["DATABASE_URL"]) as db, db.cursor() as cur:
            assert {t: digest(cur, t, key) for t, (key, _) in tables.items()} == before
            cur.execute("SELECT count(*) FROM pg_partitioned_table")
            assert cur.fetchone()[0] == 0
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)")


SQLITE_RETENTION = r"""
import datetime as dt, time
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
call_command("migrate", verbosity=0)
assert connection.vendor == "sqlite", connection.vendor
assert settings.RETAIN_RAW_SAMPLES_DAYS == 2  # from GREENOPS_RETAIN_RAW_DAYS
from greenops.teams.models import Team
from greenops.telemetry import partitions, store, wire
from greenops.telemetry.ingest import known_gpus
from greenops.telemetry.models import Gpu, GpuDay, GpuSample, Host
from tests.support.factories import make_batch

team = Team.objects.create(name="Embedded")
host = Host(team=team, name="h"); host.set_new_token(); host.save()
for i in (0, 1):
    Gpu.objects.create(host=host, index=i)
now = timezone.now()
midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
days = [midnight - dt.timedelta(days=k) for k in (5, 4, 1)]
docs = [make_batch(n_per_gpu=5, start=(d + dt.timedelta(hours=12)).timestamp()) for d in days]

def put(doc):
    b = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6, max_future_s=1e12,
                         max_age_s=1e12)
    return store.store_batch(b, known_gpus(host))

def day_rows():
    return sorted(GpuDay.objects.values_list("gpu__index", "bucket", "samples", "power_sum_w",
                                             "energy_j"))

assert [put(doc) for doc in docs] == [10, 10, 10]
# make_batch: GPU g draws 200 + 10 g W; 5 samples, energy 4 x that (the first has none).
hand = sorted((g, d, 5, 5 * (200.0 + 10 * g), 4 * (200.0 + 10 * g)) for d in days for g in (0, 1))
assert day_rows() == hand, day_rows()
assert partitions.create_ahead(now) == {}  # nothing to partition on SQLite
report = partitions.apply_retention(now)
cutoff = midnight - dt.timedelta(days=2)
assert report["telemetry_gpusample"] == {
    "dropped": [f"20 rows before {cutoff.isoformat()}"], "refused": ""}, report
assert sorted({s.ts.date() for s in GpuSample.objects.all()}) == [days[2].date()]
assert day_rows() == hand
# A replay of a deleted day stores nothing: no raw row comes back, no rollup is rebuilt from
# the one replayed batch alone.
assert put(docs[0]) == 0 and put(docs[1]) == 0
assert GpuSample.objects.count() == 10 and day_rows() == hand
print("ok")
"""


def test_sqlite_retention_deletes_by_age_with_the_same_settings(tmp_path, sqlite_migrated):
    env = {**embedded_env(tmp_path, sqlite_migrated), "GREENOPS_RETAIN_RAW_DAYS": "2"}
    out = subprocess.run([sys.executable, "-c", SQLITE_RETENTION], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")
