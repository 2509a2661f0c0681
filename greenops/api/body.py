"""Reading a JSON request body, the same way for every API of every app.

Bodies may be gzip-encoded (the agent and the client library compress); size limits apply
before and after decompression, and NaN/Infinity are refused with their field named, so every
endpoint answers a bad body with the same FieldError.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from greenops.api import limits
from greenops.errors import FieldError
from greenops.telemetry import wire


def parse_body(body: bytes, content_encoding: str | None, *, small: bool = False,
               limit: int | None = None):
    """Decode and parse a JSON body. `small` endpoints (enroll, inventory) carry a few KB, so
    they refuse anything past SMALL_BODY_MAX_BYTES before spending time on it: an
    unauthenticated caller must not hold a worker decompressing and parsing megabytes."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding not in {"gzip", "identity"}:
        raise FieldError(415, "unsupported_encoding", "Content-Encoding",
                         "use gzip or no Content-Encoding")
    if small and len(body) > settings.SMALL_BODY_MAX_BYTES:
        raise FieldError(413, "too_large", None,
                         f"body is larger than {settings.SMALL_BODY_MAX_BYTES} bytes")
    if limit is None:  # the operation's cap (limits.decompressed_cap); samples by default
        limit = settings.SMALL_BODY_MAX_BYTES if small else settings.INGEST_MAX_DECOMPRESSED_BYTES
    raw = wire.decode_body(body, encoding == "gzip", limit)
    return wire.parse_json(raw)


def json_body(request: HttpRequest, *, small: bool = False):
    """The request's JSON body (see parse_body)."""
    return parse_body(request.body, request.headers.get("Content-Encoding"), small=small,
                      limit=None if small else limits.decompressed_cap(request.path_info))


def declared_body(schema: dict, *, required: bool = True) -> dict:
    """`openapi_extra=declared_body({...})` on an operation that reads its JSON body itself
    (json_body), so the OpenAPI schema still says what the body is."""
    return {"requestBody": {"required": required,
                            "content": {"application/json": {"schema": schema}}}}
