"""POST /api/v1/samples' lean path (ingest.accept_samples): one statement stores a valid batch,
the token's host comes from this process's cache, and still a revoked or rotated token stops at
once, a batch is durable before its 202, and every 4xx is the one accept_batch gave."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from greenops.telemetry import enrollment, ingest
from greenops.telemetry.models import GpuSample, IngestBatch
from tests.support.factories import gz, make_batch, make_host

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="the one-statement path is PostgreSQL's")


def post(client, token, doc, **extra):
    return client.post("/api/v1/samples", gz(doc) if isinstance(doc, dict) else doc,
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}",
                       HTTP_CONTENT_ENCODING="gzip", **extra)


@pytest.mark.django_db
def test_a_cached_token_costs_one_statement_per_batch(host, client, django_assert_num_queries):
    _, token = host
    ingest.forget_tokens()
    with django_assert_num_queries(2):  # the token lookup, then the statement that stores
        assert post(client, token, make_batch()).status_code == 202
    with django_assert_num_queries(1):  # the token is cached: the statement checks it again
        r = post(client, token, make_batch())
    assert r.status_code == 202 and r.json()["status"] == "queued"
    assert IngestBatch.objects.filter(status="pending").count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["revoke", "rotate", "remove"])
def test_revoking_a_cached_token_takes_effect_at_once(host, client, users, how):
    h, token = host
    assert post(client, token, make_batch()).status_code == 202  # now cached in this process
    new_token = getattr(enrollment, how)(h, users["owner"])
    # A bad body under the dead (still cached) token is a 401, as it was before the cache.
    assert post(client, token, b"not gzip").status_code == 401
    ingest._confirmed_tokens[ingest.hash_token(token)] = time.monotonic()  # cached again
    r = post(client, token, make_batch())  # the storing statement itself refuses it
    assert r.status_code == 401 and r.json()["field"] == "Authorization"
    assert ingest.hash_token(token) not in ingest._confirmed_tokens
    assert IngestBatch.objects.count() == 1
    if how == "rotate":
        assert post(client, new_token, make_batch()).status_code == 202


@pytest.mark.django_db
def test_an_unknown_token_is_refused_before_its_body_is_read(host, client):
    r = post(client, "gho_never-issued", b"\x1f\x8b not even gzip")
    assert r.status_code == 401 and r.json()["field"] == "Authorization"


@pytest.mark.django_db
def test_unknown_gpu_is_named_before_a_bad_spool_report(host, client):
    """accept_batch checked GPU indices, then the spool report: the same order here."""
    _, token = host
    both = make_batch(spool={"depth": -1})
    both["samples"]["gpu_index"][3] = 5
    r = post(client, token, both)
    assert r.status_code == 422 and r.json()["field"] == "samples.gpu_index[3]"
    r = post(client, token, make_batch(spool={"depth": -1}))
    assert r.status_code == 422 and r.json()["field"] == "spool.depth"
    assert IngestBatch.objects.count() == 0


@pytest.mark.django_db
def test_resend_and_another_hosts_batch_id(host, other_team, client):
    _, token = host
    doc = make_batch()
    assert post(client, token, doc).json()["status"] == "queued"
    assert post(client, token, doc).json() == {"batch_id": doc["batch_id"], "samples": 10,
                                               "status": "duplicate"}
    _, other_token = make_host(other_team, name="other-1", gpus=2)
    r = post(client, other_token, doc)
    assert r.status_code == 409 and r.json()["field"] == "batch_id"
    # The other host's GPUs are not this batch's business: its resend of an unknown GPU is 422.
    doc3 = make_batch(gpus=(0, 2))
    r = post(client, other_token, doc3)
    assert r.status_code == 422 and r.json()["field"].startswith("samples.gpu_index")
    assert IngestBatch.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_durable_before_its_202(team, client, settings, monkeypatch):
    """Another connection sees the batch row as soon as the 202 is back: it was committed, not
    left in a transaction that a crash of the web process would roll back."""
    settings.CELERY_TASK_ALWAYS_EAGER = False  # leave it pending: only acceptance is tested
    settings.REDIS_URL = ""
    # Queue nothing. Not left to Celery's own eager flag: the app reads it from the settings once,
    # so in a whole-suite run an earlier test decides it, and an eager store made this row "done".
    queued = []
    monkeypatch.setattr(ingest, "_enqueue",
                        lambda task, batch_id: queued.append(batch_id) or True)  # "queued"
    h, token = make_host(team, name="durable", gpus=2)
    doc = make_batch()
    r = post(client, token, doc)
    assert r.status_code == 202
    dsn = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as other:
        row = other.execute("SELECT host_id, n_samples, status FROM telemetry_ingestbatch "
                            "WHERE id = %s", (doc["batch_id"],)).fetchone()
    assert row == (h.id, 10, "pending")
    assert queued == [doc["batch_id"]]
    assert GpuSample.objects.count() == 0


def _prepared_accepts() -> int:
    """How often this connection's prepared POST /samples statement has run (0: none
    prepared). The test connection outlives a test, so tests compare before and after."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT generic_plans + custom_plans FROM pg_prepared_statements "
                       "WHERE statement LIKE %s", ["%INSERT INTO telemetry_ingestbatch%"])
        rows = cursor.fetchall()
    assert len(rows) <= 1, rows
    return rows[0][0] if rows else 0


def _prepared_names() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.django_db
def test_the_storing_statement_is_parsed_once_per_connection(host, client):
    """It ran parsed and planned per request: most of PostgreSQL's CPU for a small batch."""
    _, token = host
    before = _prepared_accepts()
    for _ in range(3):
        assert post(client, token, make_batch()).status_code == 202
    assert _prepared_accepts() == before + 3  # one prepared statement, run by every request
    # Other statements keep Django's default: not prepared however often they run.
    names = _prepared_names()
    for _ in range(8):
        ingest.known_gpus(host[0])
        ingest._host_id(ingest.hash_token(token))
    assert _prepared_names() == names


@pytest.mark.django_db
def test_prepared_statements_can_be_turned_off_for_a_pooler(host, client, settings):
    settings.DB_PREPARED_STATEMENTS = False
    _, token = host
    before = _prepared_accepts()
    for _ in range(3):
        assert post(client, token, make_batch()).status_code == 202
    assert _prepared_accepts() == before
    assert IngestBatch.objects.count() == 3
