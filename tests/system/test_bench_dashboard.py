"""bench/dashboard runs, and measures the same thing on both sides: at a small scale with only raw
samples (no synthetic rollups), the chart figures the page draws from rollups equal the figures
the benchmark's raw-sample query computes, over every range's own window.

The two sides are independent implementations: greenops.telemetry.fleet (Python over minute,
hour or day rollups written by the production rollup SQL) and bench/dashboard's RAW_FLEET (one
SQL statement over raw samples, percentile_cont for p10/p90).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from greenops.telemetry.queries import RANGES
from tests.support import ROOT


def load_bench():
    loader = importlib.machinery.SourceFileLoader("bench_dashboard",
                                                  str(ROOT / "bench" / "dashboard"))
    spec = importlib.util.spec_from_loader("bench_dashboard", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def pg_server() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"


@pytest.mark.django_db
def test_bench_runs_and_page_figures_equal_raw_sample_figures(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("bench/dashboard needs PostgreSQL")
    database = f"greenops_bench_dashboard_test_{os.getpid()}"
    out = tmp_path / "results.json"
    # 20 GPUs (over MAX_GPU_SERIES: the fleet view with its p10-p90 band), 2 h of 1 Hz samples
    # and nothing else, so every range's window holds raw samples behind every rollup.
    argv = [sys.executable, str(ROOT / "bench" / "dashboard"), "--gpus", "20",
            "--gpus-per-host", "8", "--days", "0", "--raw-minutes", "120", "--requests", "2",
            "--raw-repeat", "1", "--kpi-hours", "2", "--json", str(out),
            "--database", database, "--pg", pg_server()]
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        with psycopg.connect(f"{pg_server()}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    # Exit status 1 only says the speed goal was missed at this toy scale: not asserted here.
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert out.exists(), proc.stdout + proc.stderr  # a SystemExit("...") is status 1 too
    results = json.loads(out.read_text())
    assert list(results) == list(RANGES)  # every range the team dashboard offers
    for key, r in results.items():
        assert r["checked_range"] == key, key  # compared over the range's own window
        assert not r["raw_extrapolated"], key
        assert r["equal"], (key, r["diffs"])
        assert r["p95_ms"] >= r["p50_ms"] > 0
    # 20 GPUs x 7,200 s: the raw side of every range read all 144,000 samples.
    assert results["day"]["raw_samples"] == 144_000
    assert results["hour"]["raw_samples"] == 72_000
    assert "page p95 ms" in proc.stdout and "same figures from raw samples" in proc.stdout


def test_compare_finds_a_differing_figure():
    """The equality above can fail: one bucket's p90 off by 0.02 %-points is reported."""
    bench = load_bench()
    page = {"util_mean_pct": [50.0, None], "util_p10_pct": [10.0, None],
            "util_p90_pct": [90.0, None], "power_w": [1000.0, None],
            "gpus_reporting": [20, 0], "energy_kwh_by_host": {"node-0000": [0.5, 0.0]},
            "totals": {"gpus": 20, "energy_kwh": 0.5}}
    raw = json.loads(json.dumps(page))
    assert bench.compare(page, raw) == []
    raw["util_p90_pct"][0] = 90.02
    assert bench.compare(page, raw) == ["util_p90_pct[0]: page 90.0 raw 90.02"]
    raw = json.loads(json.dumps(page))
    raw["totals"]["energy_kwh"] = 0.5000001
    assert bench.compare(page, raw) == ["totals.energy_kwh: page 0.5 raw 0.5000001"]


def test_p95_is_the_nearest_rank():
    bench = load_bench()
    # 20 values 1..20: rank ceil(0.95 x 20) = 19 -> 19; of 10 values rank 10 -> the largest.
    assert bench.p95(list(range(20, 0, -1))) == 19
    assert bench.p95([5.0, 1.0, 3.0, 2.0, 4.0, 9.0, 8.0, 7.0, 6.0, 10.0]) == 10.0
