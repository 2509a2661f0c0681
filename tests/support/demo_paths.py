"""The demo's bulk seeding against ingest's batch-by-batch store, on whichever database Django
is set up with: the same simulated host drawn twice over one window, stored both ways, and every
stored row compared (tests/core/test_demo_seed.py runs it on PostgreSQL in-process and on the
embedded SQLite in a subprocess)."""

from __future__ import annotations

import math
import time

from django.db import connection

from greenops.demo import seed
from greenops.demo.story import HOSTS
from greenops.teams.models import Team
from greenops.telemetry.models import Host

# The trainer: 8 GPUs, 6-hour blocks idle, on half the board or on all of it -- idle and busy
# minutes, so the hour and day rows' idle-minute counts are exercised.
SPEC = HOSTS[0]
TABLES = {
    "telemetry_gpusample": "ts",
    "telemetry_gpuminute": "bucket",
    "telemetry_gpuhour": "bucket",
    "telemetry_gpuday": "bucket",
}


def _rows(host: Host, table: str, key: str) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT t.*, g."index" FROM {table} t JOIN telemetry_gpu g '
            f"ON g.id = t.gpu_id WHERE g.host_id = %s",
            [host.id],
        )
        names = [c[0] for c in cursor.description]
        out = {}
        for row in cursor.fetchall():
            d = dict(zip(names, row, strict=True))
            d.pop("id", None)
            d.pop("gpu_id")
            out[(d.pop("index"), str(d[key]))] = d
        return out


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def compare(start: float, end: float, way: str = "bulk") -> dict:
    """way "bulk": seed.backfill against ingest; "rollups": seed.backfill_rollups (the older
    history's rollups alone, no raw samples) against ingest."""
    team = Team.objects.create(slug=f"paths-{time.monotonic_ns()}", name="paths")
    hosts = []
    for way_name in (way, "ingest"):
        host = Host(team=team, name=f"{SPEC.name}-{way_name}", hostname="h")
        host.set_new_token()
        host.save()
        hosts.append(host)
    idle_since = start - 86400
    first = seed.HostHistory(hosts[0], SPEC, idle_since, start)
    if way == "rollups":
        seed.backfill_rollups(first, end)
    else:
        seed.backfill(first, end, bulk=True)
    seed.backfill(seed.HostHistory(hosts[1], SPEC, idle_since, start), end, bulk=False)
    out = {}
    for table, key in TABLES.items():
        bulk, ingest = (_rows(h, table, key) for h in hosts)
        if way == "rollups" and table == "telemetry_gpusample":
            out[table] = {"rows": len(bulk), "ingest_rows": len(ingest), "diff": []}
            continue
        diff = [f"{k} missing in one" for k in set(bulk) ^ set(ingest)][:5]
        for k in set(bulk) & set(ingest):
            cols = [c for c in bulk[k] if not _same(bulk[k][c], ingest[k][c])]
            if cols:
                diff.append(
                    f"{k}: " + ", ".join(f"{c} {bulk[k][c]!r} != {ingest[k][c]!r}" for c in cols)
                )
        out[table] = {"rows": len(bulk), "diff": diff[:5]}
    return out
