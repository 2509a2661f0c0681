"""Reading a JSON request body, the same way for every API of every app.

Bodies may be gzip-encoded (the agent and the client library compress); size limits apply
before and after decompression, and NaN/Infinity are refused with their field named, so every
endpoint answers a bad body with the same FieldError.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Annotated

import orjson
from django.conf import settings
from django.http import HttpRequest
from pydantic import WithJsonSchema

from greenops import body_limits
from greenops.errors import FieldError, invalid


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
    if limit is None:  # the operation's cap (body_limits.decompressed_cap); samples by default
        limit = settings.SMALL_BODY_MAX_BYTES if small else settings.INGEST_MAX_DECOMPRESSED_BYTES
    raw = decode_body(body, encoding == "gzip", limit)
    return parse_json(raw)


def json_body(request: HttpRequest, *, small: bool = False):
    """The request's JSON body (see parse_body)."""
    return parse_body(request.body, request.headers.get("Content-Encoding"), small=small,
                      limit=None if small else body_limits.decompressed_cap(request.path_info))


def declared_body(schema: dict, *, required: bool = True) -> dict:
    """`openapi_extra=declared_body({...})` on an operation that reads its JSON body itself
    (json_body), so the OpenAPI schema still says what the body is."""
    return {"requestBody": {"required": required,
                            "content": {"application/json": {"schema": schema}}}}


# JSON Schema patterns the OpenAPI schemas share (ECMA and Python regex alike).
NO_NUL = "^[^\\u0000]*$"  # PostgreSQL text cannot hold NUL, so no text field accepts one
# Any JSON a field stores as jsonb, which cannot hold NUL either: in no key and no text, at any
# depth (wire.nul_at names where). Recursive, so it is a component the API's schema carries.
JSON_VALUE_REF = "#/components/schemas/JsonValue"
JSON_VALUE = {"anyOf": [
    {"type": ["number", "boolean", "null"]},
    {"type": "string", "pattern": NO_NUL},
    {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
    {"type": "object", "propertyNames": {"pattern": NO_NUL},
     "additionalProperties": {"$ref": JSON_VALUE_REF}},
]}


def json_object(*, nullable: bool = False) -> dict:
    """A free-form JSON object stored as jsonb: no NUL in any key or text inside."""
    return {"type": ["object", "null"] if nullable else "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": JSON_VALUE_REF}}


def one_of(values) -> object:
    """The type of a query parameter that takes one of `values` (a range's name): the schema
    lists them, so a client or fuzzer knows the rest are refused (the API still checks it,
    naming the parameter)."""
    return Annotated[str, WithJsonSchema({"type": "string", "enum": list(values)})]


def text(max_len: int, *, required: bool = False, nullable: bool = False, **extra) -> dict:
    """The schema of a text field wire.text_field accepts: a string of at most max_len
    characters without NUL, non-empty where required."""
    out = {"type": ["string", "null"] if nullable else "string", "maxLength": max_len,
           "pattern": NO_NUL, **extra}
    if required:
        out["minLength"] = 1
    return out


def decode_body(body: bytes, gzip_encoded: bool, max_bytes: int) -> bytes:
    if not gzip_encoded:
        if len(body) > max_bytes:
            raise FieldError(413, "too_large", None, f"body is larger than {max_bytes} bytes")
        return body
    # Decompress incrementally so a gzip bomb cannot allocate more than the limit.
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise FieldError(400, "bad_encoding", None, f"body is not valid gzip: {exc}") from None
    if len(out) > max_bytes or d.unconsumed_tail:
        raise FieldError(
            413, "too_large", None, f"decompressed body is larger than {max_bytes} bytes"
        )
    if not d.eof:
        raise FieldError(400, "bad_encoding", None, "gzip body is truncated")
    return out


class _NonFinite:
    """Stands in for NaN/Infinity literals so the bad value can be located by path."""


def _find_non_finite(node, path: str) -> str | None:
    if isinstance(node, _NonFinite) or (isinstance(node, float) and not math.isfinite(node)):
        return path
    if isinstance(node, dict):
        for key, value in node.items():
            found = _find_non_finite(value, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found = _find_non_finite(value, f"{path}[{i}]")
            if found:
                return found
    return None


def parse_json(raw: bytes):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # orjson is strict: NaN/Infinity are not JSON. Python's parser accepts them, which lets
        # the error name the field that carried one (slow path, errors only).
        try:
            doc = json.loads(raw, parse_constant=lambda _c: _NonFinite())
            where = _find_non_finite(doc, "")
        except (ValueError, UnicodeDecodeError):
            raise FieldError(
                400, "malformed_json", None, f"body is not valid JSON: {exc}"
            ) from None
        except RecursionError:
            # orjson stops at 1,024 levels; Python's parser would recurse until the interpreter
            # gives up. No document GreenOps accepts is nested more than a few levels.
            raise FieldError(400, "malformed_json", None,
                             "body is not valid JSON: nested too deeply") from None
        if where:
            raise invalid(where, "NaN and infinities are not allowed") from None
        raise FieldError(400, "malformed_json", None, f"body is not valid JSON: {exc}") from None
