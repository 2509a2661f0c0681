"""POST /api/v1/samples answered at the WSGI level, before Django's request handler.

Every agent posts a batch every few seconds, so this one endpoint is nearly all of a fleet's
requests. It authenticates with the host's bearer token and keeps no session, cookie or CSRF
state, yet it went through static files, sessions, CSRF, authentication, messages, frame options
and the URL resolver: about a third of the web process's CPU per request at the agent's batch
size (profiled with bench/ingest at 80 samples per POST). A middleware right after
SecurityMiddleware then answered it, skipping those. What it could not skip was Django's handler
around any middleware: the WSGIRequest, the middleware chain's wrappers, the response's
conversion. That was 0.14-0.19 ms of the web's 0.82-0.89 ms of CPU per 80-sample POST behind
Granian (two alternating pairs of a throwaway harness, 2026-12-05; bench/ingest then read 0.68-0.76
ms of web CPU a POST against 0.81-0.87 before), so SamplesFirst, which greenops.wsgi serves, now
takes the request from the WSGI server itself and answers it with what the API's operation
(greenops.api.v1.post_samples) answers -- the token check, ingest.accept_samples, the API's own
error answers, SecurityMiddleware's headers -- and closes a connection past its age as Django
would.

It passes on to Django, whose operation answers with answer_samples below, whatever it does not
take as it is: another method or path, a body over the upload limit by its Content-Length
(Django's 413) or with neither a usable Content-Length nor chunked encoding, plain http where
SECURE_SSL_REDIRECT wants a redirect, and the embedded default (SQLite or tasks in-process,
which run at the end of Django's request).
"""

from __future__ import annotations

import functools

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.exception import response_for_exception
from django.core.handlers.wsgi import WSGIRequest
from django.db import (
    close_old_connections,
    connection,
    reset_queries,
)
from django.http import HttpRequest, HttpResponse
from django.middleware.security import SecurityMiddleware

from greenops.api.error_answers import (
    database_unavailable,
    on_database_down,
    on_field_error,
    on_too_big,
)
from greenops.api.errorshape import shaped
from greenops.errors import FieldError
from greenops.telemetry import ingest

SAMPLES_PATH = "/api/v1/samples"
# What the API answers itself, with database_unavailable's errors (the rest is a server error,
# answered as Django answers one).
ANSWERED = (FieldError, RequestDataTooBig)


def answer_samples(request: HttpRequest) -> HttpResponse:
    """POST /api/v1/samples through Django (the operation greenops.api.v1.post_samples): 202
    with what ingest.accept_samples says, or the API's error."""
    # META, not request.headers: the latter builds a dict of every header on first use, for two
    # lookups.
    return _answer(request.META, lambda: request.body, lambda: request)


def _answer(meta: dict, read_body, request_for) -> HttpResponse:
    """What both paths answer: the token checked before the body is read, then the batch
    accepted; an error is answered by the API's handlers, given the request `request_for()`
    builds (the WSGI path builds one only then)."""
    answer = _accept(meta, read_body, request_for)
    return answer if isinstance(answer, HttpResponse) else accepted(answer)


def _accept(meta: dict, read_body, request_for) -> dict | HttpResponse:
    """ingest.accept_samples' answer (a dict: the 202's body), or the API's error response."""
    try:
        auth = ingest.samples_auth(meta.get("HTTP_AUTHORIZATION"))
        return ingest.accept_samples(auth, read_body(), meta.get("HTTP_CONTENT_ENCODING"))
    except Exception as exc:
        if not isinstance(exc, ANSWERED) and not database_unavailable(exc):
            raise
        return _sized(error_response(request_for(), exc))


def accepted(answer: dict) -> HttpResponse:
    # Serialised directly: the answer is built from validated values (strings and ints), so
    # running it through the Accepted schema, or JsonResponse's encoder, only cost CPU on the
    # busiest endpoint.
    return _sized(HttpResponse(orjson.dumps(answer), status=202, content_type="application/json"))


def error_response(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The API's answer to what accepting a batch raised (greenops.api.error_answers)."""
    if isinstance(exc, FieldError):
        return on_field_error(request, exc)
    if isinstance(exc, RequestDataTooBig):
        return on_too_big(request, exc)
    return on_database_down(request, exc)  # PostgreSQL down or read-only: 503, Retry-After


def _sized(response: HttpResponse) -> HttpResponse:
    # What CommonMiddleware would add: a client can then keep its connection.
    response.headers["Content-Length"] = str(len(response.content))
    return response


class _Scheme:
    """All SecurityMiddleware.process_response reads of a request (is_secure, for HSTS),
    computed by Django's own HttpRequest code from the WSGI environ without building a
    request."""

    __slots__ = ("META",)
    scheme = HttpRequest.scheme
    is_secure = HttpRequest.is_secure

    def __init__(self, environ: dict) -> None:
        self.META = environ

    def _get_scheme(self) -> str:
        return self.META.get("wsgi.url_scheme", "http")


class SamplesFirst:
    """The WSGI application: POST /api/v1/samples answered here, everything else by `app`."""

    def __init__(self, app) -> None:
        self.app = app
        self.security = SecurityMiddleware(_never_called)
        self._accepted_headers: dict[bool, list[tuple[str, str]]] = {}

    def takes(self, environ: dict) -> int | None:
        """The body's length if this request is answered here (READ_TO_END: a chunked body the
        server has de-chunked); None: Django answers it."""
        if environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO") != SAMPLES_PATH:
            return None
        if connection.vendor != "postgresql" or not ingest.coalescing():
            return None
        declared = environ.get("CONTENT_LENGTH") or ""
        if not declared and _chunked(environ):
            length = READ_TO_END
        else:
            try:
                length = int(declared)
            except ValueError:
                return None
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            if length < 0 or (limit is not None and length > limit):
                return None
        if settings.SECURE_SSL_REDIRECT and not _Scheme(environ).is_secure():
            return None  # SecurityMiddleware's redirect (or its exemptions)
        return length

    def __call__(self, environ: dict, start_response):
        length = self.takes(environ)
        if length is None:
            return self.app(environ, start_response)
        if settings.DEBUG:
            reset_queries()  # DEBUG logs every query; Django empties the log per request
        try:
            status, headers, content = self.answer(environ, length)
        finally:
            # Of what Django does when a request finishes, the one thing this path needs: a
            # connection past CONN_MAX_AGE, or one that failed, is closed. (Its other receivers
            # close caches, reset a URLconf and run the embedded default's in-process tasks,
            # none of which this path uses; sending the signals cost 0.04-0.09 ms a request in a
            # cProfile'd loop.)
            close_old_connections()
        start_response(status, headers)
        return [content]

    def answer(self, environ: dict, length: int) -> tuple[str, list, bytes]:
        """(status line, headers, body) of the answer."""
        request_for = functools.cache(lambda: WSGIRequest(environ))  # for an error only: rare
        try:
            answer = _accept(environ, lambda: _read_body(environ, length), request_for)
        except Exception as exc:  # a server error, answered and logged as Django does
            answer = _sized(shaped(request_for(), response_for_exception(request_for(), exc)))
        if isinstance(answer, HttpResponse):
            response = self.security.process_response(_Scheme(environ), answer)
            return (f"{response.status_code} {response.reason_phrase}", list(response.items()),
                    response.content)
        # The 202, as accepted() builds it and SecurityMiddleware heads it, without building
        # them: their headers depend only on the scheme (HSTS) and the middleware's settings,
        # read once when it was made. An HttpResponse, its headers and the middleware's pass
        # over them cost 0.03 ms of the web's CPU a POST (thread CPU time inside the server,
        # bench/ingest at 80 samples per POST, a diagnostic), a tenth of the request.
        content = orjson.dumps(answer)
        secure = bool(self.security.sts_seconds) and _Scheme(environ).is_secure()
        return ("202 Accepted",
                [*self.accepted_headers(secure), ("Content-Length", str(len(content)))],
                content)

    def accepted_headers(self, secure: bool) -> list[tuple[str, str]]:
        """accepted()'s headers, less Content-Length, after SecurityMiddleware's pass."""
        headers = self._accepted_headers.get(secure)
        if headers is None:
            response = accepted({})
            self.security.process_response(_FixedScheme(secure), response)
            headers = [(k, v) for k, v in response.items() if k != "Content-Length"]
            self._accepted_headers[secure] = headers
        return headers


class _FixedScheme:
    """A request that is, or is not, secure: all SecurityMiddleware.process_response reads."""

    def __init__(self, secure: bool) -> None:
        self.secure = secure

    def is_secure(self) -> bool:
        return self.secure


# A body sent with Transfer-Encoding: chunked has no Content-Length. Django reads such a body as
# empty (the API then answered "zero-length document" to a batch it never read); a server that
# de-chunks and marks the stream terminated (wsgi.input_terminated: Granian, gunicorn) lets this
# path read it to its end, within the upload limit.
READ_TO_END = -1


def _chunked(environ: dict) -> bool:
    return bool(environ.get("wsgi.input_terminated")) and "chunked" in environ.get(
        "HTTP_TRANSFER_ENCODING", "").lower()


def _read_body(environ: dict, length: int) -> bytes:
    stream = environ["wsgi.input"]
    if length != READ_TO_END:
        return stream.read(length)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(body) > limit:
        raise RequestDataTooBig("the chunked body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE")
    return body


def _never_called(request):  # the middlewares' get_response: only their hooks are used here
    raise AssertionError("not a middleware chain")
