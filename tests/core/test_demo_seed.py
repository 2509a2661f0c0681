"""The demo's bulk seeding stores exactly what ingest would have stored: the same samples and
the same minute, hour and day rollups, on PostgreSQL (ingest's COPY with whole-history
batches) and on the embedded SQLite (one executemany, rollups once per table)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support import ROOT
from tests.support.embedded import embedded_env

# 190 minutes ending at hh:50 of the hour before last: one sample per GPU per minute on the
# trainer's 8 GPUs is 190 x 8 = 1,520 samples and as many minute rows; the window runs from
# (hh-3):40 to hh:50, so it touches the hours hh-3, hh-2, hh-1 and hh: 4 x 8 = 32 hour rows.
END = int(time.time()) // 3600 * 3600 - 2 * 3600 + 50 * 60
START = END - 190 * 60
ROWS = {"telemetry_gpusample": 1520, "telemetry_gpuminute": 1520, "telemetry_gpuhour": 32}


def _check(result: dict, way: str = "bulk") -> None:
    for table, expected in ROWS.items():
        if way == "rollups" and table == "telemetry_gpusample":
            # The older history's rollups alone: no raw sample stored, where ingest stored all.
            assert result[table]["rows"] == 0, result[table]
            assert result[table]["ingest_rows"] == expected, result[table]
            continue
        assert result[table]["rows"] == expected, (table, result[table])
    assert result["telemetry_gpuday"]["rows"] in (8, 16)  # one day, or two across midnight
    assert all(not r["diff"] for r in result.values()), result


def test_bulk_seed_matches_ingest_on_postgresql(db):
    from tests.support.demo_paths import compare

    _check(compare(START, END))


def test_rollups_only_seed_matches_ingest_on_postgresql(db):
    """The older history seeded as rollups alone: the minute, hour and day rows (sums, maxima,
    energy, util and idle minute counts) are exactly ingest's for the same samples."""
    from tests.support.demo_paths import compare

    _check(compare(START, END, "rollups"), "rollups")


@pytest.mark.parametrize("way", ["bulk", "rollups"])
def test_bulk_seed_matches_ingest_on_sqlite(tmp_path, sqlite_migrated, way):
    env = embedded_env(tmp_path, sqlite_migrated)
    code = (
        "import django, json; django.setup(); "
        "from tests.support.demo_paths import compare; "
        f"print(json.dumps(compare({START}, {END}, {way!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    _check(json.loads(done.stdout.strip().splitlines()[-1]), way)
