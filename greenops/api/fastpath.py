"""POST /api/v1/samples without the middleware that browser pages need.

Every agent posts a batch every few seconds, so this one endpoint is nearly all of a fleet's
requests. It authenticates with the host's bearer token and keeps no session, cookie or CSRF
state, yet it went through static files, sessions, CSRF, authentication, messages, frame options
and the URL resolver: about a third of the web process's CPU per request at the agent's batch
size (profiled with bench/ingest at 80 samples per POST). This middleware sits right after
SecurityMiddleware, whose HTTPS redirect and headers still apply, and answers that one request
itself with what the API's operation (greenops.api.v1.post_samples) does -- the token check,
ingest.accept_samples, and the API's own error answers -- without django-ninja's dispatch around
it (its checks, auth and exception routing were a further 6 % of the web's CPU per batch, for an
operation with no parameters to parse). Every other request goes through the whole stack.
"""

from __future__ import annotations

import orjson
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from greenops.api.error_answers import on_database_down, on_field_error, on_too_big
from greenops.errors import FieldError
from greenops.telemetry import ingest

SAMPLES_PATH = "/api/v1/samples"


class SamplesFastPath:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path_info != SAMPLES_PATH:
            return self.get_response(request)
        return answer_samples(request)


def answer_samples(request: HttpRequest) -> HttpResponse:
    """POST /api/v1/samples: 202 with what ingest.accept_samples says, or the API's error
    (the handlers of greenops.api.error_answers, as every other operation's)."""
    # META, not request.headers: the latter builds a dict of every header on first use, for two
    # lookups.
    meta = request.META
    try:
        auth = ingest.samples_auth(meta.get("HTTP_AUTHORIZATION"))
        answer = ingest.accept_samples(auth, request.body, meta.get("HTTP_CONTENT_ENCODING"))
    except FieldError as exc:
        response = on_field_error(request, exc)
    except RequestDataTooBig as exc:
        response = on_too_big(request, exc)
    except (OperationalError, InterfaceError) as exc:  # PostgreSQL down: 503, Retry-After
        response = on_database_down(request, exc)
    else:
        # Serialised directly: the answer is built from validated values (strings and ints), so
        # running it through the Accepted schema, or JsonResponse's encoder, only cost CPU on
        # the busiest endpoint.
        response = HttpResponse(orjson.dumps(answer), status=202,
                                content_type="application/json")
    # What CommonMiddleware would add: a client can then keep its connection.
    response.headers["Content-Length"] = str(len(response.content))
    return response
