"""The codecarbon-compatible API: the codecarbon client (2.x and 3.x) talks to GreenOps unchanged.

Configure the tracker with
    api_endpoint = https://<greenops>/api/codecarbon
    api_key      = <a GreenOps team API token, gha_...>      (sent as the x-api-token header)
    experiment_id = <any UUID; the experiment is created on first use>
and save_to_api = True (e.g. in .codecarbon.config).

What the client calls (codecarbon/core/api_client.py) and therefore what is served here:
  POST /runs         RunCreate -> 201 {"id": ...}; the client keeps the id for its emissions
  POST /emissions    EmissionCreate, the delta since the previous send -> 201
  POST /experiments  ExperimentCreate (the CLI's `codecarbon config`) -> 201 {"id": ...}
  GET  /experiments/{id}
Field names and units are codecarbon's: energies in kWh, powers in W, emissions_sum in kg CO2e,
emissions_rate in kg/s, duration in whole seconds, ram_total_size in GB.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.conf import settings
from django.http import Http404, HttpRequest
from ninja import Field, NinjaAPI, Schema
from ninja.errors import HttpError, ValidationError
from ninja.responses import Status
from ninja.security import APIKeyHeader
from pydantic import ConfigDict, field_validator

from greenops.carbon import runs
from greenops.carbon.models import Experiment
from greenops.errors import FieldError
from greenops.request_body import NO_NUL
from greenops.teams.models import Team, team_for_api_token


def team_for_request(request: HttpRequest) -> Team:
    """codecarbon sends its api_key as x-api-token, or an access token as a Bearer header."""
    token = request.headers.get("x-api-token")
    if not token:
        header = request.headers.get("Authorization", "")
        token = header[len("Bearer "):].strip() if header.startswith("Bearer ") else None
    team = team_for_api_token(token)
    if team is None:
        raise FieldError(401, "unauthorized", "x-api-token",
                          "send a GreenOps team API token as the codecarbon api_key")
    return team


class CodecarbonToken(APIKeyHeader):
    """The scheme the OpenAPI schema declares (an x-api-token header; a Bearer header works
    too), checked by team_for_request so a refusal is the house 401."""

    param_name = "x-api-token"
    openapi_description = "A GreenOps team API token (gha_...), codecarbon's api_key; "\
        "`Authorization: Bearer <token>` is accepted too."

    def __call__(self, request: HttpRequest):
        return team_for_request(request)

    def authenticate(self, request: HttpRequest, key: str | None):  # pragma: no cover
        return team_for_request(request)


_ERROR_SCHEMA = {
    "type": "object", "required": ["error", "field", "message"],
    "properties": {"error": {"type": "string"}, "field": {"type": ["string", "null"]},
                   "message": {"type": "string"}},
}


class CodecarbonAPI(NinjaAPI):
    """Says in its schema that any error is the {error, field, message} body (`default`)."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema["components"].setdefault("schemas", {})["Error"] = _ERROR_SCHEMA
        error = {"description": "Any error, naming the field at fault",
                 "content": {"application/json": {
                     "schema": {"$ref": "#/components/schemas/Error"}}}}
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation["responses"].setdefault("default", error)
        return schema


api = CodecarbonAPI(
    title="GreenOps codecarbon-compatible API",
    version="codecarbon",
    urls_namespace="codecarbon-api",
    description="Point codecarbon's api_endpoint here; send a team API token as x-api-token. "
    f"A JSON body over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes is refused (413).",
    # Authentication runs before the body is parsed, so a caller without a token learns that
    # first (401) rather than whether its payload would validate.
    auth=CodecarbonToken(),
)


def _error(request: HttpRequest, status: int, code: str, field: str | None, message: str):
    return api.create_response(request, {"error": code, "field": field, "message": message},
                               status=status)


@api.exception_handler(FieldError)
def on_error(request: HttpRequest, exc: FieldError):
    return _error(request, exc.status, exc.code, exc.field, exc.message)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError):
    first = exc.errors[0] if exc.errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "payload", "path")]
    return _error(request, 422, "validation_error", ".".join(loc) or None,
                  first.get("msg", "invalid request"))


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError):
    """ninja's own refusals (a body that is not JSON: 400 "Cannot parse request body")."""
    code = {400: "malformed_json"}.get(exc.status_code, "error")
    message = "the body is not valid JSON" if exc.status_code == 400 else str(exc)
    return _error(request, exc.status_code, code, None, message)


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404):
    return _error(request, 404, "not_found", None, str(exc) or "not found")


NonNeg = Field(ge=0)


def _no_nul_strings(schema: dict, _model) -> None:
    """Every free-text field says in its schema that it takes no NUL (_storable refuses it)."""
    for prop in schema.get("properties", {}).values():
        for option in prop.get("anyOf", [prop]):
            if option.get("type") == "string" and not {"format", "pattern", "enum"} & set(option):
                option["pattern"] = NO_NUL


class FiniteSchema(Schema):
    """Refuses NaN and infinities in every float field (JSON Infinity, "Infinity", 1e309):
    pydantic accepts them by default, and one inf made a run's total "inf" on the page. And what
    PostgreSQL refuses, each a 500 found by schemathesis: NUL in a string, and a UTC offset
    beyond +-15:59 (Python allows +-23:59), so every time is turned into UTC here."""

    model_config = ConfigDict(allow_inf_nan=False, json_schema_extra=_no_nul_strings)

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value):
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("must not contain a NUL character")
        if isinstance(value, dt.datetime):
            try:
                return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)
            except OverflowError:  # 0001-01-01T00:00+01:00 is before year 1 in UTC
                raise ValueError("is out of range") from None
        return value


class RunIn(FiniteSchema):
    timestamp: dt.datetime
    experiment_id: uuid.UUID
    os: str | None = Field(None, max_length=255)
    python_version: str | None = Field(None, max_length=32)
    codecarbon_version: str | None = Field(None, max_length=32)
    # Bounded by the column (a 32-bit integer): a larger count is a 422 naming the field, not
    # PostgreSQL's "integer out of range" as a 500.
    cpu_count: int | None = Field(None, ge=0, le=2**31 - 1)
    cpu_model: str | None = Field(None, max_length=255)
    gpu_count: int | None = Field(None, ge=0, le=2**31 - 1)
    gpu_model: str | None = Field(None, max_length=255)
    longitude: float | None = Field(None, ge=-180, le=180)
    latitude: float | None = Field(None, ge=-90, le=90)
    region: str | None = Field(None, max_length=100)
    provider: str | None = Field(None, max_length=50)
    ram_total_size: float | None = Field(None, ge=0)
    tracking_mode: str | None = Field(None, max_length=16)


class RunOut(Schema):
    id: str
    experiment_id: str
    timestamp: dt.datetime


class EmissionIn(FiniteSchema):
    timestamp: dt.datetime
    run_id: uuid.UUID
    duration: float = NonNeg
    emissions_sum: float = NonNeg
    emissions_rate: float = NonNeg
    cpu_power: float = NonNeg
    gpu_power: float = NonNeg
    ram_power: float = NonNeg
    cpu_energy: float = NonNeg
    gpu_energy: float = NonNeg
    ram_energy: float = NonNeg
    energy_consumed: float = NonNeg
    # codecarbon 3.x only.
    cpu_utilization_percent: float | None = Field(None, ge=0, le=100 * 1024)
    gpu_utilization_percent: float | None = Field(None, ge=0, le=100 * 1024)
    ram_utilization_percent: float | None = Field(None, ge=0, le=100)
    wue: float | None = None


class EmissionOut(Schema):
    id: int
    run_id: str


class ExperimentIn(FiniteSchema):
    timestamp: dt.datetime | None = None
    name: str = Field(max_length=255, min_length=1)
    description: str = Field("", max_length=10_000)
    on_cloud: bool = False
    project_id: str = Field("", max_length=64)
    country_name: str | None = Field(None, max_length=100)
    country_iso_code: str | None = Field(None, max_length=3)
    region: str | None = Field(None, max_length=100)
    cloud_provider: str | None = Field(None, max_length=50)
    cloud_region: str | None = Field(None, max_length=100)


class ExperimentOut(Schema):
    id: str
    name: str
    description: str
    on_cloud: bool
    project_id: str
    country_name: str
    country_iso_code: str
    region: str
    cloud_provider: str
    cloud_region: str


class ErrorOut(Schema):
    error: str
    field: str | None
    message: str


def _aware(ts: dt.datetime) -> dt.datetime:
    return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)


@api.post("/runs", response={201: RunOut, 401: ErrorOut, 422: ErrorOut})
def post_run(request: HttpRequest, payload: RunIn):
    team: Team = request.auth
    values = payload.dict(exclude={"timestamp", "experiment_id", "ram_total_size"})
    values["ram_total_size_gb"] = payload.ram_total_size
    run = runs.create_client_run(team, payload.experiment_id, _aware(payload.timestamp), values)
    return Status(201, {"id": str(run.id), "experiment_id": str(payload.experiment_id),
                        "timestamp": run.started_at})


@api.post("/emissions", response={201: EmissionOut, 401: ErrorOut, 404: ErrorOut,
                                  422: ErrorOut})
def post_emission(request: HttpRequest, payload: EmissionIn):
    team: Team = request.auth
    run = runs.team_run(team, payload.run_id)
    p = payload
    emission = runs.add_emission(run, _aware(p.timestamp), {
        "duration_s": p.duration, "emissions_kg": p.emissions_sum,
        "emissions_rate_kg_per_s": p.emissions_rate, "cpu_power_w": p.cpu_power,
        "gpu_power_w": p.gpu_power, "ram_power_w": p.ram_power, "cpu_energy_kwh": p.cpu_energy,
        "gpu_energy_kwh": p.gpu_energy, "ram_energy_kwh": p.ram_energy,
        "energy_consumed_kwh": p.energy_consumed,
        "cpu_utilization_pct": p.cpu_utilization_percent,
        "gpu_utilization_pct": p.gpu_utilization_percent,
        "ram_utilization_pct": p.ram_utilization_percent,
    })
    return Status(201, {"id": emission.id, "run_id": str(run.codecarbon_run_id)})


def _experiment_out(exp: Experiment) -> dict:
    return {"id": str(exp.external_id), "name": exp.name, "description": exp.description,
            "on_cloud": exp.on_cloud, "project_id": exp.project_id,
            "country_name": exp.country_name, "country_iso_code": exp.country_iso_code,
            "region": exp.region, "cloud_provider": exp.cloud_provider,
            "cloud_region": exp.cloud_region}


@api.post("/experiments", response={201: ExperimentOut, 401: ErrorOut, 422: ErrorOut})
def post_experiment(request: HttpRequest, payload: ExperimentIn):
    team: Team = request.auth
    exp = runs.create_experiment(team, None, payload.name,
                                 payload.dict(exclude={"timestamp", "name"}))
    return Status(201, _experiment_out(exp))


@api.get("/experiments/{experiment_id}", response={200: ExperimentOut, 401: ErrorOut,
                                                    404: ErrorOut})
def get_experiment(request: HttpRequest, experiment_id: uuid.UUID):
    team: Team = request.auth
    exp = Experiment.objects.filter(team=team, external_id=experiment_id).first()
    if exp is None:
        raise runs.not_found("experiment_id", f"no experiment {experiment_id}")
    return Status(200, _experiment_out(exp))
