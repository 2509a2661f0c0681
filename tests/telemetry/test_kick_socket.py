"""The queued-store key is set with one SET NX written on the connection's socket and its one-line
answer read back there (ingest._claim_kick): it must say what Redis said -- set, already set, or
an error -- in either protocol, from an answer that arrives in pieces too, and recover from a
Redis restart as redis-py's own client does."""

from __future__ import annotations

import pytest
import redis

from greenops.telemetry import ingest

REDIS = "redis://127.0.0.1:6379/13"


class Pieces:
    """A socket whose answer arrives a few bytes at a time (or not at all)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, _n: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


@pytest.mark.parametrize(("chunks", "answer"), [
    ((b"+OK\r\n",), True),
    ((b"$-1\r\n",), False),  # nil, RESP2
    ((b"_\r\n",), False),  # nil, RESP3
    ((b"+O", b"K\r", b"\n"), True),
    ((b"$-", b"1\r\n"), False),
])
def test_the_answer_is_read_to_its_end(chunks, answer):
    assert ingest._set_reply(Pieces(*chunks)) is answer


def test_an_error_answer_raises_it_and_a_closed_connection_is_a_connection_error():
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        ingest._set_reply(Pieces(b"-WRONGTYPE Operation against a key\r\n"))
    with pytest.raises(redis.exceptions.ConnectionError):
        ingest._set_reply(Pieces(b"+O"))  # then the peer closes


@pytest.fixture
def kick_redis(monkeypatch):
    def use(protocol: int) -> redis.Redis:
        client = redis.Redis.from_url(REDIS, protocol=protocol, socket_timeout=0.5)
        monkeypatch.setattr(ingest, "_redis_client", client)
        monkeypatch.setattr(ingest._kick_connections, "conn", None, raising=False)
        client.delete(ingest.KICK_KEY)
        return client
    yield use
    redis.Redis.from_url(REDIS).delete(ingest.KICK_KEY)
    ingest._kick_connections.conn = None


@pytest.mark.parametrize("protocol", [2, 3])
def test_against_redis_the_first_set_wins_and_the_key_expires(kick_redis, protocol):
    client = kick_redis(protocol)
    assert ingest._claim_kick("batch-a") is True
    assert ingest._claim_kick("batch-b") is False  # set already: that task takes this batch
    assert client.get(ingest.KICK_KEY) == b"batch-a"
    assert 0 < client.ttl(ingest.KICK_KEY) <= ingest.KICK_TTL_S
    client.delete(ingest.KICK_KEY)
    assert ingest._claim_kick("batch-c") is True


def test_a_connection_redis_dropped_is_opened_again(kick_redis):
    client = kick_redis(3)
    assert ingest._claim_kick("batch-a") is True
    # Redis drops this thread's key connection (as a restart does): the next SET meets a dead
    # socket, and the one retry on a fresh connection answers.
    host, port = ingest._kick_connections.conn._sock.getsockname()[:2]
    client.client_kill(f"{host}:{port}")
    client.delete(ingest.KICK_KEY)
    assert ingest._claim_kick("batch-b") is True
    assert client.get(ingest.KICK_KEY) == b"batch-b"


class RefusingConnection:
    """A connected key connection on which Redis answers an error."""

    def __init__(self) -> None:
        self._sock = Pieces(b"-OOM command not allowed when used memory > 'maxmemory'.\r\n")
        self.disconnected = False

    def disconnect(self) -> None:
        self.disconnected = True


def test_an_error_answer_raises_and_the_connection_is_not_kept(monkeypatch):
    conn = RefusingConnection()
    monkeypatch.setattr(ingest._kick_connections, "conn", conn, raising=False)
    with pytest.raises(redis.exceptions.ResponseError, match="OOM"):
        ingest._claim_kick("batch-a")
    assert conn.disconnected  # an answer may be left unread: never reused
    assert conn._sock.sent.startswith(b"*6\r\n$3\r\nSET\r\n$28\r\ngreenops:ingest:store-queued")
    assert conn._sock.sent.endswith(b"$7\r\nbatch-a\r\n$2\r\nNX\r\n$2\r\nEX\r\n$1\r\n5\r\n")


@pytest.mark.django_db
def test_an_agents_post_is_answered_and_queued_when_redis_answers_an_error(
        host, post_batch, settings, monkeypatch):
    """What the agent's request gets when the key's SET meets an error answer (a Redis out of
    memory): its batch is accepted and a store task queued as if the key were unset -- the
    answer the agent sees, not only what is stored."""
    from greenops.telemetry.models import IngestBatch
    from tests.support.factories import make_batch
    from tests.support.telemetry import record_publishes

    published = record_publishes(settings, monkeypatch)
    conn = RefusingConnection()
    monkeypatch.setattr(ingest._kick_connections, "conn", conn, raising=False)
    _, token = host
    doc = make_batch()
    resp = post_batch(token, doc)
    assert resp.status_code == 202, resp.content
    assert resp.json()["status"] == "queued"
    assert published == [doc["batch_id"]]  # queued regardless: nothing waits on the key
    assert conn.disconnected
    assert IngestBatch.objects.get(id=doc["batch_id"]).status == "pending"
