"""The versioned JSON API (django-ninja; OpenAPI schema at /api/v1/openapi.json, docs at
/api/v1/docs). Handlers only translate HTTP to the domain functions."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.responses import Status
from ninja.security import django_auth

from greenops import windows
from greenops.api import limits
from greenops.api.body import json_body
from greenops.errors import FieldError
from greenops.teams.permissions import authorize_api
from greenops.telemetry import host_samples, ingest
from greenops.telemetry.host_auth import host_token, host_token_for_samples
from greenops.telemetry.queries import RANGES, team_usage

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
        ref = {"$ref": "#/components/schemas/Error"}
        error = {"description": "Any error: 4xx naming the field at fault (see README Errors)",
                 "content": {"application/json": {"schema": ref}}}
        for path, operations in schema["paths"].items():
            for operation in operations.values():
                operation["responses"].setdefault("default", error)
                operation.setdefault("security", [])
                body = operation.get("requestBody", {}).get("content", {})
                if "application/json" in body:  # its cap, where a client reads the operation
                    cap, name = limits.decompressed_cap(path), limits.setting_for(path)
                    operation["x-max-decompressed-bytes"] = cap
                    operation["description"] = (
                        operation.get("description", "") + "\n\nBody limit: "
                        f"{cap:,} bytes of JSON after gzip decompression ({name}); "
                        "413 `too_large` past it.").strip()
        return schema


api = GreenOpsAPI(
    title="GreenOps API",
    version="1",
    urls_namespace="api-v1",
    description="Host agents send GPU samples; people read their teams' usage.\n\n"
    + limits.describe(),
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
    """PostgreSQL unreachable (restarting, failing over): 503 with Retry-After, not a 500 --
    an agent keeps the batch in its spool and sends it again."""
    return on_field_error(request, FieldError(
        503, "unavailable", None, "the database is unreachable; try again shortly",
        retry_after_s=UNAVAILABLE_RETRY_AFTER_S))


def on_data_error(request: HttpRequest, exc: Exception):
    """A value PostgreSQL refuses (a NUL character in a text, a number past its column) that
    an app's validation let through: the client's data, so a 422, not a 500. The database's
    message is logged, not echoed. Apps should name the field themselves first."""
    log.warning("data refused by the database at %s: %s", request.path, exc)
    return on_field_error(request, FieldError(
        422, "validation_error", None, "a value does not fit what the server stores: a NUL "
        "character (\\u0000) in a text, or a number out of range"))


api.add_exception_handler(DataError, on_data_error)
api.add_exception_handler(OperationalError, on_database_down)
api.add_exception_handler(InterfaceError, on_database_down)


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


class Accepted(Schema):
    batch_id: str
    status: str
    samples: int


class ErrorOut(Schema):
    error: str
    field: str | None
    message: str


_COLUMN = {"type": "array", "items": {"type": ["number", "null"]}}
BATCH_SCHEMA = {
    "type": "object",
    "required": ["batch_id", "source", "samples"],
    "properties": {
        "batch_id": {"type": "string", "format": "uuid",
                     "description": "Fixed when the agent spools the batch; a resend is a no-op."},
        "agent_version": {"type": "string"},
        "sent_at": {"type": "number", "description": "Agent clock, Unix seconds."},
        "source": {"type": "string", "enum": ["nvml", "simulated", "dcgm"],
                   "description": "dcgm: read from dcgm-exporter (measured, not simulated)"},
        "samples": {
            "type": "object",
            "description": "Columnar: one array per field, all the same length.",
            "properties": {
                "ts": {"type": "array", "items": {"type": "number"},
                       "description": "Unix seconds"},
                "gpu_index": {"type": "array", "items": {"type": "integer"}},
                "util_pct": _COLUMN, "mem_used_mib": _COLUMN, "power_w": _COLUMN,
                "energy_mj": {"type": "array", "items": {"type": ["integer", "null"]},
                              "description": "NVML total-energy counter, mJ"},
                "energy_j": {**_COLUMN, "description": "Energy since this GPU's previous sample"},
                "energy_method": {"type": "array",
                                  "items": {"enum": ["counter", "power", "counter_gap", None]},
                                  "description": "counter_gap: the counter across an agent "
                                                 "restart (energy_j spans the gap)"},
                "temp_c": _COLUMN, "sm_clock_mhz": _COLUMN,
                # Optional (issue 14): absent = null for every sample.
                **{name: _COLUMN for name in (
                    "mem_util_pct", "mem_clock_mhz", "pcie_tx_kib_s", "pcie_rx_kib_s",
                    "power_limit_w", "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct",
                    "dram_active_pct", "nvlink_tx_kib_s", "nvlink_rx_kib_s")},
                "throttle_reasons": {"type": "array", "items": {"type": ["integer", "null"]},
                                     "description": "nvmlClocksThrottleReason* bitmask"},
            },
        },
    },
}


# What ingest.register_inventory accepts, so the schema refuses what the server refuses.
_LIMIT = {"type": ["number", "null"], "minimum": 0, "exclusiveMaximum": 1e7}
GPU_SCHEMA = {
    "type": "object",
    "required": ["index"],
    "properties": {"index": {"type": "integer", "minimum": 0, "maximum": 1023},
                   "uuid": {"type": "string", "maxLength": 96},
                   "name": {"type": "string", "maxLength": 96},
                   "power_limit_w": _LIMIT, "memory_total_mib": _LIMIT,
                   "max_sm_clock_mhz": _LIMIT, "max_mem_clock_mhz": _LIMIT},
}
INVENTORY_SCHEMA = {
    "type": "object",
    "required": ["gpus"],
    "properties": {"gpus": {"type": "array", "items": GPU_SCHEMA, "minItems": 1,
                            "maxItems": ingest.INVENTORY_LIMIT},
                   "agent_version": {"type": "string"}, "hostname": {"type": "string"}},
}


@api.post(
    "/samples",
    response={202: Accepted, 400: ErrorOut, 401: ErrorOut, 409: ErrorOut, 413: ErrorOut,
              415: ErrorOut, 422: ErrorOut},
    summary="Send a batch of GPU samples (host token)",
    auth=host_token_for_samples,
    openapi_extra={
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": BATCH_SCHEMA}}},
    },
)
def post_samples(request: HttpRequest):
    # Documents the endpoint; greenops.api.fastpath answers it before the URL resolver runs
    # (here only where MIDDLEWARE lacks the fast path), with the same function.
    from greenops.api.fastpath import answer_samples

    return answer_samples(request)


class GpuOut(Schema):
    index: int
    uuid: str
    name: str
    power_limit_w: float | None
    memory_total_mib: float | None


class InventoryOut(Schema):
    host: str
    gpus: list[GpuOut]


@api.post(
    "/inventory",
    response={200: InventoryOut, 400: ErrorOut, 401: ErrorOut, 422: ErrorOut},
    summary="Register the host's GPUs (host token)",
    auth=host_token,
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": INVENTORY_SCHEMA}}}},
)
def post_inventory(request: HttpRequest):
    host = request.auth
    doc = json_body(request, small=True)
    gpus = ingest.register_inventory(host, doc)
    return Status(200, {"host": host.name, "gpus": gpus})


class HostSamplesOut(Schema):
    batch_id: str
    status: str
    samples: int
    inserted: int


_RATE = {"type": "array", "items": {"type": ["number", "null"], "minimum": 0}}


@api.post(
    "/host-samples",
    response={200: HostSamplesOut, 400: ErrorOut, 401: ErrorOut, 413: ErrorOut, 415: ErrorOut,
              422: ErrorOut},
    summary="Send host CPU, network and disk activity and the GPUs' processes (host token)",
    auth=host_token,
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {
            "type": "object", "required": ["batch_id", "samples"],
            "properties": {
                "batch_id": {"type": "string", "format": "uuid"},
                "agent_version": {"type": "string", "maxLength": 32},
                "samples": {"type": "object", "description": "Columnar: one array per field",
                            "required": list(host_samples.COLUMNS), "properties": {
                                "ts": {"type": "array", "items": {"type": "number"}},
                                "interval_s": {"type": "array", "items": {"type": "number"}},
                                **{k: _RATE for k in host_samples.FLOAT_FIELDS}}},
                "processes": {"type": "object", "description": "who holds each GPU: "
                              "{ts, gpus: [{gpu_index, pid, name, used_memory_mib, namespace, "
                              "pod, container}]}"}}}}}}},
)
def post_host_samples(request: HttpRequest):
    return Status(200, host_samples.accept(request.auth, json_body(request)))


class TeamOut(Schema):
    slug: str
    name: str
    role: str


@api.get("/teams", response=list[TeamOut], auth=django_auth, summary="Your teams")
def list_teams(request: HttpRequest):
    memberships = request.user.memberships.select_related("team").order_by("team__name")
    return [{"slug": m.team.slug, "name": m.team.name, "role": m.role} for m in memberships]


@api.get("/teams/{slug}/usage", auth=django_auth, response={200: dict, 404: ErrorOut},
         summary="GPU utilisation, power and energy per GPU over a range")
def get_usage(request: HttpRequest, slug: str, range: str = "day"):
    team, _role = authorize_api(request.user, slug, "team.view")
    return Status(200, team_usage(team, windows.parse_range(range, RANGES)))


# Domain apps add their endpoints through their own routers.
from greenops.carbon.api import router as carbon_router  # noqa: E402
from greenops.costs.api import router as costs_router  # noqa: E402
from greenops.kpis.api import router as kpis_router  # noqa: E402
from greenops.reports.api import router as reports_router  # noqa: E402
from greenops.workloads.api import router as workloads_router  # noqa: E402

api.add_router("/", workloads_router)
api.add_router("/", kpis_router)
api.add_router("/", costs_router)
api.add_router("/", carbon_router)
api.add_router("/", reports_router)

from greenops.benchmarks.api import router as benchmarks_router  # noqa: E402

api.add_router("/", benchmarks_router)

from greenops.alerts.api import router as alerts_router  # noqa: E402
from greenops.teams.api import router as teams_router  # noqa: E402
from greenops.telemetry.api_enroll import router as hosts_router  # noqa: E402

api.add_router("/", teams_router)
api.add_router("/", hosts_router)
api.add_router("/", alerts_router)
