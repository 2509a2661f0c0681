"""Every error under /api/ in the one documented shape, whoever produced it.

The API's own handlers (greenops/api/v1.py) answer {"error", "field", "message"}. What reaches a
client without passing them was still Django's or django-ninja's: a 405 from ninja's method
dispatch as plain text, Django's HTML 400 (a Host header it refuses, a malformed body a
middleware read) and 404 (a path the URLconf does not know), and Django's HTML 500. This
middleware, right after SecurityMiddleware, rewrites any 4xx/5xx under /api/ that is not JSON
into the shape, keeping its status and headers (Allow, Retry-After), and never echoes what the
HTML said. A 500 says nothing of its cause: the traceback is logged by Django as before.
"""

from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse

API_PREFIX = "/api/"

CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
         405: "method_not_allowed", 406: "not_acceptable", 409: "conflict", 413: "too_large",
         415: "unsupported_media_type", 422: "validation_error", 429: "rate_limited",
         500: "server_error", 502: "bad_gateway", 503: "unavailable", 504: "timeout"}
MESSAGES = {
    400: "the request could not be read",
    404: "no such API path",
    405: "method not allowed here; the Allow header lists those that are",
    500: "the server failed to answer this request; it is logged",
}


def error_body(status: int, message: str | None = None, field: str | None = None) -> bytes:
    return orjson.dumps({"error": CODES.get(status, "error"), "field": field,
                         "message": message or MESSAGES.get(status, "request refused")})


def as_json(response: HttpResponse) -> HttpResponse:
    """`response` in the house shape, same status and headers (but the content's)."""
    status = response.status_code
    message = None
    if status == 405 and response.has_header("Allow"):
        message = f"method not allowed here; use {response['Allow']}"
    new = HttpResponse(error_body(status, message), status=status,
                       content_type="application/json")
    for name, value in response.items():
        if name.lower() not in ("content-type", "content-length"):
            new[name] = value
    new.cookies = response.cookies
    return new


class ApiErrorShape:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return shaped(request, self.get_response(request))


def shaped(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """`response` as a client under /api/ gets it: an error not in the house shape rewritten."""
    if (response.status_code >= 400 and request.path_info.startswith(API_PREFIX)
            and not response.get("Content-Type", "").startswith("application/json")
            and not getattr(response, "streaming", False)):
        return as_json(response)
    return response
