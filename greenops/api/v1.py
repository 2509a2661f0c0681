"""The versioned JSON API (django-ninja; OpenAPI schema at /api/v1/openapi.json, docs at
/api/v1/docs). Handlers only translate HTTP to the domain functions."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import Schema
from ninja.responses import Status
from ninja.security import django_auth

from greenops import windows
from greenops.api.error_answers import api
from greenops.api.fastpath import answer_samples
from greenops.request_body import json_body, one_of, text
from greenops.teams.api_tokens import authorize_caller, team_auth
from greenops.telemetry import host_samples, ingest, wire
from greenops.telemetry.host_auth import host_token, host_token_for_samples
from greenops.telemetry.models import DeviceKind, Host
from greenops.telemetry.queries import RANGES, team_usage

# windows.parse_range checks it (a 422 naming range); the schema lists the same keys.
UsageRange = one_of(RANGES)


class Accepted(Schema):
    batch_id: str
    status: str
    samples: int


class ErrorOut(Schema):
    error: str
    field: str | None
    message: str


def _column(items: dict, description: str = "") -> dict:
    out = {"type": "array", "items": items, "minItems": 1,
           "maxItems": settings.INGEST_MAX_SAMPLES}
    return {**out, "description": description} if description else out


def _bounded(lo: float, hi: float) -> dict:
    return _column({"type": ["number", "null"], "minimum": lo, "maximum": hi})


# What wire.parse_batch accepts (besides equal column lengths, distinct timestamps per GPU
# within the accepted age, and GPUs of the host's inventory, which JSON Schema cannot say).
BATCH_SCHEMA = {
    "type": "object",
    "required": ["batch_id", "source", "samples"],
    "properties": {
        "batch_id": {"type": "string", "format": "uuid",
                     "description": "Fixed when the agent spools the batch; a resend is a no-op."},
        "agent_version": text(32),
        "sent_at": {"type": "number", "description": "Agent clock, Unix seconds."},
        "source": {"type": "string", "enum": list(wire.SOURCES),
                   "description": "dcgm: read from dcgm-exporter (measured, not simulated)"},
        "samples": {
            "type": "object",
            "description": "Columnar: one array per field, all the same length (at most "
                           "INGEST_MAX_SAMPLES).",
            "required": list(wire.REQUIRED_COLUMNS),
            "additionalProperties": False,
            "properties": {
                "ts": _column({"type": "number"}, "Unix seconds"),
                "gpu_index": _column({"type": "integer", "minimum": 0, "maximum": 1023}),
                **{name: _bounded(lo, hi) for name, (lo, hi) in wire.FLOAT_FIELDS.items()},
                "energy_mj": _column({"type": ["integer", "null"], "minimum": 0},
                                     "NVML total-energy counter, mJ"),
                "energy_method": _column({"enum": list(wire.ENERGY_METHODS)},
                                         "counter_gap: the counter across an agent restart "
                                         "(energy_j spans the gap)"),
                # Optional (issue 14): absent = null for every sample.
                **{name: _bounded(lo, hi)
                   for name, (lo, hi) in wire.OPTIONAL_FLOAT_FIELDS.items()},
                wire.THROTTLE_FIELD: _column(
                    {"type": ["integer", "null"], "minimum": 0, "maximum": 2**32 - 1},
                    "nvmlClocksThrottleReason* bitmask"),
            },
        },
    },
}


# What ingest.register_inventory accepts, so the schema refuses what the server refuses.
_LIMIT = {"type": ["number", "null"], "minimum": 0, "exclusiveMaximum": 1e7}
GPU_SCHEMA = {
    "type": "object",
    "required": ["index"],
    "properties": {"index": {"type": "integer", "minimum": 0, "maximum": 1023,
                             "description": "distinct within the inventory"},
                   "uuid": text(96), "name": text(96),
                   "power_limit_w": _LIMIT, "memory_total_mib": _LIMIT,
                   "max_sm_clock_mhz": _LIMIT, "max_mem_clock_mhz": _LIMIT,
                   "kind": {"type": ["string", "null"], "enum": [*DeviceKind.values, None],
                            "description": "null: derived from the model name"},
                   "vendor": {**text(32, nullable=True),
                              "description": "e.g. nvidia, amd, aws; null: derived"}},
}
INVENTORY_SCHEMA = {
    "type": "object",
    "required": ["gpus"],
    "properties": {"gpus": {"type": "array", "items": GPU_SCHEMA, "minItems": 1,
                            "maxItems": ingest.INVENTORY_LIMIT},
                   "agent_version": text(Host._meta.get_field("agent_version").max_length),
                   "hostname": text(Host._meta.get_field("hostname").max_length)},
}


@api.post(
    "/samples",
    response={202: Accepted, 400: ErrorOut, 401: ErrorOut, 409: ErrorOut, 413: ErrorOut,
              415: ErrorOut, 422: ErrorOut, 503: ErrorOut},
    summary="Send a batch of GPU samples (host token)",
    description="202: the batch is stored (`queued`) or was already (`duplicate`). 503 with "
    "Retry-After: PostgreSQL is unreachable (nothing stored), or the task queue is (the batch "
    "is stored and will be processed; a resend after Retry-After is answered `duplicate`).",
    auth=host_token_for_samples,
    openapi_extra={
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": BATCH_SCHEMA}}},
    },
)
def post_samples(request: HttpRequest):
    # Documents the endpoint. The web server's requests are answered before Django's handler
    # (greenops.api.fastpath.SamplesFirst); this operation answers the ones it leaves to Django
    # and the test client's, with the same answers.
    return answer_samples(request)


class GpuOut(Schema):
    index: int
    uuid: str
    name: str
    kind: str
    vendor: str
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
                "agent_version": text(32),
                "samples": {"type": "object", "description": "Columnar: one array per field, "
                            "all the same length", "required": list(host_samples.COLUMNS),
                            "additionalProperties": False, "properties": {
                                "ts": _column({"type": "number"}, "Unix seconds"),
                                "interval_s": _column({"type": "number", "exclusiveMinimum": 0,
                                                       "maximum": 3600}),
                                **{k: _bounded(lo, hi)
                                   for k, (lo, hi) in host_samples.FLOAT_FIELDS.items()}}},
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


@api.get("/teams/{slug}/usage", auth=team_auth, response={200: dict, 404: ErrorOut},
         summary="GPU utilisation, power and energy per GPU over a range")
def get_usage(request: HttpRequest, slug: str, range: UsageRange = "day"):
    team = authorize_caller(request, slug, "team.view")
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

from greenops.advisor.api import router as advisor_router  # noqa: E402
from greenops.benchmarks.api import router as benchmarks_router  # noqa: E402

api.add_router("/", benchmarks_router)
api.add_router("/", advisor_router)

from greenops.alerts.api import router as alerts_router  # noqa: E402
from greenops.teams.api import router as teams_router  # noqa: E402
from greenops.telemetry.api_enroll import router as hosts_router  # noqa: E402

api.add_router("/", teams_router)
api.add_router("/", hosts_router)
api.add_router("/", alerts_router)
