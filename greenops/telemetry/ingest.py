"""Receiving batches from agents: authentication, acceptance and processing.

The web process validates the whole batch and keeps it as one row (durable before it answers
202); a Celery task then writes the samples. If the queue message is lost, the beat catch-up
finds the pending row. Views call these functions; tests call them directly.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
import uuid
import weakref
from dataclasses import dataclass

import kombu.exceptions
import psycopg
import redis
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg import generators, pq

from greenops.errors import FieldError, invalid
from greenops.request_body import decode_body, parse_body, parse_json

# tasks imports this module too: each uses the other only inside functions, never at import.
from greenops.telemetry import late, store, tasks, wire
from greenops.telemetry.models import DeviceKind, Gpu, Host, IngestBatch, device_kind_of
from greenops.tokens import hash_token

log = logging.getLogger(__name__)


_HOST_BY_TOKEN = f"SELECT * FROM {Host._meta.db_table} WHERE token_hash = %s"
_TOKEN_EXISTS = f"SELECT 1 FROM {Host._meta.db_table} WHERE token_hash = %s"
_GPUS_OF_HOST = f"SELECT \"index\", id FROM {Gpu._meta.db_table} WHERE host_id = %s"


def _bearer(header: str | None) -> str:
    if not header or not header.startswith("Bearer "):
        raise FieldError(401, "unauthorized", "Authorization",
                          "send the host token as 'Authorization: Bearer <token>'")
    return header[len("Bearer "):].strip()


def _unknown_token() -> FieldError:
    return FieldError(401, "unauthorized", "Authorization", "unknown or revoked host token")


def host_for_token(header: str | None) -> Host:
    token = _bearer(header)
    # Raw SQL: the ORM spent more CPU compiling this query (with its join to team) than the
    # database spent answering it -- about a third of the web's CPU per 80-sample batch. The
    # team, where an endpoint needs it, loads on first access.
    host = next(iter(Host.objects.raw(_HOST_BY_TOKEN, [hash_token(token)])), None)
    if host is None:
        raise _unknown_token()
    return host


# --- the samples endpoint: token check before the body is read, one statement after ----------
#
# Agents post a batch every few seconds, so the lookup of the token's host was a third of the
# request. This process remembers the hashes of tokens the database confirmed, but nothing is
# ever accepted on that memory alone: the statement that stores the batch finds the host by the
# token's hash again, in the same snapshot as the insert. A token revoked or rotated a moment ago
# therefore stores nothing and answers 401 at once, in every web process, with no invalidation
# to forget; the cache only spares the known-good case a round trip before the body is parsed
# (an unknown token is still refused before the server spends anything on its body).
TOKEN_CACHE_TTL_S = 300.0
TOKEN_CACHE_MAX = 10_000
_confirmed_tokens: dict[str, float] = {}  # token sha256 -> time.monotonic() the database said yes


@dataclass(frozen=True)
class SamplesAuth:
    """request.auth of POST /samples: the token's hash, and whether this process took it from
    its cache (so a 4xx about the body re-checks the token first, as a fresh lookup would)."""

    token_hash: str
    cached: bool


def samples_auth(header: str | None) -> SamplesAuth:
    digest = hash_token(_bearer(header))
    confirmed = _confirmed_tokens.get(digest)
    if confirmed is not None and time.monotonic() - confirmed < TOKEN_CACHE_TTL_S:
        return SamplesAuth(digest, cached=True)
    _confirm_token(digest)
    return SamplesAuth(digest, cached=False)


def _confirm_token(digest: str) -> None:
    """401 unless a host holds this token now; remember it if one does."""
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_EXISTS, [digest])
        found = cursor.fetchone() is not None
    if not found:
        _confirmed_tokens.pop(digest, None)
        raise _unknown_token()
    if len(_confirmed_tokens) >= TOKEN_CACHE_MAX:
        _confirmed_tokens.clear()
    _confirmed_tokens[digest] = time.monotonic()


def forget_tokens() -> None:
    """Empty this process's token cache (tests; nothing depends on it for correctness)."""
    _confirmed_tokens.clear()


def known_gpus(host: Host | int) -> dict[int, int]:
    """GPU index -> Gpu id for a host (or a host id: the worker has only the batch's host_id)."""
    host_id = host if isinstance(host, int) else host.id
    with connection.cursor() as cursor:  # raw for the same reason as _HOST_BY_TOKEN
        cursor.execute(_GPUS_OF_HOST, [host_id])
        return dict(cursor.fetchall())


# A host posting several batches a second (an agent draining its spool after an outage) need not
# rewrite its row for each one: that write costs a round trip and serialises the host's
# concurrent requests on the row lock, while the pages show last_seen in minutes.
LAST_SEEN_RESOLUTION_S = 5.0


def _parse_intake(doc) -> wire.Batch:
    """A batch as the API receives it: within the sample limit and the intake's time window."""
    return wire.parse_batch(doc, **_intake_limits())


def _check_intake(doc) -> wire.Intake:
    """_parse_intake's checks and answers, without the arrays (wire.intake): what POST /samples
    needs of a batch the worker will parse again."""
    return wire.intake(doc, **_intake_limits())


def _intake_limits() -> dict:
    return {"now_s": time.time(), "max_samples": settings.INGEST_MAX_SAMPLES,
            "max_future_s": settings.INGEST_MAX_FUTURE_S, "max_age_s": settings.INGEST_MAX_AGE_S}


def _parse_stored(doc) -> wire.Batch:
    """A batch the API already accepted, read back by the worker: every check passed on arrival
    (so it is not checked again), and a batch stored late (a backlog) must not age out of the
    window now. A body that is not what the API stores (written by hand, or by an older
    server) falls back to the full check, which names what is wrong."""
    try:
        return wire.parse_validated(doc)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError):
        return wire.parse_batch(doc, now_s=time.time(), max_samples=1 << 40,
                                max_future_s=float("inf"), max_age_s=float("inf"))


def accept_batch(host: Host, body: bytes, content_encoding: str | None) -> dict:
    """Validate a whole batch and keep it for the worker. Nothing is stored if it is invalid."""
    doc = parse_body(body, content_encoding)
    batch = _parse_intake(doc)
    wire.check_gpu_indices(batch, set(known_gpus(host)))
    spool = wire.parse_spool_report(doc)
    gzip_encoded = (content_encoding or "").strip().lower() == "gzip"
    row = IngestBatch(id=batch.batch_id, host=host, n_samples=batch.n, payload=body,
                      gzip_encoded=gzip_encoded)
    if not _insert_once(row):  # a resend, or the same batch racing in twice
        owner = IngestBatch.objects.filter(id=batch.batch_id).values_list("host_id", flat=True)
        if owner.first() != host.id:
            raise FieldError(409, "conflict", "batch_id", "this batch id belongs to another host")
        return {"batch_id": str(batch.batch_id), "status": "duplicate", "samples": batch.n}
    _touch_host(host, batch.agent_version, spool)
    transaction.on_commit(lambda: _kick(tasks.store_batch, str(batch.batch_id)))
    return {"batch_id": str(batch.batch_id), "status": "queued", "samples": batch.n}


# One round trip stores a valid batch: find the token's host, check the batch's GPU indices
# against the host's GPUs, insert the batch row unless its id is taken, and touch the host (as
# _touch_host would) -- then report what it found, so the rare outcomes (unknown token, unknown
# GPU, a resend, another host's id) are answered exactly as accept_batch answers them. The owner
# subquery runs in the statement's snapshot, so it sees a row that existed before, not `ins`.
_ACCEPT = f"""
WITH h AS (
    SELECT id FROM {Host._meta.db_table} WHERE token_hash = %(token)s
), g AS (
    SELECT coalesce(array_agg("index"::integer), '{{}}') AS idx
    FROM {Gpu._meta.db_table} WHERE host_id = (SELECT id FROM h)
), ins AS (
    INSERT INTO {IngestBatch._meta.db_table}
        (id, host_id, received_at, n_samples, payload, gzip_encoded, status, error)
    SELECT %(id)s, h.id, %(now)s, %(n)s, %(payload)b, %(gzip)s, 'pending', ''
    FROM h, g WHERE %(gpus)s::integer[] <@ g.idx
    ON CONFLICT (id) DO NOTHING
    RETURNING host_id
), touch AS (
    UPDATE {Host._meta.db_table} AS t SET
        last_seen = %(now)s,
        agent_version = CASE WHEN %(version)s <> '' THEN %(version)s ELSE t.agent_version END,
        spool_depth = CASE WHEN %(spool)s THEN %(depth)s ELSE t.spool_depth END,
        spool_oldest_age_s = CASE WHEN %(spool)s THEN %(age)s ELSE t.spool_oldest_age_s END,
        spool_reported_at = CASE WHEN %(spool)s THEN %(now)s ELSE t.spool_reported_at END
    FROM ins
    WHERE t.id = ins.host_id AND (
        t.last_seen IS NULL OR t.last_seen <= %(stale)s
        OR (%(version)s <> '' AND %(version)s <> t.agent_version)
        OR (%(spool)s AND %(depth)s = 0 AND t.spool_depth IS DISTINCT FROM 0))
    RETURNING t.id
)
SELECT h.id, g.idx, (SELECT count(*) FROM ins),
       (SELECT host_id FROM {IngestBatch._meta.db_table} WHERE id = %(id)s)
FROM h, g
"""


def accept_samples(auth: SamplesAuth, body: bytes, content_encoding: str | None) -> dict:
    """POST /samples: accept_batch's answers and guarantees, in one database round trip.

    The batch row is durable when this returns (an autocommitted statement), the batch id makes
    a resend a no-op, and nothing is stored unless the token, the body and every GPU index are
    valid. SQLite (embedded default) takes accept_batch's path."""
    if connection.vendor != "postgresql":
        host = next(iter(Host.objects.raw(_HOST_BY_TOKEN, [auth.token_hash])), None)
        if host is None:
            raise _unknown_token()
        return accept_batch(host, body, content_encoding)
    try:
        doc = parse_body(body, content_encoding)
        batch = _check_intake(doc)
        spool_error = spool = None
        try:
            spool = wire.parse_spool_report(doc)
        except FieldError as exc:  # answered after the GPU check below, as accept_batch does
            spool_error = exc
    except FieldError:
        if auth.cached:  # a token revoked since it was cached is a 401, whatever its body
            _confirm_token(auth.token_hash)
        raise
    if spool_error is not None:
        host_id = _host_id(auth.token_hash)
        wire.check_gpu_indices(batch, set(known_gpus(host_id)))
        raise spool_error
    now = timezone.now()
    params = {
        "token": auth.token_hash, "id": batch.batch_id, "now": now, "n": batch.n,
        "payload": body, "gzip": (content_encoding or "").strip().lower() == "gzip",
        "gpus": store.int_array(batch.gpus),
        "version": batch.agent_version, "spool": spool is not None,
        "depth": spool[0] if spool else None, "age": spool[1] if spool else None,
        "stale": now - dt.timedelta(seconds=LAST_SEEN_RESOLUTION_S),
    }
    row = _accept_row(params)
    if row is None:  # revoked or rotated since this process cached the token
        _confirmed_tokens.pop(auth.token_hash, None)
        raise _unknown_token()
    host_id, gpu_indices, inserted, owner = row
    answer = {"batch_id": str(batch.batch_id), "samples": batch.n}
    if not inserted:
        wire.check_gpu_indices(batch, set(gpu_indices))  # the 422 if that is what stopped it
        if owner is None:  # taken by a request that committed after this statement began
            owner = IngestBatch.objects.filter(id=batch.batch_id).values_list(
                "host_id", flat=True).first()
        if owner != host_id:
            raise FieldError(409, "conflict", "batch_id", "this batch id belongs to another host")
        return {**answer, "status": "duplicate"}
    transaction.on_commit(lambda: _kick(tasks.store_batch, str(batch.batch_id)))
    return {**answer, "status": "queued"}


def _accept_row(params: dict):
    """Run _ACCEPT. The token cache lets this be the request's first query, and the
    server-bound cursor skips Django's per-request health check, so after PostgreSQL restarts
    each process's first try meets a dead connection: the statement is idempotent (ON CONFLICT
    DO NOTHING), so it is run once more on a fresh connection. A database still down raises
    OperationalError, which the API answers 503 with Retry-After."""
    for attempt in (1, 2):
        try:
            if _sent_direct():
                return _accept_direct(params)
            with store.server_bound_cursor(prepare=True) as cursor:
                cursor.execute(_ACCEPT, params)
                return cursor.fetchone()
        except (OperationalError, InterfaceError):
            if attempt == 2 or connection.in_atomic_block:
                raise
            connection.close()
    return None


# --- _ACCEPT through libpq itself ---------------------------------------------------------
#
# Through a cursor, the statement cost the web 0.37-0.41 ms of CPU a POST in a loop against the
# bench database where libpq's own prepared execution of it cost 0.12-0.16 (a one-off loop on a
# slow 2-core machine, 2026-12-05; a diagnostic, not a bench figure): Django's cursor wrapper and
# psycopg's cursor, adapters and loaders for one row of four columns. Every agent POST runs it, so
# it is sent as a named prepared statement on the connection's libpq handle, its parameters in
# PostgreSQL's text format (the body in binary), inside Django's database-error wrapper. Where
# that would hide the query from something watching -- DEBUG's query log, an execute_wrapper --
# or could not be right -- a connection without prepared statements (a transaction-mode
# pooler), a transaction the caller holds -- the cursor runs it.

_ACCEPT_PARAMS: list[str] = []


def _positional(match: re.Match) -> str:
    name = match.group(1)
    if name not in _ACCEPT_PARAMS:
        _ACCEPT_PARAMS.append(name)
    return f"${_ACCEPT_PARAMS.index(name) + 1}"


_ACCEPT_POSITIONAL = re.sub(r"%\((\w+)\)[sb]", _positional, _ACCEPT).encode()
# PostgreSQL type OIDs (pg_type): text, uuid, timestamptz, int4, bytea, bool, float8.
_OIDS = {"token": 25, "id": 2950, "now": 1184, "n": 23, "payload": 17, "gzip": 16, "gpus": 25,
         "version": 25, "spool": 16, "depth": 23, "age": 701, "stale": 1184}
_ACCEPT_TYPES = [_OIDS[name] for name in _ACCEPT_PARAMS]
_ACCEPT_FORMATS = [int(name == "payload") for name in _ACCEPT_PARAMS]  # 1: binary
_ACCEPT_NAME = b"greenops_accept_1"
_accept_prepared: weakref.WeakSet = weakref.WeakSet()  # psycopg connections holding it


def _sent_direct() -> bool:
    # In autocommit only, as the endpoint runs: inside transaction.atomic (or with autocommit
    # turned off) psycopg sends its BEGIN with its own first statement, so libpq would run this
    # one outside the caller's transaction.
    return (settings.DB_PREPARED_STATEMENTS and connection.get_autocommit()
            and not connection.queries_logged and not connection.execute_wrappers)


def _text(value) -> bytes | None:
    """A parameter in PostgreSQL's text format (bytes as they are: the body goes in binary)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if type(value) is bool:
        return b"t" if value else b"f"
    if isinstance(value, dt.datetime):
        return value.isoformat().encode()
    return str(value).encode()


def _accept_direct(params: dict):
    """_ACCEPT's row as the cursor returns it (host id, the host's GPU indices, rows inserted,
    the batch id's owner), or None: sent through libpq. A failure PostgreSQL reports is left to
    the cursor, which runs the statement again (it committed nothing) and raises Django's
    exception for it -- after re-preparing once if the statement had gone (a DISCARD ALL)."""
    values = [_text(params[name]) for name in _ACCEPT_PARAMS]
    with connection.wrap_database_errors:
        connection.ensure_connection()
        conn = connection.connection
        with conn.lock:
            pgconn = conn.pgconn
            # Outside a transaction only (the endpoint autocommits): a failure inside one would
            # abort it before the cursor could run the statement again.
            for _ in range(2 if pgconn.transaction_status == IDLE else 0):
                if conn not in _accept_prepared:
                    pgconn.send_prepare(_ACCEPT_NAME, _ACCEPT_POSITIONAL, _ACCEPT_TYPES)
                    prepared = conn.wait(generators.execute(pgconn))[-1]
                    if prepared.status != COMMAND_OK and prepared.error_field(
                            pq.DiagnosticField.SQLSTATE) != _STATEMENT_EXISTS:
                        break
                    _accept_prepared.add(conn)
                pgconn.send_query_prepared(_ACCEPT_NAME, values, _ACCEPT_FORMATS)
                result = conn.wait(generators.execute(pgconn))[-1]
                if result.status == TUPLES_OK:
                    return _accept_result(result)
                if pgconn.status != CONNECTION_OK:  # the server went away: _accept_row retries
                    raise psycopg.OperationalError(
                        result.error_message.decode(errors="replace").strip())
                if result.error_field(pq.DiagnosticField.SQLSTATE) != _NO_SUCH_STATEMENT:
                    break
                _accept_prepared.discard(conn)
    with store.server_bound_cursor(prepare=True) as cursor:
        cursor.execute(_ACCEPT, params)
        return cursor.fetchone()


_NO_SUCH_STATEMENT = b"26000"  # invalid_sql_statement_name: "prepared statement ... does not exist"
_STATEMENT_EXISTS = b"42P05"  # duplicate_prepared_statement: prepared before, on this session
COMMAND_OK, TUPLES_OK = pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK
IDLE, CONNECTION_OK = pq.TransactionStatus.IDLE, pq.ConnStatus.OK


def _accept_result(result):
    if result.ntuples == 0:
        return None
    host_id, indices, inserted, owner = (result.get_value(0, i) for i in range(4))
    return (int(host_id), [int(i) for i in indices[1:-1].split(b",")] if len(indices) > 2 else [],
            int(inserted), None if owner is None else int(owner))


def _host_id(token_hash: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {Host._meta.db_table} WHERE token_hash = %s",
                       [token_hash])
        row = cursor.fetchone()
    if row is None:
        _confirmed_tokens.pop(token_hash, None)
        raise _unknown_token()
    return row[0]


def _insert_once(row: IngestBatch) -> bool:
    """INSERT the batch row; False if its id is taken. Outside a transaction this is one
    autocommitted statement (durable when it returns, no BEGIN/COMMIT round trips); inside one it
    gets a savepoint, so a duplicate does not poison the caller's transaction."""
    try:
        if connection.in_atomic_block:
            with transaction.atomic():
                row.save(force_insert=True)
        else:
            row.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def _touch_host(host: Host, agent_version: str, spool: tuple[int, float | None] | None) -> None:
    """Record that the host is alive (and its agent version and spool backlog), at most every
    LAST_SEEN_RESOLUTION_S -- except that a new version or a drained spool is written at once."""
    now = timezone.now()
    version = agent_version or host.agent_version
    fresh = host.last_seen is not None and (
        (now - host.last_seen).total_seconds() < LAST_SEEN_RESOLUTION_S
    )
    drained = spool is not None and spool[0] == 0 and host.spool_depth != 0
    if fresh and version == host.agent_version and not drained:
        return
    spool_fields = (
        {"spool_depth": spool[0], "spool_oldest_age_s": spool[1], "spool_reported_at": now}
        if spool else {}
    )
    Host.objects.filter(id=host.id).update(last_seen=now, agent_version=version, **spool_fields)


# Set while a store task is queued and has not yet started claiming. A batch committed while it is
# set needs no message of its own: that task deletes the key, then claims every pending batch
# (this one included, since it committed before the key was seen). Publishing a Celery message
# cost the web ~2 ms of CPU per request and the worker ~4 ms per message even when a group had
# already stored the batch. The TTL bounds the harm of a lost message to a few seconds' delay
# (beat's catch-up stores pending batches regardless).
KICK_KEY = "greenops:ingest:store-queued"
KICK_TTL_S = 5
_redis_client = None


def _redis():
    global _redis_client
    if _redis_client is None:
        _redis_client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.5,
                                             socket_timeout=0.5)
    return _redis_client


# Each web thread's own connection for the queued-store key, used without redis-py's client:
# the client checks a connection out of its pool, polls it for stale data and puts it back on
# every command, 0.06 ms of CPU around a 0.01 ms SET, and every POST makes one. The command goes
# out and its one-line answer comes back on the connection's socket itself: through the
# connection's send_command and read_response (its encoder, its checks, its reply parser) the SET
# cost 19-20 us of CPU in a one-thread loop against 12 us this way (a diagnostic, 2026-12-05;
# hiredis's parser changed nothing). redis-py still opens the connection (AUTH, the database,
# TLS) and closes it.
_kick_connections = threading.local()
_SET_NX_HEAD = b"*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n" % (len(KICK_KEY), KICK_KEY.encode())
_SET_NX_TAIL = b"$2\r\nNX\r\n$2\r\nEX\r\n$%d\r\n%d\r\n" % (len(str(KICK_TTL_S)), KICK_TTL_S)
_SET = b"+OK\r\n"
_NOT_SET = (b"$-1\r\n", b"_\r\n")  # nil in RESP2 and RESP3: the key was set already


def _claim_kick(batch_id: str) -> bool:
    """SET the queued-store key unless it is set; True if this call set it (so this request
    queues the task). Raises what Redis raised, like the client, after one retry on a fresh
    connection (Redis restarted since this thread last used it)."""
    for attempt in (1, 2):
        conn = getattr(_kick_connections, "conn", None)
        if conn is None:
            conn = _kick_connections.conn = _redis().connection_pool.make_connection()
        try:
            if getattr(conn, "_sock", None) is None:
                conn.connect()  # redis-py's handshake: AUTH, SELECT, HELLO, TLS
            sock = getattr(conn, "_sock", None)
            if sock is None:  # a connection class without a socket of its own
                conn.send_command("SET", KICK_KEY, batch_id, "NX", "EX", KICK_TTL_S)
                return conn.read_response() is not None
            value = batch_id.encode()
            sock.sendall(b"%s$%d\r\n%s\r\n%s" % (_SET_NX_HEAD, len(value), value, _SET_NX_TAIL))
            return _set_reply(sock)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            conn.disconnect()
            if attempt == 2:
                raise
        except Exception:
            conn.disconnect()  # an answer may be left unread: never reuse the connection
            raise
    return True


def _set_reply(sock) -> bool:
    """Read SET NX's one-line answer: True for OK, False for nil; an error reply raises."""
    reply = sock.recv(64)
    while not reply.endswith(b"\r\n"):
        more = sock.recv(64)
        if not more:
            raise redis.exceptions.ConnectionError("Redis closed the connection mid-answer")
        reply += more
    if reply == _SET:
        return True
    if reply in _NOT_SET:
        return False
    raise redis.exceptions.ResponseError(reply.decode(errors="replace").strip())


def coalescing() -> bool:
    """Only with a real broker: the embedded default runs tasks in-process, one per batch."""
    return bool(settings.REDIS_URL) and not settings.CELERY_TASK_ALWAYS_EAGER


def _kick(task, batch_id: str) -> None:
    """Queue a store task unless one is already queued (it will take this batch too)."""
    if coalescing():
        try:
            if not _claim_kick(batch_id):
                return
        except Exception:  # Redis trouble: publish as before (that never blocks for long)
            log.warning("could not check the queued-store key", exc_info=True)
    if not _enqueue(task, batch_id):
        # The batch is durable in PostgreSQL and beat's catch-up stores it once the broker is
        # back; the 503 tells the agent the server is degraded. It keeps the batch in its spool
        # and sends it again after Retry-After: that resend is answered "duplicate" (202), so
        # nothing is lost and nothing is stored twice.
        raise FieldError(503, "unavailable", None,
                         "the task queue (Redis) is unreachable: the batch is kept and will be "
                         "stored; send it again after Retry-After",
                         retry_after_s=BROKER_DOWN_RETRY_AFTER_S)


def _kick_refresh() -> None:
    """A store task is still claiming: batches committed meanwhile need no message."""
    if coalescing():
        try:
            _redis().set(KICK_KEY, "draining", ex=KICK_TTL_S)
        except Exception:
            log.warning("could not set the queued-store key", exc_info=True)


def _unkick() -> None:
    """A store task is about to claim: batches committed from now on need a new message."""
    if coalescing():
        try:
            _redis().delete(KICK_KEY)
        except Exception:
            log.warning("could not clear the queued-store key", exc_info=True)


# Seconds an agent is asked to wait while the broker is unreachable (its probe then finds the
# server within seconds of the broker's return).
BROKER_DOWN_RETRY_AFTER_S = 10
# What a publish to a broker that is down raises (kombu wraps most of them in the first).
BROKER_DOWN = (kombu.exceptions.OperationalError, redis.exceptions.ConnectionError,
               ConnectionError, TimeoutError)


def _enqueue(task, batch_id: str) -> bool:
    """Queue a store task for a batch that is already durable. False when the broker is
    unreachable (beat's catch-up stores the batch once it is back); never raises."""
    try:
        # No publish retries: with the broker down each retry held the agent's request
        # (0.7 s per POST); beat's catch-up re-queues pending batches anyway.
        task.apply_async((batch_id,), retry=False)
    except BROKER_DOWN:
        log.warning("could not queue batch %s: broker unreachable; beat will pick it up",
                    batch_id, exc_info=True)
        return False
    except Exception:  # anything else: the batch is durable, beat's catch-up stores it
        log.warning("could not queue batch %s; beat will pick it up", batch_id, exc_info=True)
    return True


def process_batch(batch_id: str) -> int | None:
    """Store a pending batch's samples. Returns samples inserted, None if already processed."""
    store.prepare_session()
    with transaction.atomic():
        row = (
            IngestBatch.objects.select_for_update(skip_locked=True)
            .filter(id=uuid.UUID(batch_id), status=IngestBatch.Status.PENDING)
            .first()
        )
        if row is None:  # done already, or another worker holds it right now
            return None
        try:
            doc = parse_json(
                decode_body(bytes(row.payload), row.gzip_encoded, 1 << 40)
            )
            batch = _parse_stored(doc)
            gpu_ids = known_gpus(row.host_id)
            wire.check_gpu_indices(batch, set(gpu_ids))  # a GPU may have gone since acceptance
            inserted = store.store_batch(batch, gpu_ids)
        except FieldError as exc:  # a GPU was removed between acceptance and processing
            row.status, row.error, row.payload = IngestBatch.Status.FAILED, exc.message, b""
            row.processed_at = timezone.now()
            row.save(update_fields=["status", "error", "payload", "processed_at"])
            return 0
        first = _from_us(int(batch.ts_us.min()))
        if inserted and late.is_late(first):  # live batches skip this (and its query)
            team_id = Host.objects.values_list("team_id", flat=True).get(id=row.host_id)
            late.mark(team_id, first, _from_us(int(batch.ts_us.max())))
        row.status, row.inserted, row.payload = IngestBatch.Status.DONE, inserted, b""
        row.processed_at = timezone.now()
        row.save(update_fields=["status", "inserted", "payload", "processed_at"])
        return inserted


# How much one worker transaction claims: up to 64 batches and about 8,000 samples. 64 of the
# agent's 80-sample batches cost one COPY instead of 64 round trips; the sample cap keeps big
# batches (4,000 samples) in groups of two, so the other worker processes still get a share.
GROUP_MAX_BATCHES = 64
GROUP_MAX_SAMPLES = 8_000

# A group is claimed in two steps. The first reads the head of the queue without locks, only to
# size the group: as many batches as fit in GROUP_MAX_SAMPLES at the sizes waiting there. The
# second locks that many with SKIP LOCKED, so a batch another worker holds is passed over for the
# next one -- a window over rows that the other worker holds (as one query did) left the second
# worker process with nothing to claim, and one process stored every 4,000-sample batch alone.
_HEAD = """
    SELECT n_samples FROM telemetry_ingestbatch WHERE status = 'pending'
    ORDER BY received_at, id LIMIT %(batches)s
"""
_CLAIM_MINE = """
    SELECT id, host_id, payload, gzip_encoded, received_at, n_samples
    FROM telemetry_ingestbatch WHERE id = %(mine)s AND status = 'pending'
    FOR UPDATE SKIP LOCKED
"""
# Arrival order straight off the pending index (no sort over every pending row): a drain claims
# many times a second, and an index scan marks the entries of batches already done as dead, so
# later claims skip them instead of visiting each batch stored since the last vacuum.
_CLAIM = """
    SELECT id, host_id, payload, gzip_encoded, received_at, n_samples
    FROM telemetry_ingestbatch WHERE status = 'pending' AND id <> %(mine)s
    ORDER BY received_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""
_NO_BATCH = uuid.UUID(int=0)
# The GPUs of the group's hosts. Raw and prepared, as the claims: the ORM spent more CPU building
# this query than PostgreSQL spent answering it, once per group.
# With each host's team, for marking late hours (an agent draining its spool after an outage
# sends group after group of late batches: a query of its own per group cost the worker a tenth
# of its CPU in bench/ingest, whose hours-long series is late in part).
_GPUS_OF_HOSTS = f"""
    SELECT g.host_id, g."index", g.id, h.team_id
    FROM {Gpu._meta.db_table} g JOIN {Host._meta.db_table} h ON h.id = g.host_id
    WHERE g.host_id = ANY(%(hosts)s::bigint[])
"""

# How long one store task keeps claiming batches that arrive while it works. Meanwhile the Redis
# key stays set, so those batches' requests queue no task of their own: at the agent's batch size
# a Celery message cost the web ~2 ms and the worker ~4 ms of CPU, more than storing the batch.
# Between groups that did not fill it waits settings.INGEST_GROUP_WAIT_S: at the agent's batch
# size a group's fixed cost (its claim, the statement, the status update, the commit) was most
# of the worker's and PostgreSQL's CPU per batch when each group held the two or three batches
# that arrived while the previous one was stored.
DRAIN_S = 2.0


def process_pending(batch_id: str) -> int | None:
    """Group commit: store this batch together with every other pending batch this worker can
    claim (up to GROUP_MAX_BATCHES), in one transaction, one COPY and one INSERT, and keep doing
    so for up to DRAIN_S while batches keep arriving. Returns the samples `batch_id` added, or
    None if another run stored it (or holds it right now).

    Exactly once as in process_batch: rows are claimed with FOR UPDATE SKIP LOCKED and leave
    'pending' in the transaction that stores their samples, and ON CONFLICT skips samples
    already stored. A batch whose message arrives after its group stored it finds nothing to do.
    No batch is left without a task: a request that saw the Redis key queued none, but it
    committed its batch before it looked, and this task deletes the key and only then makes its
    last claims, which see every batch committed before. SQLite (embedded default, tasks
    in-process) stores the one batch as before."""
    if connection.vendor != "postgresql":
        return process_batch(batch_id)
    store.prepare_session()
    mine = uuid.UUID(batch_id)
    deadline = time.monotonic() + DRAIN_S
    result, claimed, full = _store_group(mine)
    helped = False
    gather = coalescing() and settings.INGEST_GROUP_WAIT_S > 0
    while claimed and time.monotonic() < deadline:
        if full and not helped and coalescing():  # a backlog: let a second process share it
            _enqueue(tasks.store_batch, batch_id)
            helped = True
        _kick_refresh()
        if gather and not full:  # let the batches arriving now make one group, not several
            time.sleep(settings.INGEST_GROUP_WAIT_S)
        _, claimed, full = _store_group(None)
    _unkick()
    _, claimed, full = _store_group(None)
    while full:  # more pending than one group holds: keep going (messages were coalesced)
        _, claimed, full = _store_group(None)
    return result


def _group_size(sizes: list[int]) -> int:
    """How many batches of the queue's head fit in GROUP_MAX_SAMPLES (at least one)."""
    total = k = 0
    for n in sizes:
        if k and total + n > GROUP_MAX_SAMPLES:
            break
        total += n
        k += 1
    return max(k, 1)


def _store_group(mine: uuid.UUID | None) -> tuple[int | None, int, bool]:
    """One transaction of process_pending: (what `mine` added or None, how many batches it
    claimed, whether the group was full, i.e. more batches may be pending)."""
    # Prepared, as store_group's statements are: parsed and planned once per connection, not
    # once per group (the plan does not depend on the group's size: the same joins at 80 and
    # at 8,000 staged samples).
    # Results in binary: the claimed bodies come as bytes, not hex that PostgreSQL writes and
    # libpq unescapes (twice the body's size), and their times without parsing ISO text.
    with transaction.atomic(), store.server_bound_cursor(prepare=True, binary=True) as cursor:
        cursor.execute(_HEAD, {"batches": GROUP_MAX_BATCHES})
        sizes = [row[0] for row in cursor.fetchall()]
        if not sizes:
            return None, 0, False
        limit = _group_size(sizes)
        # This batch is claimed first (its message is being handled); the group is then stored
        # in arrival order, so a sample sent twice is credited to the batch that came first.
        claimed = []
        if mine is not None:
            cursor.execute(_CLAIM_MINE, {"mine": mine})
            claimed = cursor.fetchall()
        if limit > len(claimed):
            cursor.execute(_CLAIM, {"mine": mine or _NO_BATCH, "limit": limit - len(claimed)})
            claimed += cursor.fetchall()
        claimed.sort(key=lambda row: row[4])
        if not claimed:
            return None, 0, False
        gpus: dict[int, dict[int, int]] = {}
        cursor.execute(_GPUS_OF_HOSTS, {"hosts": store.int_array({row[1] for row in claimed})})
        teams: dict[int, int] = {}
        for host_id, index, gpu_id, team_id in cursor.fetchall():
            gpus.setdefault(host_id, {})[index] = gpu_id
            teams[host_id] = team_id
        stored, failed, columns, built = _group_columns(claimed, gpus)
        inserted = store.store_group(*built, columns.counts) if stored else []
        _mark_late([(*batch, *span) for batch, span in zip(stored, columns.spans, strict=True)],
                   inserted, teams)
        now = timezone.now()
        if stored:
            cursor.execute(
                "UPDATE telemetry_ingestbatch AS b SET status = 'done', inserted = v.k, "
                "payload = '', processed_at = %s "
                "FROM unnest(%s::uuid[], %s::integer[]) AS v(id, k) WHERE b.id = v.id",
                [now, [u for u, _ in stored], inserted],
            )
        for batch_uuid, message in failed:  # a GPU was removed between acceptance and now
            IngestBatch.objects.filter(id=batch_uuid).update(
                status=IngestBatch.Status.FAILED, error=message, payload=b"", processed_at=now
            )
    results = {u: k for (u, _), k in zip(stored, inserted, strict=True)}
    results.update({u: 0 for u, _ in failed})
    # Full: it got all it asked for and the head of the queue held more (or as many as it
    # reads), so more may be pending.
    full = len(claimed) >= limit and (len(sizes) > limit or len(sizes) == GROUP_MAX_BATCHES)
    return results.get(mine), len(claimed), full


def _group_columns(claimed: list, gpus: dict[int, dict[int, int]]):
    """The claimed batches read for one COPY: (stored, failed, columns, built). stored: (id,
    host id) of each batch to store, in `columns`' positions; failed: (id, why) of each that
    cannot be -- a body that does not parse, or a GPU removed since the batch was accepted;
    built: columns.build(), or None when nothing is stored."""
    bodies = []
    for batch_uuid, host_id, payload, gzip_encoded, _, _ in claimed:
        try:
            doc = parse_json(decode_body(bytes(payload), gzip_encoded, 1 << 40))
        except FieldError as exc:
            doc = exc
        bodies.append((batch_uuid, host_id, doc))
    try:
        return _gather(bodies, gpus, join=True)
    except store.NotGrouped:  # a joined body did not convert: read every batch alone
        return _gather(bodies, gpus, join=False)


def _gather(bodies: list, gpus: dict[int, dict[int, int]], join: bool):
    columns, stored, failed = store.GroupColumns(), [], []
    for batch_uuid, host_id, doc in bodies:
        if isinstance(doc, FieldError):
            failed.append((batch_uuid, doc.message))
            continue
        gpu_ids = gpus.get(host_id, {})
        try:
            if not join:
                raise store.NotGrouped
            columns.add(doc, gpu_ids)
        except store.NotGrouped:  # read alone: names an unknown GPU, reads a legacy body
            try:
                batch = _parse_stored(doc)
                wire.check_gpu_indices(batch, set(gpu_ids))  # a GPU may have gone since
            except FieldError as exc:
                failed.append((batch_uuid, exc.message))
                continue
            columns.add_batch(batch, gpu_ids)
        stored.append((batch_uuid, host_id))
    return stored, failed, columns, columns.build() if stored else None


def _mark_late(stored: list[tuple[uuid.UUID, int, int, int]], inserted: list[int],
               teams: dict[int, int]) -> None:
    """Mark the hours of the group's late batches that added samples (late.py), in one INSERT:
    an agent draining its spool after an outage sends a group of late batches, and a query and
    an INSERT for each was a third of the worker's time then. Live batches cost nothing here.
    `stored`: (batch id, host id, first and last sample's time in microseconds) per batch;
    `teams`: each host's team."""
    # late.is_late for each batch, as one integer comparison: the hour the next rollup reaches
    # is whole, so a batch is late exactly when its first sample is before it.
    reach_us = int(late.reach(timezone.now()).timestamp()) * 1_000_000
    spans = [(teams[host_id], _from_us(first_us), _from_us(last_us))
             for (_, host_id, first_us, last_us), k in zip(stored, inserted, strict=True)
             if k and first_us < reach_us]
    if spans:
        late.mark_many(spans)


def _from_us(us: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(us / 1_000_000, dt.UTC)


def pending_batch_ids(cutoff, limit: int) -> list:
    return list(
        IngestBatch.objects.filter(status=IngestBatch.Status.PENDING, received_at__lt=cutoff)
        .order_by("received_at")
        .values_list("id", flat=True)[:limit]
    )


INVENTORY_LIMIT = 64


def _text_ok(value, max_len: int) -> bool:
    # PostgreSQL text cannot hold NUL: refuse it here as bad input rather than fail in the write.
    return isinstance(value, str) and len(value) <= max_len and "\x00" not in value


def _device_kind(g: dict, i: int) -> tuple[str, str]:
    """The kind and vendor the agent sent (issue 33: amd-smi, neuron-monitor, tegrastats send
    both), each checked; what it left out (NVML, dcgm-exporter, older agents) is derived from
    the model name."""
    kind, vendor = g.get("kind"), g.get("vendor")
    if kind is not None and kind not in DeviceKind.values:
        raise invalid(f"gpus[{i}].kind", f"must be one of {', '.join(DeviceKind.values)} or null")
    if vendor is not None and not _text_ok(vendor, 32):
        raise invalid(f"gpus[{i}].vendor", "must be a string of at most 32 characters or null")
    derived_kind, derived_vendor = device_kind_of(g.get("name", ""))
    return kind or derived_kind, (vendor or derived_vendor).lower()


def register_inventory(host: Host, doc) -> list[Gpu]:
    """The agent tells which GPUs the host has; unknown indices become Gpu rows."""
    if not isinstance(doc, dict):
        raise invalid("", "the inventory must be a JSON object")
    gpus = doc.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        raise invalid("gpus", "must be a non-empty array")
    if len(gpus) > INVENTORY_LIMIT:
        raise invalid("gpus", f"at most {INVENTORY_LIMIT} GPUs per host")
    clean, seen = [], set()
    for i, g in enumerate(gpus):
        if not isinstance(g, dict):
            raise invalid(f"gpus[{i}]", "must be an object")
        index = wire.json_int(g.get("index"))  # 3.0 is the integer 3 in JSON Schema
        if type(index) is not int or not 0 <= index <= 1023:
            raise invalid(f"gpus[{i}].index", "must be an integer between 0 and 1023")
        if index in seen:  # two rows for one GPU would break the (host, index) key: a 500
            raise invalid(f"gpus[{i}].index", f"GPU {index} appears twice in the inventory")
        seen.add(index)
        g = {**g, "index": index}
        for key in ("uuid", "name"):
            if not _text_ok(g.get(key, ""), 96):
                raise invalid(f"gpus[{i}].{key}", "must be a string of at most 96 characters")
        for key in ("power_limit_w", "memory_total_mib", "max_sm_clock_mhz", "max_mem_clock_mhz"):
            v = g.get(key)
            if v is not None and (type(v) not in (int, float) or not 0 <= v < 1e7):
                raise invalid(f"gpus[{i}].{key}", "must be a non-negative number or null")
        g["kind"], g["vendor"] = _device_kind(g, i)
        clean.append(g)
    for key in ("agent_version", "hostname"):
        # Checked against the column, so an overlong value is a 422 here, not a database error.
        limit = Host._meta.get_field(key).max_length
        if not _text_ok(doc.get(key, ""), limit):
            raise invalid(key, f"must be a string of at most {limit} characters")
    with transaction.atomic():
        known = {gpu.index: gpu for gpu in Gpu.objects.select_for_update().filter(host=host)}
        for g in clean:
            values = {"uuid": g.get("uuid", ""), "name": g.get("name", ""),
                      "power_limit_w": g.get("power_limit_w"),
                      "memory_total_mib": g.get("memory_total_mib"),
                      "max_sm_clock_mhz": g.get("max_sm_clock_mhz"),
                      "max_mem_clock_mhz": g.get("max_mem_clock_mhz"),
                      "kind": g["kind"], "vendor": g["vendor"]}
            gpu = known.get(g["index"])
            if gpu is None:
                Gpu.objects.create(host=host, index=g["index"], **values)
            elif any(getattr(gpu, k) != v for k, v in values.items()):
                # Saved only when something changed: every agent start re-sends the same
                # inventory, and a Gpu save makes every team's stored cost figures stale
                # (dashboards.apps), so a fleet restarting its agents recomputed them all.
                for k, v in values.items():
                    setattr(gpu, k, v)
                gpu.save(update_fields=list(values))
        Host.objects.filter(id=host.id).update(
            last_seen=timezone.now(),
            agent_version=doc.get("agent_version") or host.agent_version,
            hostname=doc.get("hostname") or host.hostname,
        )
    return list(host.gpus.all())
