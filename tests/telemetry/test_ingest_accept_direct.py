"""The accept statement of POST /api/v1/samples is sent through libpq itself
(greenops.telemetry.ingest._accept_direct), not through a cursor: every answer it leads to is the
cursor's, a statement the session lost is prepared again, a connection PostgreSQL dropped is
retried on a fresh one, a failure PostgreSQL reports is raised as the cursor raises it, and
whatever watches queries (an execute_wrapper, DEBUG's log) still sees the statement."""

from __future__ import annotations

from unittest import mock

import psycopg
import pytest
from django.db import InternalError, connection, transaction

from greenops.telemetry import ingest, store
from greenops.telemetry.models import Host, IngestBatch
from tests.support.factories import make_batch, make_host
from tests.support.postgres import drop_backend
from tests.telemetry.test_ingest_fast_path import app, call, gz  # noqa: F401 (app: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as the endpoint runs


@pytest.fixture
def kept_connection():
    """The web's connection kept between requests, as DB_CONN_MAX_AGE keeps it in production
    (the suite runs with 0: a connection per request)."""
    connection.close()
    saved = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = 600
    yield connection
    connection.settings_dict["CONN_MAX_AGE"] = saved
    connection.close()


def no_cursor(*args, **kwargs):
    raise AssertionError("the accept statement went through a cursor")


def post(app, token: str, doc) -> tuple[int, dict]:  # noqa: F811 (app: the fixture)
    status, _, answer = call(app, body=gz(doc), token=token, HTTP_CONTENT_ENCODING="gzip")
    return status, answer


def test_every_answer_of_the_accept_statement_comes_through_libpq(host, team, app,  # noqa: F811
                                                                   kept_connection):
    h, token = host
    doc = make_batch(gpus=(0, 1))
    with mock.patch.object(store, "server_bound_cursor", no_cursor):
        assert post(app, token, doc) == (202, {"batch_id": doc["batch_id"], "samples": 10,
                                               "status": "queued"})
        assert post(app, token, doc)[1]["status"] == "duplicate"  # a resend
        status, answer = post(app, token, make_batch(gpus=(0, 5)))  # GPU 5 is not registered
        assert (status, answer["field"]) == (422, "samples.gpu_index[5]")
        _, other_token = make_host(team, name="gpu-node-2")
        status, answer = post(app, other_token, doc)  # another host's batch id
        assert (status, answer["field"]) == (409, "batch_id")
        assert Host.objects.get(id=h.id).last_seen is not None  # the statement touched it
        h.set_new_token()  # rotated: this process's cached token is refused by the statement
        h.save(update_fields=["token_hash"])
        assert post(app, token, make_batch())[0] == 401
    row = IngestBatch.objects.get()
    assert (row.id.hex, row.host_id, row.n_samples, row.status) == (
        doc["batch_id"].replace("-", ""), h.id, 10, "pending")


def test_a_statement_the_session_lost_or_kept_is_used(host, app, kept_connection):  # noqa: F811
    _, token = host
    assert post(app, token, make_batch())[0] == 202
    assert connection.connection in ingest._accept_prepared
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # what a DISCARD ALL or a pooler's reset does
    with mock.patch.object(store, "server_bound_cursor", no_cursor):
        assert post(app, token, make_batch())[0] == 202
        # The other way round: the session holds it, this process forgot (its PREPARE is then
        # refused as a duplicate, and the statement used as it is).
        ingest._accept_prepared.discard(connection.connection)
        assert post(app, token, make_batch())[0] == 202
    assert IngestBatch.objects.count() == 3


def test_a_connection_postgresql_dropped_is_retried_on_a_fresh_one(host, app,  # noqa: F811
                                                                   kept_connection):
    _, token = host
    assert post(app, token, make_batch())[0] == 202
    pid = connection.connection.info.backend_pid
    drop_backend(pid)
    with mock.patch.object(store, "server_bound_cursor", no_cursor):
        assert post(app, token, make_batch())[0] == 202
    assert connection.connection.info.backend_pid != pid
    assert IngestBatch.objects.count() == 2


def test_a_failure_postgresql_reports_is_raised_as_the_cursor_raises_it(host, app,  # noqa: F811
                                                                      kept_connection):
    """A server that takes no writes (a primary demoted in a failover, or set read-only): the
    cursor's exception, and to the agent the API's 503 with Retry-After, on the fast path and
    through Django's operation alike; nothing stored."""
    h, token = host
    auth = ingest.samples_auth(f"Bearer {token}")
    ingest.accept_samples(auth, gz(make_batch()), "gzip")  # prepared on this connection
    with connection.cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")
    try:
        with mock.patch.object(store, "server_bound_cursor",
                               wraps=store.server_bound_cursor) as cursor_used, \
                pytest.raises(InternalError, match="read-only transaction"):
            ingest.accept_samples(auth, gz(make_batch()), "gzip")
        assert cursor_used.call_count == 1  # libpq's failure, then the cursor's exception
        status, headers, answer = call(app, body=gz(make_batch()), token=token,
                                       HTTP_CONTENT_ENCODING="gzip")
        assert (status, answer["error"], headers["Retry-After"]) == (503, "unavailable", "5")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET default_transaction_read_only")
    assert IngestBatch.objects.count() == 1


@pytest.mark.parametrize("path, function", [("/api/v1/samples", "accept_samples"),
                                            ("/api/v1/inventory", "register_inventory")])
def test_through_djangos_operations_a_read_only_database_is_a_503(host, client, settings, path,
                                                                   function):
    """The samples operation answers it itself, any other operation through the API's
    handler (greenops.api.error_answers); another InternalError stays a server error."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    _, token = host
    body = gz(make_batch()) if function == "accept_samples" else gz(
        {"gpus": [{"index": 0, "uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3"}]})
    read_only = InternalError("cannot execute INSERT in a read-only transaction")
    read_only.__cause__ = psycopg.errors.ReadOnlySqlTransaction()
    client.raise_request_exception = False
    for exc, want in ((read_only, (503, "unavailable")),
                      (InternalError("some other internal error"), (500, "server_error"))):
        with mock.patch.object(ingest, function, side_effect=exc):
            r = client.post(path, body, content_type="application/json",
                            HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_CONTENT_ENCODING="gzip")
        assert (r.status_code, r.json()["error"]) == want, exc
        if r.status_code == 503:
            assert r["Retry-After"] == "5"
    assert IngestBatch.objects.count() == 0


def test_what_watches_queries_still_sees_the_accept_statement(host, settings):
    _, token = host
    auth = ingest.samples_auth(f"Bearer {token}")
    seen = []

    def watch(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        ingest.accept_samples(auth, gz(make_batch()), "gzip")
    assert ingest._ACCEPT in seen
    settings.DB_PREPARED_STATEMENTS = False  # a transaction-mode pooler: no named statements
    with mock.patch.object(ingest, "_accept_direct", no_cursor):
        ingest.accept_samples(auth, gz(make_batch()), "gzip")
    assert IngestBatch.objects.count() == 2


def test_inside_a_transaction_the_cursor_runs_it(host, kept_connection):
    """Inside transaction.atomic the batch row is the caller's to commit or roll back (libpq on
    its own would run the statement before psycopg's BEGIN, outside the transaction); and a
    failure there would abort the transaction before the cursor could try again."""
    _, token = host
    auth = ingest.samples_auth(f"Bearer {token}")
    ingest.accept_samples(auth, gz(make_batch()), "gzip")  # prepared on this connection
    with pytest.raises(RuntimeError), transaction.atomic():
        ingest.accept_samples(auth, gz(make_batch()), "gzip")
        raise RuntimeError("the caller rolls back")
    assert IngestBatch.objects.count() == 1
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with transaction.atomic():
        IngestBatch.objects.exists()  # psycopg's BEGIN sent: the session is in a transaction
        assert ingest.accept_samples(auth, gz(make_batch()), "gzip")["status"] == "queued"
    assert IngestBatch.objects.count() == 2
