"""Group commit (the worker stores every pending batch it can claim in one transaction, one COPY
and one INSERT) keeps the single-batch guarantees: every sample stored once, a replay credited
nothing, per-batch `inserted` counts exact, rollups equal sums of raw samples, a batch that can
no longer be stored fails alone, and a batch whose group already stored it is a no-op."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection
from django.db.models import Sum

from greenops.telemetry import ingest
from greenops.telemetry.models import Gpu, GpuMinute, GpuSample, IngestBatch
from tests.conftest import gz, make_batch, make_host

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="group commit is the PostgreSQL path")


def pend(host, doc) -> str:
    n = len(doc["samples"]["ts"])
    IngestBatch.objects.create(id=doc["batch_id"], host=host, n_samples=n, payload=gz(doc),
                               gzip_encoded=True)
    return doc["batch_id"]


@pytest.mark.django_db(transaction=True)  # as in the worker: no surrounding test transaction
def test_one_task_stores_every_pending_batch_once(team):
    host, _ = make_host(team, name="group", gpus=2)
    other, _ = make_host(team, name="group-2", gpus=1)
    t0 = float(int(time.time()) - 600)
    a = make_batch(n_per_gpu=5, start=t0)  # 5 s x 2 GPUs = 10 new samples
    replay = dict(a, batch_id=make_batch()["batch_id"])  # A's samples under a new id: 0 new
    # 5 per GPU from t0+3: t0+3 and t0+4 are A's, t0+5..t0+7 new => 3 x 2 GPUs = 6 new.
    overlap = make_batch(n_per_gpu=5, start=t0 + 3)
    c = make_batch(n_per_gpu=4, gpus=(0,), start=t0)  # another host: 4 new
    ids = [pend(host, a), pend(host, replay), pend(host, overlap), pend(other, c)]

    assert ingest.process_pending(ids[2]) == 6  # its own batch's count comes back

    credited = dict(IngestBatch.objects.values_list("id", "inserted"))
    assert [credited[uuid.UUID(i)] for i in ids] == [10, 0, 6, 4]
    assert set(IngestBatch.objects.values_list("status", flat=True)) == {"done"}
    assert GpuSample.objects.count() == 10 + 6 + 4 == 20
    # Rollups saw each stored sample once: 20 samples, and per-minute sums equal raw sums.
    assert GpuMinute.objects.aggregate(s=Sum("samples"))["s"] == 20
    raw_energy = GpuSample.objects.aggregate(e=Sum("energy_j"))["e"]
    assert GpuMinute.objects.aggregate(e=Sum("energy_j"))["e"] == pytest.approx(raw_energy)
    # The other batches' messages arrive later: their group stored them, nothing to do.
    for batch_id in ids:
        assert ingest.process_pending(batch_id) is None
    assert GpuSample.objects.count() == 20


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_cannot_be_stored_fails_alone(team):
    host, _ = make_host(team, name="group-fail", gpus=2)
    t0 = float(int(time.time()) - 600)
    good = pend(host, make_batch(n_per_gpu=3, gpus=(0,), start=t0))
    gone = pend(host, make_batch(n_per_gpu=3, gpus=(1,), start=t0))
    Gpu.objects.filter(host=host, index=1).delete()  # removed between acceptance and storage

    assert ingest.process_pending(gone) == 0
    rows = {str(b.id): b for b in IngestBatch.objects.all()}
    assert (rows[good].status, rows[good].inserted) == ("done", 3)
    assert rows[gone].status == "failed" and "GPU 1 is not registered" in rows[gone].error
    assert GpuSample.objects.count() == 3
