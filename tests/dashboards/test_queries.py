"""The dashboard's read side: day rollups for 90 days, and one line per host for big fleets."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from greenops.telemetry import queries
from greenops.telemetry.models import GpuDay, GpuHour
from tests.support.factories import make_batch, make_host


@pytest.mark.django_db
def test_day_rollup_matches_hour_rollups(host, post_batch):
    _, token = host
    # Two hours of samples one minute apart, crossing an hour boundary.
    start = time.time() - 2 * 3600
    assert post_batch(token, make_batch(n_per_gpu=120, step=60.0, start=start)).status_code == 202
    for field in ("samples", "energy_j", "util_sum", "power_sum_w"):
        day_total = sum(GpuDay.objects.values_list(field, flat=True))
        hour_total = sum(GpuHour.objects.values_list(field, flat=True))
        assert day_total == pytest.approx(hour_total) and day_total > 0


@pytest.mark.django_db
def test_quarter_reads_day_rollups(team, host, post_batch):
    _, token = host
    post_batch(token, make_batch(n_per_gpu=10))
    usage = queries.team_usage(team, "quarter")
    assert usage["resolution"] == "day" and usage["grouping"] == "gpu"
    assert all(len(s["t"]) == 1 for s in usage["series"])  # today only
    assert usage["totals"]["energy_kwh"] == pytest.approx(9 * (200 + 210) / 3.6e6)


@pytest.mark.django_db
def test_large_fleet_is_drawn_per_host(team, post_batch, settings, monkeypatch):
    monkeypatch.setattr(queries, "MAX_GPU_SERIES", 3)
    a, token_a = make_host(team, name="a", gpus=2)
    b, token_b = make_host(team, name="b", gpus=2)
    t0 = time.time() - 600
    post_batch(token_a, make_batch(n_per_gpu=3, start=t0))  # GPU power 200 W and 210 W
    post_batch(token_b, make_batch(n_per_gpu=3, start=t0))
    usage = queries.team_usage(team, "hour", now=dt.datetime.now(dt.UTC))
    assert usage["grouping"] == "host"
    assert [s["host"] for s in usage["series"]] == ["a", "b"]
    for s in usage["series"]:
        assert s["gpu_index"] is None and s["gpu_name"] == "2 GPUs"
        assert set(s["power_w"]) == {410.0}  # the host's GPUs summed
        assert set(s["util_pct"]) == {50.5}
    totals = usage["totals"]
    assert totals["gpus_reporting"] == 4
    assert totals["avg_power_w"] == pytest.approx(205.0)  # the average GPU
    assert totals["energy_kwh"] == pytest.approx(2 * 2 * (200 + 210) / 3.6e6)
