"""The hour and day rollups count their minutes with a utilisation reported and the idle ones
(mean under 5 %), kept by the ingest statement as later batches change a minute's mean, so idle
cost reads hours and gets what counting the minute rollups gets."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db import connection
from django.db.models import Count, F, Q

from greenops.telemetry import ingest, store, wire
from greenops.telemetry.models import GpuDay, GpuHour, GpuMinute, IngestBatch
from tests.support.factories import gz, make_batch, make_host

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="the ingest statement is the PostgreSQL path")

# GPU 0, minute by minute from the hour's 10th minute; util % as NVML reports it.
# Batch A: m0 [2, 3] mean 2.5 idle; m1 [4, 10] mean 7 busy; m2 no utilisation reported;
#          m4 [5, 5] mean exactly 5: not under 5, busy.
# Batch B: m0 + [20] -> (2+3+20)/3 = 8.3 busy (was idle); m1 + six 0s -> 14/8 = 1.75 idle (was
#          busy); m3 [1] new, idle.
# After both: util minutes m0 m1 m3 m4 = 4; idle m1 m3 = 2 (hand-counted).
A = [(0, 2.0), (0, 3.0), (1, 4.0), (1, 10.0), (2, None), (4, 5.0), (4, 5.0)]
B = [(0, 20.0)] + [(1, 0.0)] * 6 + [(3, 1.0)]


def doc(t0: float, samples: list[tuple[int, float | None]]) -> dict:
    d = make_batch(n_per_gpu=len(samples), gpus=(0,), start=t0)
    cols = d["samples"]
    # Distinct seconds inside each minute (the natural key is GPU + timestamp).
    seen: dict[int, int] = {}
    for i, (minute, util) in enumerate(samples):
        k = seen.get(minute, 0) + (30 if samples is B else 0)
        seen[minute] = seen.get(minute, 0) + 1
        cols["ts"][i] = t0 + 60 * minute + k
        cols["util_pct"][i] = util
    return d


def counted_from_minutes(gpu_id: int, hour: dt.datetime) -> tuple[int, int]:
    """Today's definition, over the minute rollups (accounting's minute path)."""
    c = GpuMinute.objects.filter(gpu_id=gpu_id, bucket__gte=hour,
                                 bucket__lt=hour + dt.timedelta(hours=1), util_n__gt=0) \
        .aggregate(n=Count("*"), idle=Count("bucket", filter=Q(
            util_sum__lt=F("util_n") * store.IDLE_UTIL_PCT)))
    return c["n"], c["idle"]


def t0_and_hour() -> tuple[float, dt.datetime]:
    now = dt.datetime.now(dt.UTC)
    hour = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=2)
    return (hour + dt.timedelta(minutes=10)).timestamp(), hour


def check(gpu_id: int, hour: dt.datetime) -> None:
    h = GpuHour.objects.get(gpu_id=gpu_id, bucket=hour)
    assert (h.util_minutes, h.idle_minutes) == (4, 2)
    assert counted_from_minutes(gpu_id, hour) == (4, 2)
    d = GpuDay.objects.get(gpu_id=gpu_id, bucket=hour.replace(hour=0))
    assert (d.util_minutes, d.idle_minutes) == (4, 2)


def test_batches_one_by_one_keep_the_counts_as_minutes_change(team):
    host, _ = make_host(team, "idle-counts", gpus=1)
    t0, hour = t0_and_hour()
    gpus = ingest.known_gpus(host)
    for samples in (A, B, B):  # B twice: a replay changes nothing
        batch = wire.parse_batch(doc(t0, samples), now_s=time.time(), max_samples=10**6,
                                 max_future_s=300, max_age_s=86400 * 2)
        store.store_batch(batch, gpus)
    check(gpus[0], hour)


@pytest.mark.django_db(transaction=True)  # as in the worker: no surrounding test transaction
def test_a_group_commit_keeps_the_counts(team):
    host, _ = make_host(team, "idle-counts-group", gpus=1)
    t0, hour = t0_and_hour()
    ids = []
    for samples in (A, B):
        d = doc(t0, samples)
        IngestBatch.objects.create(id=d["batch_id"], host=host, n_samples=len(samples),
                                   payload=gz(d), gzip_encoded=True)
        ids.append(d["batch_id"])
    ingest.process_pending(ids[0])
    check(ingest.known_gpus(host)[0], hour)


def test_idle_cost_reads_the_hour_counts(team):
    """gpu_usage at the standard threshold over whole hours takes the hour's counts; they equal
    the minute rollups' (4 reported, 2 idle)."""
    from greenops.costs.accounting import gpu_usage

    host, _ = make_host(team, "idle-counts-usage", gpus=1)
    t0, hour = t0_and_hour()
    gpus = ingest.known_gpus(host)
    for samples in (A, B):
        batch = wire.parse_batch(doc(t0, samples), now_s=time.time(), max_samples=10**6,
                                 max_future_s=300, max_age_s=86400 * 2)
        store.store_batch(batch, gpus)
    GpuMinute.objects.filter(gpu_id=gpus[0]).delete()  # only the hour's counts are left
    usage = gpu_usage([host], hour, hour + dt.timedelta(hours=1))
    assert usage[gpus[0]].minutes == {hour: (4, 2)}
    assert usage[gpus[0]].idle_hours() == pytest.approx(2 / 60)
