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
from tests.support import ROOT
from tests.support.embedded import embedded_env
from tests.support.telemetry import (
    lost_peaks,
    minute_start,
    peak_batches,
)


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
from tests.support.telemetry import lost_peaks, minute_start, peak_batches

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


def test_the_embedded_sqlite_store_keeps_the_earlier_maximum(tmp_path, sqlite_migrated):
    out = subprocess.run([sys.executable, "-c", SQLITE_CHECK], cwd=ROOT,
                         env=embedded_env(tmp_path, sqlite_migrated), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")
