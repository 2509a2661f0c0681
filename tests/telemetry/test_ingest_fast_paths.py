"""The shortcuts the ingest benchmark led to keep the behaviour of the slow paths: duplicate keys
are still caught in any sample order, a busy host's row is still kept current where it matters,
and a worker that reuses its database connection across batches still stores every batch."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from greenops.errors import FieldError
from greenops.telemetry import ingest, wire
from greenops.telemetry.models import GpuHour, GpuSample, Host, IngestBatch
from tests.support.factories import gz, make_batch, make_host


def parse(doc):
    return wire.parse_batch(doc, now_s=time.time(), max_samples=10_000, max_future_s=300,
                            max_age_s=86400)


def tick_major(doc):
    """Reorder a make_batch document to the agent's order: every GPU once per tick."""
    cols = doc["samples"]
    order = sorted(range(len(cols["ts"])), key=lambda i: (cols["ts"][i], cols["gpu_index"][i]))
    doc["samples"] = {k: [v[i] for i in order] for k, v in cols.items()}
    return doc


@pytest.mark.parametrize("reorder", [lambda d: d, tick_major], ids=["gpu-major", "tick-major"])
def test_duplicate_key_is_rejected_in_either_order(reorder):
    doc = reorder(make_batch(n_per_gpu=4, gpus=(0, 1)))
    assert parse(doc).n == 8
    cols = doc["samples"]
    # Make sample 5 a second reading of sample 1's GPU at sample 1's instant.
    cols["gpu_index"][5], cols["ts"][5] = cols["gpu_index"][1], cols["ts"][1]
    with pytest.raises(FieldError) as err:
        parse(doc)
    assert err.value.field == "samples.ts" and "share a timestamp" in err.value.message


def test_same_instant_on_different_gpus_is_fine():
    doc = tick_major(make_batch(n_per_gpu=3, gpus=(0, 1, 2)))
    batch = parse(doc)
    assert batch.n == 9 and len(set(batch.ts_us.tolist())) == 3


def test_unknown_energy_method_still_names_the_element():
    doc = make_batch(n_per_gpu=3)
    doc["samples"]["energy_method"][4] = "guess"
    with pytest.raises(FieldError) as err:
        parse(doc)
    assert err.value.field == "samples.energy_method[4]"


@pytest.mark.django_db
def test_last_seen_is_written_at_most_every_few_seconds(host, post_batch):
    h, token = host
    assert post_batch(token, make_batch(n_per_gpu=2)).status_code == 202
    h.refresh_from_db()
    first = h.last_seen
    assert first is not None
    assert post_batch(token, make_batch(n_per_gpu=2, start=time.time() - 60)).status_code == 202
    h.refresh_from_db()
    assert h.last_seen == first  # within LAST_SEEN_RESOLUTION_S: no second write
    # A stale last_seen, or a new agent version, is written at once.
    Host.objects.filter(id=h.id).update(
        last_seen=timezone.now() - dt.timedelta(seconds=ingest.LAST_SEEN_RESOLUTION_S + 1)
    )
    assert post_batch(token, make_batch(n_per_gpu=2, start=time.time() - 120)).status_code == 202
    h.refresh_from_db()
    assert (timezone.now() - h.last_seen).total_seconds() < ingest.LAST_SEEN_RESOLUTION_S
    doc = make_batch(n_per_gpu=2, start=time.time() - 180, agent_version="0.2.0")
    assert post_batch(token, doc).status_code == 202
    h.refresh_from_db()
    assert h.agent_version == "0.2.0"


@pytest.mark.django_db(transaction=True)
def test_worker_reusing_its_connection_stores_every_batch(team):
    """Outside a test transaction, as in the worker: the staging table is created once per
    connection and later batches skip the CREATE."""
    from greenops.telemetry import store

    host, _ = make_host(team, name="reuse", gpus=2)
    ids = []
    for k in range(3):
        doc = make_batch(n_per_gpu=5, start=time.time() - 600 + 60 * k)
        IngestBatch.objects.create(id=doc["batch_id"], host=host, n_samples=10,
                                   payload=gz(doc), gzip_encoded=True)
        ids.append(doc["batch_id"])
    assert ingest.process_batch(ids[0]) == 10
    from django.db import connection

    assert connection.connection in store._staged_connections
    assert ingest.process_batch(ids[1]) == 10
    assert ingest.process_batch(ids[2]) == 10
    assert ingest.process_batch(ids[2]) is None  # done already
    assert GpuSample.objects.filter(gpu__host=host).count() == 30
    assert sum(GpuHour.objects.filter(gpu__host=host).values_list("samples", flat=True)) == 30
