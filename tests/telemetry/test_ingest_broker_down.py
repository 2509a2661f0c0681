"""The broker (Redis) unreachable while a host sends (issue 30 item 1): the batch is already
durable in PostgreSQL, the answer is 503 with Retry-After, so the agent keeps it in its spool,
and the resend after Retry-After is answered "duplicate" (202): nothing is lost, nothing is
stored twice, and the stored batch is processed once the broker is back."""

from __future__ import annotations

import kombu.exceptions
import orjson
import pytest

from greenops.telemetry import ingest, tasks
from greenops.telemetry.models import GpuSample, IngestBatch
from tests.support.factories import gz, make_batch, make_host

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit runs as in production


def post(client, token, doc):
    return client.post("/api/v1/samples", gz(doc), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_CONTENT_ENCODING="gzip")


def test_broker_down_is_503_with_retry_after_and_the_resend_is_a_duplicate(client, team,
                                                                             monkeypatch):
    _host, token = make_host(team)
    doc = make_batch(n_per_gpu=5)  # 2 GPUs x 5 samples

    def refused(*args, **kwargs):
        raise kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379")

    monkeypatch.setattr(tasks.store_batch, "apply_async", refused)
    r = post(client, token, doc)
    assert r.status_code == 503, r.content
    assert r["Retry-After"] == str(ingest.BROKER_DOWN_RETRY_AFTER_S)
    body = orjson.loads(r.content)
    assert body["error"] == "unavailable" and "Retry-After" in body["message"]
    # Durable although refused: the batch waits for beat's catch-up, no sample stored yet.
    row = IngestBatch.objects.get(id=doc["batch_id"])
    assert row.status == IngestBatch.Status.PENDING and GpuSample.objects.count() == 0

    monkeypatch.undo()  # the broker is back
    again = post(client, token, doc)
    assert again.status_code == 202
    assert orjson.loads(again.content)["status"] == "duplicate"
    ingest.process_batch(doc["batch_id"])  # what the catch-up's task does
    assert GpuSample.objects.count() == 10
    assert post(client, token, doc).status_code == 202  # and a third copy stores nothing more
    assert GpuSample.objects.count() == 10


def test_other_queueing_trouble_keeps_the_202(client, team, monkeypatch):
    """Only an unreachable broker is a 503: any other failure to queue is logged and the
    stored batch is answered as accepted (beat's catch-up stores it)."""
    _host, token = make_host(team)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in a task router")

    monkeypatch.setattr(tasks.store_batch, "apply_async", broken)
    assert post(client, token, make_batch(n_per_gpu=2)).status_code == 202
