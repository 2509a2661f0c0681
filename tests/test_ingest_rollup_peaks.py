"""Peaks survive a second batch: the rollups keep the greater of the stored and the new maximum.

Right-sizing and the host pages read mem_used_max_mib, util_max, power_max_w and temp_max_c from
the minute, hour and day rollups. An agent ships a minute's samples in several batches, and a
later batch usually has lower peaks than an earlier one (a training step's memory spike, then
the quiet between steps): the upsert must keep the earlier maximum, not overwrite it with the
later batch's. Checked on PostgreSQL (the upsert) and on SQLite (buckets rebuilt from samples).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from greenops.telemetry.models import GpuDay, GpuHour, GpuMinute
from tests.conftest import make_batch
from tests.test_embedded_default import ROOT, embedded_env

# Batch 1 (earlier) carries the peaks; batch 2, ten seconds later in the same minute, is lower
# on every metric. Values are what NVML reports: util %, memory MiB, power W, temperature C.
PEAK = {"util_pct": 97.0, "mem_used_mib": 39_000.0, "power_w": 385.5, "temp_c": 81.0}
QUIET = {"util_pct": 12.0, "mem_used_mib": 2_048.0, "power_w": 96.25, "temp_c": 47.0}
COLUMN_OF_ROLLUP = {"util_max": "util_pct", "mem_used_max_mib": "mem_used_mib",
                    "power_max_w": "power_w", "temp_max_c": "temp_c"}


def minute_start(now_s: float) -> float:
    """The start of a whole minute two minutes ago: two 5-second batches fit in that minute, so
    in the same minute, hour and day bucket (a minute never straddles an hour or a day)."""
    return (now_s // 60 - 2) * 60


def peak_batches(start: float) -> list[dict]:
    """Two batches of 5 samples per GPU for GPUs 0 and 1: the first at start+0..4 s with the
    PEAK values on the middle sample, the second at start+10..14 s with QUIET values."""
    out = []
    for offset, values in ((0.0, PEAK), (10.0, QUIET)):
        doc = make_batch(n_per_gpu=5, start=start + offset)
        cols = doc["samples"]
        for name, value in values.items():
            # Batch 1: only its third sample per GPU peaks (the others sit at 50 %, 1024 MiB,
            # 200-210 W, 60 C from make_batch), so max() has to pick it out. Batch 2: flat.
            cols[name] = [value if (offset or i % 5 == 2) else cols[name][i]
                          for i in range(len(cols[name]))]
        out.append(doc)
    return out


def expected_after_both() -> dict[str, float]:
    # PEAK is above every other value of either batch (QUIET and make_batch's 50-51 %, 1024 MiB,
    # 200-210 W, 60 C), so each maximum over both batches is PEAK's.
    return {rollup: PEAK[column] for rollup, column in COLUMN_OF_ROLLUP.items()}


def lost_peaks(rows) -> list[tuple[str, int, str, float]]:
    """(rollup, GPU index, field, stored value) of every maximum that is not PEAK's: all of
    them at once, so a failure shows which of the minute, hour and day rollups lost what."""
    return [(type(r).__name__, r.gpu.index, f, getattr(r, f))
            for r in rows for f, want in expected_after_both().items()
            if getattr(r, f) is None or abs(getattr(r, f) - want) > 1e-9]


@pytest.mark.django_db
def test_a_later_batch_with_lower_peaks_keeps_the_earlier_maximum(host, post_batch):
    h, token = host
    first, second = peak_batches(minute_start(time.time()))
    assert post_batch(token, first).status_code == 202
    assert post_batch(token, second).status_code == 202
    rows = []
    for model in (GpuMinute, GpuHour, GpuDay):
        for gpu_index in (0, 1):
            [row] = model.objects.filter(gpu__host=h, gpu__index=gpu_index)
            # Both batches landed in this one bucket: 5 + 5 samples, sums added.
            assert row.samples == 10, model
            # util: 4 x (50 + GPU index) + 97 in batch 1, 5 x 12 in batch 2
            assert row.util_sum == pytest.approx(4 * (50.0 + gpu_index) + 97.0 + 5 * 12.0)
            rows.append(row)
    assert lost_peaks(rows) == []


@pytest.mark.django_db
def test_the_maximum_rises_when_the_later_batch_peaks_higher(host, post_batch):
    # The other direction: the second batch carries the peaks, so the stored maximum must rise.
    h, token = host
    first, second = peak_batches(minute_start(time.time()))
    assert post_batch(token, second).status_code == 202
    assert post_batch(token, first).status_code == 202
    rows = [row for model in (GpuMinute, GpuHour, GpuDay)
            for row in model.objects.filter(gpu__host=h)]
    assert len(rows) == 6 and lost_peaks(rows) == []


SQLITE_CHECK = r"""
import django, time
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
assert connection.vendor == "sqlite", connection.vendor
from greenops.teams.models import Team
from greenops.telemetry import store, wire
from greenops.telemetry.ingest import known_gpus
from greenops.telemetry.models import Gpu, GpuDay, GpuHour, GpuMinute, Host
from tests.test_ingest_rollup_peaks import lost_peaks, minute_start, peak_batches

team = Team.objects.create(name="Embedded")
host = Host(team=team, name="h"); host.set_new_token(); host.save()
for i in (0, 1):
    Gpu.objects.create(host=host, index=i)
for doc in peak_batches(minute_start(time.time())):
    batch = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6, max_future_s=300,
                             max_age_s=86400)
    assert store.store_batch(batch, known_gpus(host)) == 10
rows = [row for model in (GpuMinute, GpuHour, GpuDay) for row in model.objects.all()]
assert len(rows) == 6 and all(r.samples == 10 for r in rows), [r.samples for r in rows]
lost = lost_peaks(rows)
assert lost == [], lost
print("ok")
"""


def test_the_embedded_sqlite_store_keeps_the_earlier_maximum(tmp_path):
    out = subprocess.run([sys.executable, "-c", SQLITE_CHECK], cwd=ROOT,
                         env=embedded_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")
