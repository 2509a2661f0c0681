"""POST /api/v1/samples is answered at the WSGI level (greenops.api.fastpath.SamplesFirst),
before Django's handler: no middleware, URL resolver or ninja dispatch runs for it, and its
answers -- success and every error -- are the API's, with SecurityMiddleware's headers. Every
other request, and the ones the fast path leaves to Django, take the whole stack, whose
operation (greenops.api.v1.post_samples) answers the endpoint the same way."""

from __future__ import annotations

import gzip
import io
import logging
from unittest import mock

import orjson
import pytest
from django.core.handlers.base import BaseHandler
from django.core.wsgi import get_wsgi_application
from django.db import OperationalError
from django.test import RequestFactory

from greenops.api import fastpath
from greenops.telemetry import ingest
from greenops.telemetry.models import IngestBatch
from tests.support.factories import make_batch


def refuse(*args, **kwargs):
    raise AssertionError("Django's handler ran")


def call(app, method: str = "POST", path: str = fastpath.SAMPLES_PATH, body: bytes = b"",
         token: str | None = None, without: tuple[str, ...] = (),
         **environ) -> tuple[int, dict, dict | bytes]:
    """Run one request through the WSGI application `app`: (status, headers, JSON or bytes).
    `without`: environ keys the request lacks (a body sent without Content-Length)."""
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    request = RequestFactory().generic(method, path, body, content_type="application/json",
                                       **extra, **environ)
    for key in without:
        request.environ.pop(key, None)
    if "CONTENT_LENGTH" in without:  # a de-chunked stream, read to its end as a server gives it
        request.environ["wsgi.input"] = io.BytesIO(body)
    seen = {}

    def start_response(status, headers):
        seen["status"], seen["headers"] = int(status.split()[0]), dict(headers)

    chunks = app(request.environ, start_response)
    content = b"".join(chunks)
    if hasattr(chunks, "close"):
        chunks.close()  # what a WSGI server does: Django's response then finishes the request
    is_json = seen["headers"].get("Content-Type", "").startswith("application/json")
    return seen["status"], seen["headers"], orjson.loads(content) if is_json else content


@pytest.fixture
def app(settings, monkeypatch):
    """greenops.wsgi's application with a real broker configured (the fast path's condition),
    the store tasks it would queue recorded instead of published."""
    from greenops.wsgi import application

    settings.CELERY_TASK_ALWAYS_EAGER = False
    kicked: list[str] = []
    monkeypatch.setattr(ingest, "_kick", lambda task, batch_id: kicked.append(batch_id))
    application.kicked = kicked
    yield application
    del application.kicked


def gz(doc) -> bytes:
    return gzip.compress(orjson.dumps(doc))


def test_greenops_wsgi_serves_the_fast_path():
    from greenops.wsgi import application, django_application

    assert isinstance(application, fastpath.SamplesFirst)
    assert application.app is django_application


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_answered_before_djangos_handler_with_the_security_headers(host, app):
    _, token = host
    doc = make_batch()
    with mock.patch.object(BaseHandler, "get_response", refuse):
        status, headers, answer = call(app, body=gz(doc), token=token,
                                       HTTP_CONTENT_ENCODING="gzip")
    assert status == 202
    assert answer == {"batch_id": doc["batch_id"], "samples": 10, "status": "queued"}
    assert app.kicked == [doc["batch_id"]]
    assert IngestBatch.objects.get().status == "pending"  # stored before the 202
    assert headers["X-Content-Type-Options"] == "nosniff"  # SecurityMiddleware's
    assert headers["Referrer-Policy"] and headers["Cross-Origin-Opener-Policy"]
    assert int(headers["Content-Length"]) == len(orjson.dumps(answer))
    assert "X-Frame-Options" not in headers and "Set-Cookie" not in headers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("https", [False, True])
def test_the_202_carries_the_headers_the_response_and_the_middleware_gave_it(
        host, settings, monkeypatch, https):
    """The 202 is written without an HttpResponse or the middleware's pass (their headers are
    prepared once): the same headers as accepted() built and SecurityMiddleware added, HSTS on
    https included."""
    from django.middleware.security import SecurityMiddleware

    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.SECURE_HSTS_SECONDS, settings.SECURE_HSTS_PRELOAD = 31_536_000, True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    monkeypatch.setattr(ingest, "_kick", lambda task, batch_id: None)
    app = fastpath.SamplesFirst(refuse)  # its middleware made under these settings
    _, token = host
    proto = {"HTTP_X_FORWARDED_PROTO": "https"} if https else {}
    status, headers, answer = call(app, body=gz(make_batch()), token=token,
                                   HTTP_CONTENT_ENCODING="gzip", **proto)
    assert status == 202
    request = RequestFactory().post(fastpath.SAMPLES_PATH, **proto)
    want = SecurityMiddleware(refuse).process_response(request, fastpath.accepted(answer))
    assert headers == dict(want.items())
    assert ("Strict-Transport-Security" in headers) is https
    assert headers["Strict-Transport-Security" if https else "Content-Type"] == (
        "max-age=31536000; preload" if https else "application/json")


@pytest.mark.django_db(transaction=True)
def test_errors_on_the_fast_path_are_the_house_errors(host, app):
    _, token = host
    with mock.patch.object(BaseHandler, "get_response", refuse):
        status, headers, answer = call(app, body=gz(make_batch()), token="gho_not-a-token",
                                       HTTP_CONTENT_ENCODING="gzip")
        assert status == 401 and answer["field"] == "Authorization"
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert headers["X-Content-Type-Options"] == "nosniff"
        status, _, answer = call(app, body=orjson.dumps({"batch_id": "x"}), token=token)
        assert (status, answer["error"], answer["field"]) == (422, "validation_error",
                                                               "batch_id")
        status, _, answer = call(app, body=b"{not json", token=token)
        assert status in (400, 422) and answer["error"] and answer["message"]
    assert IngestBatch.objects.count() == 0 and app.kicked == []


@pytest.mark.django_db(transaction=True)
def test_the_database_down_is_a_503_and_a_bug_a_500_in_the_house_shape(host, app, caplog):
    _, token = host
    body = gz(make_batch())
    with mock.patch.object(ingest, "accept_samples",
                           side_effect=OperationalError("connection refused")):
        status, headers, answer = call(app, body=body, token=token, HTTP_CONTENT_ENCODING="gzip")
    assert (status, answer["error"]) == (503, "unavailable") and headers["Retry-After"]
    with mock.patch.object(ingest, "accept_samples", side_effect=RuntimeError("a bug")), \
            caplog.at_level(logging.ERROR, logger="django.request"):
        status, headers, answer = call(app, body=body, token=token, HTTP_CONTENT_ENCODING="gzip")
    assert (status, answer["error"]) == (500, "server_error")
    assert "a bug" not in orjson.dumps(answer).decode()  # the cause is logged, not answered
    assert any("a bug" in str(r.exc_info) for r in caplog.records if r.exc_info)
    assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db(transaction=True)
def test_the_fast_path_closes_a_connection_past_its_age_as_django_would(host, app):
    _, token = host
    with mock.patch.object(fastpath, "close_old_connections") as closed:
        call(app, body=gz(make_batch()), token=token, HTTP_CONTENT_ENCODING="gzip")
    assert closed.call_count == 1


@pytest.mark.django_db(transaction=True)
def test_what_the_fast_path_does_not_take_goes_to_django(host, app, settings):
    _, token = host
    body = gz(make_batch())
    from greenops.api import v1

    with mock.patch.object(v1, "answer_samples", wraps=fastpath.answer_samples) as django:
        # Not POST: the whole stack, which answers 405 (with its frame options header).
        status, headers, answer = call(app, "GET", token=token)
        assert (status, answer["error"]) == (405, "method_not_allowed")
        assert headers["X-Frame-Options"] == "DENY"
        # No Content-Length: Django reads no body, and the API says what is missing.
        status, _, answer = call(app, body=body, token=token, without=("CONTENT_LENGTH",),
                                 HTTP_CONTENT_ENCODING="gzip")
        assert status in (400, 422) and answer["message"]
        # Over the upload limit: Django's 413.
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = len(body) - 1
        status, _, answer = call(app, body=body, token=token, HTTP_CONTENT_ENCODING="gzip")
        assert (status, answer["error"]) == (413, "too_large")
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024
        # Plain http where HTTPS is required: SecurityMiddleware's redirect (a server started
        # with that setting: middleware reads its settings once).
        settings.SECURE_SSL_REDIRECT = True
        https_only = fastpath.SamplesFirst(get_wsgi_application())
        status, headers, _ = call(https_only, body=body, token=token,
                                  HTTP_CONTENT_ENCODING="gzip")
        assert status == 301 and headers["Location"].startswith("https://")
        settings.SECURE_SSL_REDIRECT = False
        assert django.call_count == 2  # the two POSTs Django's operation answered
        # The embedded default (tasks in-process, run at the end of Django's request).
        settings.CELERY_TASK_ALWAYS_EAGER = True
        with mock.patch.object(ingest, "_kick", lambda task, batch_id: None):
            status, _, answer = call(app, body=body, token=token, HTTP_CONTENT_ENCODING="gzip")
        assert status == 202 and django.call_count == 3
    assert app.kicked == []


@pytest.mark.django_db(transaction=True)
def test_a_chunked_batch_is_read_to_its_end_within_the_upload_limit(host, app, settings):
    """Transfer-Encoding: chunked has no Content-Length; a server that de-chunks the body
    (wsgi.input_terminated, as Granian and gunicorn do) lets the fast path read all of it. Django
    would read it as empty, and the API answered "zero-length document" to a batch it never read."""
    _, token = host
    doc = make_batch()
    body = gz(doc)
    chunked = {"HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True,
               "HTTP_CONTENT_ENCODING": "gzip"}
    status, headers, answer = call(app, body=body, token=token, without=("CONTENT_LENGTH",),
                                   **chunked)
    assert (status, answer["status"]) == (202, "queued") and app.kicked == [doc["batch_id"]]
    assert headers["X-Content-Type-Options"] == "nosniff"
    second = gz(make_batch())
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = len(second) - 1  # a byte over: refused, nothing kept
    status, _, answer = call(app, body=second, token=token, without=("CONTENT_LENGTH",),
                             **chunked)
    assert (status, answer["error"]) == (413, "too_large")
    assert IngestBatch.objects.count() == 1
    # A server that does not mark the stream terminated: Django's reading, as before.
    with mock.patch.object(BaseHandler, "get_response", autospec=True,
                           side_effect=BaseHandler.get_response) as django:
        status, _, _ = call(app, body=body, token=token, without=("CONTENT_LENGTH",),
                            HTTP_TRANSFER_ENCODING="chunked", HTTP_CONTENT_ENCODING="gzip")
    assert django.call_count == 1 and status == 400


def test_only_a_post_with_a_usable_length_to_the_samples_path_is_taken(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    taker = fastpath.SamplesFirst(refuse)
    base = {"REQUEST_METHOD": "POST", "PATH_INFO": fastpath.SAMPLES_PATH, "CONTENT_LENGTH": "12",
            "wsgi.url_scheme": "http"}
    assert taker.takes(base) == 12
    for change in ({"REQUEST_METHOD": "PUT"}, {"PATH_INFO": "/api/v1/samples/"},
                   {"CONTENT_LENGTH": ""}, {"CONTENT_LENGTH": "-1"}, {"CONTENT_LENGTH": "1e3"},
                   {"CONTENT_LENGTH": str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}):
        assert taker.takes({**base, **change}) is None, change
    chunked = {**base, "CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": "gzip, chunked",
               "wsgi.input_terminated": True}
    assert taker.takes(chunked) == fastpath.READ_TO_END
    assert taker.takes({**chunked, "wsgi.input_terminated": False}) is None
    assert taker.takes({**chunked, "HTTP_TRANSFER_ENCODING": "gzip"}) is None
    settings.SECURE_SSL_REDIRECT = True
    assert taker.takes(base) is None
    assert taker.takes(chunked) is None
    assert taker.takes({**base, "wsgi.url_scheme": "https"}) == 12
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert taker.takes({**base, "HTTP_X_FORWARDED_PROTO": "https"}) == 12
    assert taker.takes({**base, "wsgi.url_scheme": "https", "HTTP_X_FORWARDED_PROTO": "http"}) \
        is None


@pytest.mark.django_db
def test_djangos_operation_answers_the_same(host, post_batch):
    """The documented operation (v1.post_samples) serves the endpoint for what the fast path
    leaves to Django (and for the test client, which has no WSGI server), with the same answers
    through the whole stack."""
    _, token = host
    doc = make_batch()
    r = post_batch(token, doc)
    assert r.status_code == 202 and r.json() == {"batch_id": doc["batch_id"], "samples": 10,
                                                 "status": "queued"}
    assert r["X-Frame-Options"] == "DENY"  # the whole stack ran
    r = post_batch("gho_not-a-token", make_batch())
    assert r.status_code == 401 and r.json()["field"] == "Authorization"
    r = post_batch(token, {"batch_id": "x"})
    assert r.status_code == 422 and r.json()["field"] == "batch_id"
