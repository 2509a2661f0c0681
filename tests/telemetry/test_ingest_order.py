"""The batch row exists before its task is queued: a batch posted outside any transaction, with
tasks run eagerly, reaches "done" by itself.

The other ingest tests run inside a test transaction and hold on-commit callbacks back until
the request has returned, which hides the order of "insert the row" and "queue the task": a
task queued first would find no row, do nothing, and leave the batch pending for the beat
catch-up a minute later (and a real worker racing the web process does exactly that). Here the
database autocommits, as in production, and the eager task runs the moment it is queued.
"""

from __future__ import annotations

import pytest
from django.db import connection

from greenops.telemetry.models import GpuMinute, GpuSample, IngestBatch
from tests.support.factories import gz, make_batch


@pytest.mark.django_db(transaction=True)
def test_batch_posted_in_autocommit_is_done_without_the_catch_up(host, client, settings):
    from greenops.celery import app

    # Eager tasks: the task runs inside .delay(), right where the web process queues it.
    assert app.conf.task_always_eager
    assert not connection.in_atomic_block  # no test transaction around the request
    _, token = host
    doc = make_batch(n_per_gpu=4)
    r = client.post("/api/v1/samples", gz(doc), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 202, r.content
    batch = IngestBatch.objects.get(id=doc["batch_id"])
    # Nothing else ran: no beat, no captured callbacks. The request alone stored the batch.
    assert batch.status == IngestBatch.Status.DONE, batch.status
    assert batch.inserted == 8 and GpuSample.objects.count() == 8  # 4 samples x 2 GPUs
    assert sum(GpuMinute.objects.values_list("samples", flat=True)) == 8
