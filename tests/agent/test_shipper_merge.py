"""The shipper merges a spooled backlog into bigger POSTs, and the server still stores every
original batch's samples exactly once: a resent merge is a duplicate, a merge the server stored
but the agent never saw acknowledged (answer lost, or a crash halfway through the acks) is sent
again in another grouping and stores nothing twice, and a refused merge dead-letters nothing."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db.models import Sum

from collectors import batch as wire
from collectors.shipper import MERGE_NAMESPACE, Shipper
from collectors.sources import Reading
from collectors.spool import Spool
from collectors.transport import Response

try:
    from tests.support.agent_fakes import FakeServer
except ImportError:  # tests/ itself on sys.path
    from agent_fakes import FakeServer


@pytest.fixture
def spool(tmp_path):
    s = Spool(tmp_path / "spool.db")
    yield s
    s.close()


def spool_batches(spool: Spool, k: int, per: int = 4, base: float | None = None,
                  first: int = 0) -> list[str]:
    """k batches of `per` samples over GPUs 0 and 1, one second apart, as the agent spools them
    (collectors.batch); batch b holds seconds base + (first + b) * per ... + per - 1."""
    base = time.time() - 3600 if base is None else base
    ids = []
    for b in range(first, first + k):
        buf = wire.SampleBuffer()
        for j in range(per):
            buf.append(base + b * per + j, j % 2,
                       Reading(50.0, 1.0, 200.0, 1000 * j, 60.0, 1400.0), 200.0, "counter")
        doc = wire.build_batch(buf.columns(), "nvml")
        spool.put(doc["batch_id"], wire.encode(doc), per)
        ids.append(doc["batch_id"])
    return ids


def shipper_for(spool, transport, **kw) -> Shipper:
    return Shipper(spool, transport, None, backoff_base_s=0.001, backoff_cap_s=0.002, **kw)


def run_until_empty(shipper: Shipper, spool: Spool, steps: int = 50) -> None:
    for _ in range(steps):
        if not spool.depth():
            return
        time.sleep(min(shipper.step(), 0.01))  # backoff here is at most 2 ms
    assert spool.depth() == 0


def test_a_backlog_goes_in_one_post_with_every_sample_in_order(spool):
    from collectors.transport import HttpTransport

    ids = spool_batches(spool, 10)
    server = FakeServer().start()
    try:
        shipper = shipper_for(spool, HttpTransport(server.url, "tok", timeout_s=2.0))
        run_until_empty(shipper, spool)
    finally:
        server.stop()
    assert len(server.requests) == 1 and shipper.merged_posts == 1 and shipper.sent_batches == 10
    (doc,) = server.accepted
    assert doc["batch_id"] == str(uuid.uuid5(MERGE_NAMESPACE, "\n".join(ids)))
    keys = server.sample_keys()
    assert len(keys) == len(set(keys)) == 40
    assert [ts for _, ts in keys] == sorted(ts for _, ts in keys)
    assert doc["spool"]["depth"] == 10  # the backlog it was sent from


def test_merges_stop_at_the_sample_cap_and_a_lone_batch_goes_as_it_is(spool):
    from collectors.transport import HttpTransport

    ids = spool_batches(spool, 10)
    server = FakeServer().start()
    try:
        shipper = shipper_for(spool, HttpTransport(server.url, "tok", timeout_s=2.0),
                              merge_max_samples=12)
        run_until_empty(shipper, spool)
    finally:
        server.stop()
    # 4 samples a batch, at most 12 a POST: 3 + 3 + 3 batches merged, then the last one alone
    # under its own id (the spool held nothing else to merge it with).
    assert [len(d["samples"]["ts"]) for d in server.accepted] == [12, 12, 12, 4]
    assert server.accepted[-1]["batch_id"] == ids[-1]
    assert len(set(server.sample_keys())) == 40


def test_a_refused_merge_sends_the_head_alone_and_dead_letters_nothing(spool):
    from collectors.transport import HttpTransport

    ids = spool_batches(spool, 5)
    refusal = (422, {}, {"error": "invalid", "field": "samples.ts", "message": "no"})
    server = FakeServer(script=[refusal]).start()
    try:
        shipper = shipper_for(spool, HttpTransport(server.url, "tok", timeout_s=2.0))
        run_until_empty(shipper, spool)
    finally:
        server.stop()
    sent = [r.doc["batch_id"] for r in server.requests]
    merged_all = str(uuid.uuid5(MERGE_NAMESPACE, "\n".join(ids)))
    merged_rest = str(uuid.uuid5(MERGE_NAMESPACE, "\n".join(ids[1:])))
    assert sent == [merged_all, ids[0], merged_rest]
    assert spool.rejected() == [] and shipper.rejected_batches == 0
    assert len(set(server.sample_keys())) == 20


def test_batches_repeating_a_sample_key_are_not_merged(spool):
    base = time.time() - 3600
    spool_batches(spool, 1, base=base)
    spool_batches(spool, 1, base=base)  # the same (GPU, second) keys: the server refuses that
    spool_batches(spool, 1, base=base, first=1)
    shipper = shipper_for(spool, None)
    assert [len(g) for g in [shipper._mergeable(spool.head())]] == [1]


# --- against the real server ------------------------------------------------------------------


class DjangoTransport:
    """The agent's transport, answered by the Django test client. `lose` answers are dropped
    after the server handled the request (the agent sees a timeout: it cannot know)."""

    server = "django-test-client"
    timeout_s = 5.0

    def __init__(self, client, token: str, lose: int = 0) -> None:
        self.client, self.token, self.lose = client, token, lose
        self.bodies: list[bytes] = []

    def post(self, path: str, body: bytes, gzipped: bool, timeout_s: float | None = None):
        r = self.client.post(path, body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {self.token}",
                             HTTP_CONTENT_ENCODING="gzip" if gzipped else "identity")
        self.bodies.append(body)
        if self.lose:
            self.lose -= 1
            return Response(None, "timed out")
        return Response(r.status_code, r.content.decode())


def store_pending() -> None:
    from greenops.telemetry import ingest
    from greenops.telemetry.models import IngestBatch

    for batch_id in IngestBatch.objects.filter(status="pending").values_list("id", flat=True):
        ingest.process_pending(str(batch_id))


@pytest.fixture
def no_queue(monkeypatch):
    from greenops.telemetry import tasks

    monkeypatch.setattr(tasks.store_batch, "apply_async", lambda *a, **kw: None)


@pytest.mark.django_db(transaction=True)
def test_merged_posts_store_every_sample_once_through_lost_answers_and_crashes(
        team, client, spool, no_queue, monkeypatch):
    from greenops.telemetry.models import GpuMinute, GpuSample, IngestBatch
    from tests.support.factories import make_host

    _, token = make_host(team, name="merging", gpus=2)
    ids = spool_batches(spool, 6, per=8)  # 48 samples
    # 1. The server stores the merge of all six, but its answer is lost: nothing is acked.
    lossy = DjangoTransport(client, token, lose=1)
    shipper_for(spool, lossy).step()
    assert spool.depth() == 6
    # The agent restarts, and has spooled one more batch meanwhile: the next merge holds seven
    # batches under a new id; only the new batch's 8 samples are new to the server.
    spool_batches(spool, 1, per=8, base=time.time() - 3600, first=6)
    # 2. That merge is delivered, but the agent dies after acking three of the seven.
    acked: list[str] = []
    real_ack = spool.ack

    def ack_then_die(batch_id, now=None):
        if len(acked) == 3:
            raise KeyboardInterrupt("SIGKILL")
        acked.append(batch_id)
        return real_ack(batch_id, now)

    monkeypatch.setattr(spool, "ack", ack_then_die)
    time.sleep(0.01)  # past the (at most 2 ms) backoff the lost answer left on the head batch
    with pytest.raises(KeyboardInterrupt):
        shipper_for(spool, DjangoTransport(client, token)).step()
    monkeypatch.setattr(spool, "ack", real_ack)
    assert acked == ids[:3] and spool.depth() == 4
    # 3. The next start merges the four left (another new id): the server has them all.
    transport = DjangoTransport(client, token)
    run_until_empty(shipper_for(spool, transport), spool)
    # 4. And the very first merge's body, resent, is a duplicate.
    r = client.post("/api/v1/samples", lossy.bodies[0], content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 202 and r.json()["status"] == "duplicate"
    store_pending()

    assert GpuSample.objects.count() == 56  # 7 batches x 8, each once
    rows = IngestBatch.objects.order_by("received_at")
    assert [(b.n_samples, b.inserted) for b in rows] == [(48, 48), (56, 8), (32, 0)]
    assert GpuMinute.objects.aggregate(n=Sum("samples"))["n"] == 56  # rollups counted once
