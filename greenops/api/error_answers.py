"""The API's instance and its error answers: every error, whatever raised it, is the one
{error, field, message} body (README Errors). greenops.api.v1 mounts the operations on this
instance; greenops.api.fastpath answers POST /samples' errors with the same handlers."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError, InterfaceError, InternalError, OperationalError
from django.http import Http404, HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from greenops import body_limits
from greenops.errors import FieldError, invalid
from greenops.request_body import JSON_VALUE, NO_NUL
from greenops.teams.api_tokens import usage_examples

log = logging.getLogger(__name__)

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "field", "message"],
    "properties": {"error": {"type": "string"}, "field": {"type": ["string", "null"]},
                   "message": {"type": "string"}},
}


class GreenOpsAPI(NinjaAPI):
    """NinjaAPI whose schema says what every operation can answer besides its success: any
    error is the one {error, field, message} body (an OpenAPI `default` response), and an
    operation without an auth class says so (`security: []`) instead of saying nothing."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema["components"].setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        schema["components"]["schemas"]["JsonValue"] = JSON_VALUE
        ref = {"$ref": "#/components/schemas/Error"}
        error = {"description": "Any error: 4xx naming the field at fault (see README Errors)",
                 "content": {"application/json": {"schema": ref}}}
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                for param in operation.get("parameters", ()):
                    _no_nul(param["schema"])
                operation["responses"].setdefault("default", error)
                operation.setdefault("security", [])
                if any("TeamAuth" in s for s in operation["security"]):
                    scope = "read" if method == "get" and "audit" not in path else "admin"
                    operation["description"] = (operation.get("description") or "") + \
                        usage_examples(method, path, scope)
                body = operation.get("requestBody", {}).get("content", {})
                if "application/json" in body:  # its cap, where a client reads the operation
                    cap, name = body_limits.decompressed_cap(path), body_limits.setting_for(path)
                    operation["x-max-decompressed-bytes"] = cap
                    operation["description"] = (
                        (operation.get("description") or "") + "\n\nBody limit: "
                        f"{cap:,} bytes of JSON after gzip decompression ({name}); "
                        "413 `too_large` past it.").strip()
        return schema


api = GreenOpsAPI(
    title="GreenOps API",
    version="1",
    urls_namespace="api-v1",
    description="Host agents send GPU samples; people read their teams' usage.\n\n"
    + body_limits.describe(),
)


@api.exception_handler(FieldError)
def on_field_error(request: HttpRequest, exc: FieldError):
    response = api.create_response(request, exc.as_dict(), status=exc.status)
    if exc.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="greenops"'
    if exc.retry_after_s is not None:
        response["Retry-After"] = str(exc.retry_after_s)
    return response


@api.exception_handler(RequestDataTooBig)
def on_too_big(request: HttpRequest, exc: RequestDataTooBig):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"request body is larger than {limit} bytes (INGEST_MAX_BODY_BYTES)"
    return on_field_error(request, FieldError(413, "too_large", None, message))


# How long a client is asked to wait when a part the request needs is down (PostgreSQL).
UNAVAILABLE_RETRY_AFTER_S = 5


def on_database_down(request: HttpRequest, exc: Exception):
    """PostgreSQL unreachable (restarting, failing over) or taking no writes: 503 with
    Retry-After, not a 500 -- an agent keeps the batch in its spool and sends it again."""
    if not database_unavailable(exc):
        raise exc  # any other InternalError: a server error, answered and logged as Django does
    return on_field_error(request, FieldError(
        503, "unavailable", None, "the database is unreachable or not taking writes; try again "
        "shortly", retry_after_s=UNAVAILABLE_RETRY_AFTER_S))


# SQLSTATE read_only_sql_transaction: a write sent to a server that takes none -- a primary
# demoted to a standby in a failover, or one set read-only -- which psycopg raises as an
# InternalError. Like a server that does not answer, it passes: the request is sent again.
READ_ONLY = "25006"


def database_unavailable(exc: Exception) -> bool:
    """PostgreSQL cannot serve the request now: unreachable, or taking no writes."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, InternalError) and getattr(exc.__cause__, "sqlstate", None) == READ_ONLY


def _no_nul(schema: dict) -> None:
    """A free-text parameter cannot hold NUL (PostgreSQL text cannot): say so in its schema."""
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == "string" and not {"enum", "pattern", "format"} & set(option):
            option["pattern"] = NO_NUL


def on_data_error(request: HttpRequest, exc: Exception):
    """A value PostgreSQL refuses (a NUL character in a text, a number past its column) that
    an app's validation let through: the client's data, so a 422, not a 500. The database's
    message is logged, not echoed. Apps should name the field themselves first."""
    log.warning("data refused by the database at %s: %s", request.path, exc)
    # A NUL in a query parameter: name the parameter (bodies are the apps' to check).
    nul = next((k for k, values in request.GET.lists() if any("\x00" in v for v in values)), None)
    if nul is not None:
        return on_field_error(request, invalid(nul, "must not contain a NUL character (\\u0000)"))
    return on_field_error(request, FieldError(
        422, "validation_error", None, "a value does not fit what the server stores: a NUL "
        "character (\\u0000) in a text, or a number out of range"))


api.add_exception_handler(DataError, on_data_error)
api.add_exception_handler(OperationalError, on_database_down)
api.add_exception_handler(InterfaceError, on_database_down)
api.add_exception_handler(InternalError, on_database_down)


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404):
    return api.create_response(request, {"error": "not_found", "field": None,
                                         "message": str(exc) or "not found"}, status=404)


@api.exception_handler(AuthenticationError)
def on_unauthenticated(request: HttpRequest, exc: AuthenticationError):
    # Only the session endpoints get here (token auth classes raise FieldError themselves).
    return on_field_error(request, FieldError(
        401, "unauthorized", settings.SESSION_COOKIE_NAME,
        "log in first: this endpoint takes the session cookie"))


_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "too_large",
               415: "unsupported_media_type", 429: "rate_limited"}


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError):
    message = str(exc)
    if exc.status_code == 403 and "CSRF" in message:  # session POSTs need Django's CSRF token
        return on_field_error(request, FieldError(
            403, "csrf_failed", "X-CSRFToken", "send the csrftoken cookie's value as X-CSRFToken"))
    return on_field_error(request, FieldError(
        exc.status_code, _HTTP_CODES.get(exc.status_code, "error"), None, message))


def _loc_field(loc) -> str | None:
    """ninja's error location ("query", "range") or ("body", "payload", "x", 0) -> x[0]."""
    parts = [p for p in loc[1:] if p != "payload"] if loc and loc[0] in (
        "query", "path", "body", "header", "cookie", "form", "file") else list(loc or ())
    field = ""
    for part in parts:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    return field or None


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError):
    first = exc.errors[0] if exc.errors else {}
    return on_field_error(request, FieldError(
        422, "validation_error", _loc_field(first.get("loc")), first.get("msg", "invalid")))
