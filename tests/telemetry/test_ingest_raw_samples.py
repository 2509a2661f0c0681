"""Raw samples are stored as sent, nulls included: a GPU without NVML's energy counter keeps a
NULL counter (not 0 mJ), and the first sample of a GPU keeps a NULL energy method.

Found by mutation testing (tests/mutation/SURVIVORS.md): no test read the raw columns back, so
the null masks of the PostgreSQL COPY stream could be dropped or inverted unnoticed. The raw
samples are what an audit of a figure goes back to.
"""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection

from greenops.telemetry import ingest
from greenops.telemetry.models import EnergyMethod, GpuMinute, GpuSample, IngestBatch
from tests.support.factories import gz, make_batch


@pytest.mark.django_db
def test_raw_columns_keep_their_nulls_and_methods(host, post_batch):
    h, token = host
    doc = make_batch(n_per_gpu=3)  # GPU 0 then GPU 1, 3 samples each, 1 s apart
    cols = doc["samples"]
    # GPU 1 has no energy counter (pre-Volta): energy_mj null, energy from integrated power.
    for i in range(3, 6):
        cols["energy_mj"][i] = None
        if cols["energy_method"][i] is not None:
            cols["energy_method"][i] = "power"
    assert post_batch(token, doc).status_code == 202
    rows = {(s.gpu.index, round(s.ts.timestamp() - cols["ts"][0])): s
            for s in GpuSample.objects.filter(gpu__host=h).select_related("gpu")}
    assert len(rows) == 6
    # GPU 0: counter 1,000,000 mJ then + 200 W x 1 s per step (make_batch); methods None (first
    # sample: no interval), then "counter".
    assert [rows[0, i].energy_mj for i in range(3)] == [1_000_000, 1_200_000, 1_400_000]
    assert [rows[0, i].energy_method for i in range(3)] == [
        None, EnergyMethod.COUNTER, EnergyMethod.COUNTER]
    assert [rows[0, i].energy_j for i in range(3)] == [None, 200.0, 200.0]
    # GPU 1: no counter at all -- NULL, never 0 mJ -- and "power" after its first sample.
    assert [rows[1, i].energy_mj for i in range(3)] == [None, None, None]
    assert [rows[1, i].energy_method for i in range(3)] == [
        None, EnergyMethod.POWER, EnergyMethod.POWER]
    assert [rows[1, i].energy_j for i in range(3)] == [None, 210.0, 210.0]
    assert all(rows[k].util_pct == 50.0 + k[0] and rows[k].temp_c == 60.0 for k in rows)


@pytest.mark.django_db
def test_throttle_reasons_are_stored_as_sent_nulls_included(host, post_batch):
    """The throttle-reason bitmask column reaches the raw rows bit for bit -- 0 (not
    throttled), a single reason, unknown (null) and the highest mask the format allows -- and a
    batch without the column stores unknown, not 0. Found by session.py's run of store
    (issue 16): no test read the stored column back."""
    h, token = host
    doc = make_batch(n_per_gpu=2)  # GPU 0 then GPU 1, 2 samples each
    doc["samples"]["throttle_reasons"] = [0, 4, None, 2**32 - 1]
    assert post_batch(token, doc).status_code == 202
    later = make_batch(n_per_gpu=1, start=doc["samples"]["ts"][-1] + 10)
    assert "throttle_reasons" not in later["samples"]
    assert post_batch(token, later).status_code == 202
    rows = sorted(GpuSample.objects.filter(gpu__host=h).select_related("gpu"),
                  key=lambda s: (s.ts, s.gpu.index))
    assert [(s.gpu.index, s.throttle_reasons) for s in rows] == [
        (0, 0), (1, None), (0, 4), (1, 2**32 - 1), (0, None), (1, None)]


@pytest.mark.django_db(transaction=True)  # as in the worker: the group's stage empties at commit
def test_a_group_mixing_batches_with_and_without_a_column_stores_nulls_for_the_second(host):
    """One group commit, two batches of one host: the first reports memory utilisation (a
    DCGM-era agent), the second does not. The second's samples keep NULL there, not 0 %, and the
    minute's mean is over the first's two samples only."""
    if connection.vendor != "postgresql":
        pytest.skip("group commit is the PostgreSQL path")
    h, _ = host
    t0 = float(int(time.time()) // 60 * 60 - 120)  # a whole minute, two minutes ago
    with_col = make_batch(n_per_gpu=2, start=t0)
    with_col["samples"]["mem_util_pct"] = [30.0, 31.0, 40.0, 41.0]  # GPU 0 x2, GPU 1 x2
    without = make_batch(n_per_gpu=2, start=t0 + 2)
    for doc in (with_col, without):
        IngestBatch.objects.create(id=doc["batch_id"], host=h, n_samples=4, payload=gz(doc),
                                   gzip_encoded=True)

    assert ingest.process_pending(with_col["batch_id"]) == 4
    assert set(IngestBatch.objects.values_list("inserted", flat=True)) == {4}
    raw = {(s.gpu.index, int(s.ts.timestamp() - t0)): s.mem_util_pct
           for s in GpuSample.objects.filter(gpu__host=h).select_related("gpu")}
    assert raw == {(0, 0): 30.0, (0, 1): 31.0, (1, 0): 40.0, (1, 1): 41.0,
                   (0, 2): None, (0, 3): None, (1, 2): None, (1, 3): None}
    minute = GpuMinute.objects.get(gpu__host=h, gpu__index=0)
    assert (minute.samples, minute.mem_util_sum, minute.mem_util_n) == (4, 61.0, 2)


@pytest.mark.django_db
def test_a_batch_overlapping_stored_samples_is_credited_only_its_new_ones(host, post_batch):
    """A resend that overlaps: batch B repeats the last two seconds of A and adds two more, per
    GPU. Its IngestBatch row is credited 2 x 2 = 4 new samples (the crediting join's count for
    the group's first and only batch), the raw table holds each (gpu, ts) once."""
    h, token = host
    t0 = float(int(time.time()) - 120)
    a = make_batch(n_per_gpu=4, start=t0)  # t0 .. t0+3
    b = make_batch(n_per_gpu=4, start=t0 + 2)  # t0+2 .. t0+5: two repeated, two new per GPU
    assert post_batch(token, a).status_code == 202
    assert post_batch(token, b).status_code == 202
    credited = dict(IngestBatch.objects.values_list("id", "inserted"))
    assert credited[uuid.UUID(a["batch_id"])] == 8
    assert credited[uuid.UUID(b["batch_id"])] == 4
    assert GpuSample.objects.filter(gpu__host=h).count() == 12


@pytest.mark.django_db(transaction=True)
def test_store_batch_on_a_fresh_connection_creates_its_own_stage(host):
    """store_batch on a connection that never staged (no prepare_session before, inside a
    transaction as the worker's): it creates the staging table itself and stores the batch."""
    if connection.vendor != "postgresql":
        pytest.skip("the COPY stage is the PostgreSQL path")
    from django.db import transaction

    from greenops.telemetry import store

    h, _ = host
    doc = make_batch(n_per_gpu=3, start=float(int(time.time()) // 60 * 60 - 120))
    batch = ingest._parse_stored(doc)
    connection.close()  # a new connection: no staging table, not in store's staged set
    with transaction.atomic():
        assert store.store_batch(batch, ingest.known_gpus(h)) == 6
    assert GpuSample.objects.filter(gpu__host=h).count() == 6


@pytest.mark.django_db
@pytest.mark.parametrize("binary", [False, True])
def test_server_bound_cursor_reads_the_same_values_in_text_and_binary(binary):
    """The ingest path's server-bound cursor, and its binary-result form the team page reads
    its stored fleet buckets with (bytea, arrays): the same Python values either way."""
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's server-side binding is the PostgreSQL path")
    from greenops.telemetry import store

    with store.server_bound_cursor(binary=binary) as cursor:
        cursor.execute("SELECT %s::bytea, %s::int[], %s::double precision",
                       [b"\x00\xff", [1, 2, 3], 1.5])
        assert cursor.fetchall() == [(b"\x00\xff", [1, 2, 3], 1.5)]
