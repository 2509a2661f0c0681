"""Beat creating a partition while a worker stores samples of that very period (committed
transactions, two connections): the rows the default partition held move into the new partition,
rows stored meanwhile go to one or the other, and every sample is there once."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection, connections
from django.utils import timezone

from greenops.telemetry import ingest, partitions, store, wire
from tests.support.factories import make_batch

pytestmark = pytest.mark.django_db(transaction=True)


def test_creating_a_partition_during_ingest_of_its_period_loses_and_doubles_nothing(host):
    h, _ = host
    gpu_ids = ingest.known_gpus(h)
    d = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=9)
    n_batches, per_gpu = 40, 30  # 40 batches x 2 GPUs x 30 samples, one second apart, no overlap
    errors: list[BaseException] = []
    created: list[dict] = []

    def write() -> None:
        try:
            for i in range(n_batches):
                doc = make_batch(n_per_gpu=per_gpu,
                                 start=(d + dt.timedelta(hours=1, minutes=i)).timestamp())
                batch = wire.parse_batch(doc, now_s=time.time(), max_samples=10**6,
                                         max_future_s=1e12, max_age_s=1e12)
                assert store.store_batch(batch, gpu_ids) == 2 * per_gpu
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    # Let some rows reach the default partition first, then create the period's partition.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with connection.cursor() as c:
            c.execute("SELECT count(*) FROM telemetry_gpusample_default")
            if c.fetchone()[0] >= 5 * 2 * per_gpu:
                break
        time.sleep(0.05)
    created.append(partitions.create_ahead())
    writer.join(60)
    assert not errors, errors
    assert partitions.RAW.name(d) in created[0]["telemetry_gpusample"]
    partitions.create_ahead()  # rows a batch put in the default after the move, if any
    with connection.cursor() as c:
        c.execute("SELECT tableoid::regclass::text, count(*), count(DISTINCT (gpu_id, ts)) "
                  "FROM telemetry_gpusample GROUP BY 1")
        rows = c.fetchall()
        c.execute("SELECT sum(samples) FROM telemetry_gpuday")
        rolled = c.fetchone()[0]
    total = n_batches * 2 * per_gpu
    assert rows == [(partitions.RAW.name(d), total, total)]
    assert rolled == total
