"""Storage over time on real PostgreSQL: partitions created ahead by beat, a sample for a period
without a partition stored once (default partition, then its own), retention dropping whole
expired partitions while the rollups kept forever stay what they were, refusing to drop data
that is not rolled up, and a replay after a drop storing nothing.

Samples are written with tests.conftest.make_batch: per GPU, n samples one second apart, GPU g
at util 50+g %, power 200+10g W, energy_j None for the first sample then 1 s x power. So a
5-sample batch gives GPU 0: 5 samples, power_sum 1000 W, energy 4 x 200 = 800 J, and GPU 1:
power_sum 1050 W, energy 4 x 210 = 840 J, util_sum 250 / 255 -- the hand-computed figures the
rollups are checked against.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from greenops.telemetry import ingest, partitions, store, wire
from greenops.telemetry.models import GpuDay, GpuHour, GpuSample, IngestBatch, RetentionMark
from tests.support.factories import gz, make_batch

pytestmark = pytest.mark.django_db

INF = float("inf")
# Per GPU index, for one 5-sample batch (see the module docstring).
HAND = {0: {"samples": 5, "power_sum_w": 1000.0, "energy_j": 800.0, "util_sum": 250.0},
        1: {"samples": 5, "power_sum_w": 1050.0, "energy_j": 840.0, "util_sum": 255.0}}


def day(now: dt.datetime, k: int) -> dt.datetime:
    """Midnight UTC k days before now's day."""
    return now.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=k)


def store_at(h, start: dt.datetime, n: int = 5, doc: dict | None = None) -> int:
    doc = doc or make_batch(n_per_gpu=n, start=start.timestamp())
    batch = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6, max_future_s=INF,
                             max_age_s=INF)
    stored = store.store_batch(batch, ingest.known_gpus(h))
    # The staging table empties at commit (ON COMMIT DELETE ROWS); a test never commits.
    with connection.cursor() as c:
        c.execute("DELETE FROM gpusample_stage")
    return stored


def where(gpu_ts_filter: str = "") -> list[tuple[str, int]]:
    """(partition, rows) of the raw samples table."""
    with connection.cursor() as c:
        c.execute("SELECT tableoid::regclass::text, count(*) FROM telemetry_gpusample "
                  f"{gpu_ts_filter} GROUP BY 1 ORDER BY 1")
        return c.fetchall()


def day_rollups(h) -> dict:
    return {(r.gpu.index, r.bucket): (r.samples, r.power_sum_w, r.energy_j, r.util_sum)
            for r in GpuDay.objects.filter(gpu__host=h).select_related("gpu")}


def hand_days(*days: dt.datetime) -> dict:
    return {(g, d): (v["samples"], v["power_sum_w"], v["energy_j"], v["util_sum"])
            for d in days for g, v in HAND.items()}


def test_the_tables_are_partitioned_with_a_default_and_keys_carry_gpu_id():
    for spec in partitions.SPECS:
        assert partitions.is_partitioned(spec.table)
        with connection.cursor() as c:
            c.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                      "WHERE conrelid = %s::regclass AND contype IN ('p', 'u')", [spec.table])
            keys = [r[0] for r in c.fetchall()]
        # Citus: every unique key holds the distribution column (gpu_id) and the partition key.
        assert keys == [f"PRIMARY KEY (gpu_id, {spec.column})"]
        c = connection.cursor()
        c.execute("SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid "
                  "WHERE p.relname = %s AND p.relispartition", [spec.default])
        assert c.fetchone()


def test_beat_creates_partitions_ahead_and_again_nothing(settings):
    from greenops.telemetry import tasks

    settings.PARTITIONS_AHEAD_DAYS = 3
    now = dt.datetime(2027, 3, 10, 15, 0, tzinfo=dt.UTC)  # a Wednesday
    created = partitions.create_ahead(now)
    # Days 10..13 March (today and the next 3); weeks from Monday 8 March (13 March is in it).
    assert created == {
        "telemetry_gpusample": [f"telemetry_gpusample_p202703{d}" for d in (10, 11, 12, 13)],
        "telemetry_gpuminute": ["telemetry_gpuminute_p20270308"],
    }
    names = {lo: (name, hi) for name, lo, hi in partitions.partitions(partitions.RAW)}
    assert names[dt.datetime(2027, 3, 13, tzinfo=dt.UTC)] == (
        "telemetry_gpusample_p20270313", dt.datetime(2027, 3, 14, tzinfo=dt.UTC))
    assert partitions.create_ahead(now) == {}
    # The beat task runs the same thing (for the real clock) under its single-flight lock.
    tasks.create_partitions.apply()
    today = partitions.RAW.name(partitions.RAW.floor(timezone.now()))
    assert today in {n for n, _, _ in partitions.partitions(partitions.RAW)}


def _bucket_indexed(table: str) -> bool:
    with connection.cursor() as c:
        c.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return any(d.endswith("(bucket)") for (d,) in c.fetchall())


def test_every_rollup_and_each_new_minute_partition_is_indexed_on_bucket(settings):
    """The team page's live tail reads the newest buckets of every GPU bucket-first: the index
    must be on each rollup table and on each partition beat creates later."""
    for table in ("telemetry_gpuminute", "telemetry_gpuhour", "telemetry_gpuday"):
        assert _bucket_indexed(table), table
    settings.PARTITIONS_AHEAD_DAYS = 0
    created = partitions.create_ahead(dt.datetime(2027, 6, 2, tzinfo=dt.UTC))
    [week] = created["telemetry_gpuminute"]
    assert _bucket_indexed(week)


def test_a_sample_for_a_day_without_partition_is_stored_once_then_moved(host):
    h, _ = host
    now = timezone.now()
    # The partitions ahead as of now: the migration made them when the test database was
    # created, which for a suite that crosses midnight UTC was the day before.
    partitions.create_ahead(now)
    d = day(now, 20)  # older than any partition the migration made on this empty database
    doc = make_batch(n_per_gpu=5, start=(d + dt.timedelta(hours=12)).timestamp())
    assert store_at(h, d, doc=doc) == 10
    assert where() == [("telemetry_gpusample_default", 10)]
    assert store_at(h, d, doc=doc) == 0  # a replay: the default partition has the key too
    assert partitions.create_ahead(now)["telemetry_gpusample"] == [partitions.RAW.name(d)]
    assert where() == [(partitions.RAW.name(d), 10)]
    assert store_at(h, d, doc=doc) == 0  # and so has the partition they moved to
    assert GpuSample.objects.filter(gpu__host=h).count() == 10
    assert day_rollups(h) == hand_days(d)


def _three_days(h, now):
    days = [day(now, 5), day(now, 4), day(now, 1)]
    docs = [make_batch(n_per_gpu=5, start=(d + dt.timedelta(hours=12)).timestamp())
            for d in days]
    for d, doc in zip(days, docs, strict=True):
        assert store_at(h, d, doc=doc) == 10
    partitions.create_ahead(now)
    return days, docs


def test_retention_drops_exactly_the_expired_days_and_keeps_the_rollups(host, settings):
    h, _ = host
    settings.RETAIN_RAW_SAMPLES_DAYS = 2
    settings.RETAIN_MINUTE_ROLLUPS_WEEKS = 0  # kept: this test is about raw days
    now = timezone.now()
    days, docs = _three_days(h, now)
    hours_before = sorted(GpuHour.objects.filter(gpu__host=h).values_list(
        "gpu_id", "bucket", "samples", "power_sum_w", "energy_j"))
    assert day_rollups(h) == hand_days(*days)

    report = partitions.apply_retention(now)
    # Days 5 and 4 back end at least 2 days ago; yesterday does not; today's is empty anyway.
    assert report["telemetry_gpusample"] == {
        "dropped": [partitions.RAW.name(days[0]), partitions.RAW.name(days[1])], "refused": ""}
    assert "telemetry_gpuminute" not in report
    assert where() == [(partitions.RAW.name(days[2]), 10)]
    assert day_rollups(h) == hand_days(*days)  # the rollups kept forever did not move
    assert sorted(GpuHour.objects.filter(gpu__host=h).values_list(
        "gpu_id", "bucket", "samples", "power_sum_w", "energy_j")) == hours_before
    mark = RetentionMark.objects.get(table_name="telemetry_gpusample")
    assert mark.dropped_before == days[2] - dt.timedelta(days=2)  # the end of day 4 back
    assert mark.status == "ok, dropped 2"

    # Replay after the drop: nothing comes back, nothing is counted twice -- the same batch,
    # and a sample of the dropped day that was never sent before.
    assert store_at(h, days[0], doc=docs[0]) == 0
    assert store_at(h, days[1] + dt.timedelta(hours=3)) == 0
    assert where() == [(partitions.RAW.name(days[2]), 10)]
    assert day_rollups(h) == hand_days(*days)
    # A second run drops nothing more and creates nothing under the horizon.
    assert partitions.apply_retention(now)["telemetry_gpusample"]["dropped"] == []
    assert partitions.RAW.name(days[0]) not in str(partitions.create_ahead(now))


def test_retention_refuses_data_not_rolled_up(host, settings, caplog):
    h, _ = host
    settings.RETAIN_RAW_SAMPLES_DAYS = 2
    settings.RETAIN_MINUTE_ROLLUPS_WEEKS = 0
    now = timezone.now()
    days, _ = _three_days(h, now)
    gpu0 = h.gpus.get(index=0).id
    # A raw row written behind the rollups' back (no GpuDay change): 6 raw samples on GPU 0 of
    # the oldest day against 5 in its day rollup.
    with connection.cursor() as c:
        c.execute("INSERT INTO telemetry_gpusample (gpu_id, ts, simulated) VALUES (%s, %s, false)",
                  [gpu0, days[0] + dt.timedelta(hours=20)])
    report = partitions.apply_retention(now)["telemetry_gpusample"]
    assert report["dropped"] == []
    assert report["refused"] == (f"{partitions.RAW.name(days[0])}: 1 GPUs' sample counts "
                                 "differ from their day rollups (not rolled up)")
    assert "not dropping" in caplog.text
    assert RetentionMark.objects.get(table_name="telemetry_gpusample").status.startswith(
        "refused: ")
    # Stopped at the first: the next day was not dropped either, and no horizon moved.
    assert len(where()) == 3 and partitions.horizon(partitions.RAW) is None


def test_retention_waits_for_accepted_batches_of_the_period(host, settings):
    h, _ = host
    settings.RETAIN_RAW_SAMPLES_DAYS = 2
    settings.RETAIN_MINUTE_ROLLUPS_WEEKS = 0
    now = timezone.now()
    days, _ = _three_days(h, now)
    # Accepted (durable, 202) but not stored yet: its samples are of the oldest day.
    late_doc = make_batch(n_per_gpu=3, start=(days[0] + dt.timedelta(hours=18)).timestamp())
    ingest.accept_batch(h, gz(late_doc), "gzip")
    assert IngestBatch.objects.filter(status="pending").count() == 1
    report = partitions.apply_retention(now)["telemetry_gpusample"]
    assert report == {"dropped": [], "refused": f"{partitions.RAW.name(days[0])}: an accepted "
                      "batch not stored yet holds samples of this period"}
    # Once the worker stored it (and rolled it up), the drop goes ahead.
    ingest.process_batch(str(late_doc["batch_id"]))
    assert partitions.apply_retention(now)["telemetry_gpusample"]["dropped"] == [
        partitions.RAW.name(days[0]), partitions.RAW.name(days[1])]
    rolled = day_rollups(h)
    assert rolled[0, days[0]][0] == 5 + 3 and rolled[1, days[0]][0] == 5 + 3


def test_minute_weeks_wait_for_kpi_hours_to_rebuild(host, settings):
    from greenops.telemetry.models import GpuMinute, LateHour

    h, _ = host
    settings.RETAIN_RAW_SAMPLES_DAYS = 0
    settings.RETAIN_MINUTE_ROLLUPS_WEEKS = 1
    now = timezone.now()
    old = day(now, 21)  # three weeks back: its ISO week ended more than a week ago
    store_at(h, old + dt.timedelta(hours=12))
    partitions.create_ahead(now)
    week = partitions.MINUTE.name(partitions.MINUTE.floor(old))
    LateHour.objects.create(team=h.team, hour=old + dt.timedelta(hours=12))
    report = partitions.apply_retention(now)["telemetry_gpuminute"]
    assert report["refused"] == (f"{week}: KPI hours of this period still wait to be rebuilt "
                                 "from minute rollups")
    LateHour.objects.all().delete()
    assert partitions.apply_retention(now)["telemetry_gpuminute"]["dropped"] == [week]
    assert not GpuMinute.objects.filter(gpu__host=h).exists()
    assert day_rollups(h) == hand_days(old)


def test_a_bulk_load_of_history_gets_its_partitions_first():
    start = dt.datetime(2027, 5, 1, 6, 0, tzinfo=dt.UTC)  # a Saturday
    created = partitions.create_range(start, start + dt.timedelta(days=2))
    assert created == {
        "telemetry_gpusample": [f"telemetry_gpusample_p2027050{d}" for d in (1, 2, 3)],
        # Monday 26 April holds 1-2 May; Monday 3 May holds the 3rd.
        "telemetry_gpuminute": ["telemetry_gpuminute_p20270426", "telemetry_gpuminute_p20270503"],
    }


def test_the_group_commit_path_stores_a_day_without_partition_once(host):
    """The worker's path (several pending batches in one COPY and one INSERT ... ON CONFLICT)
    into the default partition: a batch sent twice, and one overlapping it, count once."""
    h, _ = host
    d = day(timezone.now(), 12)
    first = make_batch(n_per_gpu=5, start=(d + dt.timedelta(hours=6)).timestamp())
    resent = {**first, "batch_id": "6f1d5c1e-0000-4000-8000-000000000001"}  # a new id, same data
    for doc in (first, resent):
        ingest.accept_batch(h, gz(doc), "gzip")
    assert ingest.process_pending(first["batch_id"]) == 10
    assert dict(IngestBatch.objects.values_list("id", "inserted")) == {
        uuid.UUID(first["batch_id"]): 10,
        uuid.UUID(resent["batch_id"]): 0}
    assert where() == [("telemetry_gpusample_default", 10)]
    assert day_rollups(h) == hand_days(d)


def test_a_raw_retention_shorter_than_the_intake_age_is_warned(settings):
    from django.core.checks import run_checks

    settings.RETAIN_RAW_SAMPLES_DAYS, settings.INGEST_MAX_AGE_S = 35, 30 * 86400
    assert not [w for w in run_checks() if w.id == "greenops.W101"]
    settings.RETAIN_RAW_SAMPLES_DAYS = 7
    (warning,) = [w for w in run_checks() if w.id == "greenops.W101"]
    assert warning.msg == "GREENOPS_RETAIN_RAW_DAYS=7 is shorter than INGEST_MAX_AGE_S (30 days)"
