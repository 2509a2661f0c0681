"""The agent's HTTP transport keeps one connection to the server and reopens it on trouble,
without ever losing or doubling a batch (a real local HTTP/1.1 server; no mocks)."""

import gzip
import json
import threading
import time

import pytest

from collectors import batch as wire
from collectors.shipper import Shipper
from collectors.sources import Reading
from collectors.spool import Spool
from collectors.transport import DELIVERED, RETRY, HttpTransport

try:
    from tests.support.agent_fakes import FakeServer, free_port
except ImportError:  # tests/ itself on sys.path (pytest's rootdir-less import mode)
    from agent_fakes import FakeServer, free_port


def batch_body(b: int, per: int = 4) -> tuple[str, bytes]:
    """A gzip batch in the wire format: ``per`` samples at distinct seconds (batch b)."""
    buf = wire.SampleBuffer()
    for j in range(per):
        buf.append(1_764_480_000.0 + b * per + j, j % 2,
                   Reading(50.0, 1.0, 200.0, 1000 * j, 60.0, 1400.0), 200.0, "counter")
    doc = wire.build_batch(buf.columns(), "nvml")
    return doc["batch_id"], wire.encode(doc)


@pytest.fixture
def server():
    srv = FakeServer(keep_alive=True).start()
    yield srv
    srv.stop()


def test_one_connection_carries_every_post(server):
    t = HttpTransport(server.url, "tok", timeout_s=2.0)
    ids = []
    for b in range(5):
        batch_id, body = batch_body(b)
        ids.append(batch_id)
        assert t.post("/api/v1/samples", body, gzipped=True).outcome == DELIVERED
    t.close()
    assert [d["batch_id"] for d in server.accepted] == ids
    # 5 POSTs, 1 TCP connection on both ends (urllib opened 5).
    assert (t.connections, server.connections) == (1, 1)
    assert server.requests[0].headers["Authorization"] == "Bearer tok"
    assert server.requests[0].headers["Content-Encoding"] == "gzip"


def test_a_server_restart_between_posts_costs_no_answer_and_no_duplicate(server):
    """The kept connection dies with the server; the next POST finds it closed before any answer
    and goes once more on a new connection, to the new server, at once."""
    t = HttpTransport(server.url, "tok", timeout_s=2.0)
    first_id, first = batch_body(0)
    assert t.post("/api/v1/samples", first, gzipped=True).outcome == DELIVERED
    server.stop()
    again = FakeServer(port=server.port, keep_alive=True).start()
    try:
        second_id, second = batch_body(1)
        resp = t.post("/api/v1/samples", second, gzipped=True)
        assert resp.outcome == DELIVERED, resp.describe()
    finally:
        again.stop()
    assert [d["batch_id"] for d in server.accepted] == [first_id]
    assert [d["batch_id"] for d in again.accepted] == [second_id]
    assert again.duplicates == 0 and t.connections == 2


def test_server_down_is_a_retry_then_a_new_connection_when_it_is_back():
    port = free_port()
    t = HttpTransport(f"http://127.0.0.1:{port}", "tok", timeout_s=2.0)
    _, body = batch_body(0)
    resp = t.post("/api/v1/samples", body, gzipped=True)
    assert (resp.status, resp.outcome) == (None, RETRY)
    assert "Connection" in resp.body  # ConnectionRefusedError: ...
    srv = FakeServer(port=port, keep_alive=True).start()
    try:
        assert t.post("/api/v1/samples", body, gzipped=True).outcome == DELIVERED
    finally:
        srv.stop()
    assert len(srv.accepted) == 1


def test_after_a_413_the_next_post_opens_a_new_connection(server):
    """A server may close the connection after a 413 although its answer says keep-alive
    (gunicorn did, after draining 64 KiB): the transport must not send the next batch into
    it."""
    server.script = [(413, {}, {"error": "too_large", "field": ""})]
    t = HttpTransport(server.url, "tok", timeout_s=2.0)
    _, body = batch_body(0)
    assert t.post("/api/v1/samples", body, gzipped=True).status == 413
    assert t.post("/api/v1/samples", body, gzipped=True).outcome == DELIVERED
    assert (t.connections, server.connections) == (2, 2)


def test_an_answer_that_closes_the_connection_is_honoured():
    """An HTTP/1.0 server (or Connection: close) ends each connection: one per POST, all sent."""
    srv = FakeServer(keep_alive=False).start()
    try:
        t = HttpTransport(srv.url, "tok", timeout_s=2.0)
        for b in range(3):
            assert t.post("/api/v1/samples", batch_body(b)[1], gzipped=True).outcome == DELIVERED
    finally:
        srv.stop()
    assert len(srv.accepted) == 3 and t.connections == srv.connections == 3


def test_retry_after_of_an_error_answer_is_read(server):
    server.script = [(503, {"Retry-After": "7"}, {"error": "unavailable"})]
    t = HttpTransport(server.url, "tok", timeout_s=2.0)
    resp = t.post("/api/v1/samples", batch_body(0)[1], gzipped=True)
    assert (resp.status, resp.outcome, resp.retry_after_s) == (503, RETRY, 7.0)
    assert json.loads(resp.body) == {"error": "unavailable"}


def test_two_threads_share_one_transport_one_request_at_a_time(server):
    t = HttpTransport(server.url, "tok", timeout_s=2.0)
    bodies = [batch_body(b) for b in range(20)]
    outcomes = []

    def send(part):
        for _, body in part:
            outcomes.append(t.post("/api/v1/samples", body, gzipped=True).outcome)

    threads = [threading.Thread(target=send, args=(bodies[k::2],)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert outcomes == [DELIVERED] * 20
    assert sorted(d["batch_id"] for d in server.accepted) == sorted(i for i, _ in bodies)
    assert t.connections == 1


def test_a_plain_proxy_from_the_environment_gets_the_absolute_uri(monkeypatch):
    """http_proxy (with credentials) is honoured as urllib honoured it: the request goes to the
    proxy, naming the server in its request line."""
    proxy = FakeServer(keep_alive=True).start()
    try:
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", f"http://agent%40dc:s3cret@127.0.0.1:{proxy.port}")
        t = HttpTransport("http://127.0.0.1:9/prefix", "tok", timeout_s=2.0)  # 9: discard
        assert t.post("/api/v1/samples", batch_body(0)[1], gzipped=True).outcome == DELIVERED
    finally:
        proxy.stop()
    (req,) = proxy.requests
    assert req.path == "http://127.0.0.1:9/prefix/api/v1/samples"
    # base64("agent@dc:s3cret")
    assert req.headers["Proxy-Authorization"] == "Basic YWdlbnRAZGM6czNjcmV0"
    assert req.headers["Authorization"] == "Bearer tok"


def test_a_bad_server_url_is_a_retry_with_the_reason_not_an_exception():
    resp = HttpTransport("127.0.0.1:8000", "tok").post("/api/v1/samples", b"{}", gzipped=False)
    assert (resp.status, resp.outcome) == (None, RETRY)
    assert "http(s)://host" in resp.body


def test_shipper_over_a_kept_connection_loses_nothing_through_an_outage(tmp_path):
    """The spool's guarantee over keep-alive: batches spooled while the server is down stay on
    disk, and after it returns every sample arrives once, in order."""
    port = free_port()
    with Spool(tmp_path / "spool.db") as spool:
        srv = FakeServer(port=port, keep_alive=True).start()
        transport = HttpTransport(srv.url, "tok", timeout_s=2.0)
        shipper = Shipper(spool, transport, None, backoff_base_s=0.01, backoff_cap_s=0.05,
                          merge_max_samples=0)
        ids = []
        for b in range(6):
            batch_id, body = batch_body(b)
            spool.put(batch_id, body, 4)
            ids.append(batch_id)
            if b == 2:  # three delivered on one connection, then the server goes away
                while spool.depth():
                    shipper.step()
                srv.stop()
        for _ in range(3):  # down: refused, nothing leaves the spool
            shipper.step()
            time.sleep(0.06)
        assert spool.depth() == 3 and shipper.failures == 3
        back = FakeServer(port=port, keep_alive=True).start()
        try:
            deadline = time.monotonic() + 10
            while spool.depth() and time.monotonic() < deadline:
                shipper.step()
                time.sleep(0.01)
        finally:
            back.stop()
        assert spool.depth() == 0
    assert [d["batch_id"] for d in srv.accepted + back.accepted] == ids
    assert srv.duplicates == back.duplicates == 0
    assert srv.connections == back.connections == 1
    # Every sample once: 6 batches x 4 samples, each (gpu, ts) distinct.
    keys = [(g, ts) for d in srv.accepted + back.accepted
            for g, ts in zip(d["samples"]["gpu_index"], d["samples"]["ts"], strict=True)]
    assert len(keys) == len(set(keys)) == 24
    assert gzip.decompress(srv.requests[0].raw)  # sent gzip, as spooled
