"""JSON API of the carbon app, mounted on /api/v1/ by greenops/api/v1.py.

POST /api/v1/host-energy -- host CPU and RAM energy, measured on the host with codecarbon
====================================================================================

Auth:     Authorization: Bearer <host token>   (the same gho_ token as POST /api/v1/samples)
Body:     JSON, optionally gzip with Content-Encoding: gzip (same limits as /samples).
Response: 200 {"batch_id", "status": "stored" | "duplicate", "samples": n, "inserted": k}
Errors:   4xx {"error": code, "field": dotted path, "message": ...}; nothing is stored.

    {
      "batch_id": "9b2c...-uuid",      # required, UUID string; fixed when the agent spools it
      "agent_version": "0.3.0",        # optional, <= 32 chars
      "source": "codecarbon",          # required: "codecarbon" or "simulated" (demo data)
      "codecarbon_version": "3.3.2",   # required when source is "codecarbon", <= 32 chars
      "tracking_mode": "machine",      # required: codecarbon's tracking_mode, machine|process
      "samples": {                     # columnar: one array per field, all the same length
        "ts":           [1764482400.0, ...],   # Unix seconds (float), end of the interval;
                                               # unique per host, not > 300 s in the future,
                                               # not older than INGEST_MAX_AGE_S (30 days)
        "cpu_power_w":  [41.5, ...],   # number or null; mean CPU power over the interval, W
        "cpu_energy_j": [622.5, ...],  # number or null; CPU energy over the interval, J
        "ram_power_w":  [5.9, ...],    # number or null, W
        "ram_energy_j": [88.5, ...],   # number or null, J
        "cpu_method":   ["rapl", ...], # how codecarbon measured the CPU: rapl | powermetrics |
                                       # intel_power_gadget | windows_emi | cpu_load | tdp |
                                       # constant | simulated
        "ram_method":   ["model", ...] # rapl | model | constant | simulated
      }
    }

The agent converts codecarbon's kWh to J (x 3.6e6). Energy is the interval's, not cumulative:
"ts" marks its end and the previous sample of the host its start (the first sample after an agent
start covers the time since codecarbon's tracker started). Bounds: power 0-5000 W (CPU) and
0-2000 W (RAM), energy up to one hour of that power. Samples are keyed by (host, ts): a resent
batch, or one that overlaps an earlier one, stores only the new timestamps.

POST /api/v1/codecarbon/emissions-csv -- upload an emissions.csv (team API token, multipart
field "file"); see greenops/carbon/emissions_csv.py for the formats. The codecarbon client's own
endpoints live in greenops/carbon/codecarbon_api.py under /api/codecarbon/.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import File, Router, Schema
from ninja.files import UploadedFile
from ninja.responses import Status

from greenops.carbon import emissions_csv, host_energy
from greenops.request_body import declared_body, json_body, text
from greenops.teams.auth import team_token_auth
from greenops.telemetry.host_auth import host_token

router = Router(tags=["carbon"])


class ErrorOut(Schema):
    error: str
    field: str | None
    message: str


def _column(items: dict) -> dict:
    return {"type": "array", "items": items, "minItems": 1,
            "maxItems": settings.INGEST_MAX_SAMPLES}


# What host_energy.parse accepts (besides equal column lengths and timestamps within the
# accepted age, which JSON Schema cannot say).
HOST_ENERGY_SCHEMA = {
    "type": "object", "required": ["batch_id", "source", "tracking_mode", "samples"],
    "properties": {
        "batch_id": {"type": "string", "format": "uuid"},
        "source": {"enum": list(host_energy.SOURCES)},
        "tracking_mode": {"enum": list(host_energy.TRACKING_MODES)},
        "codecarbon_version": text(32, description="required when source is codecarbon"),
        "agent_version": text(32),
        "samples": {
            "type": "object", "description": "Columnar: one array per field, all the same "
            "length", "required": list(host_energy.COLUMNS), "additionalProperties": False,
            "properties": {
                "ts": _column({"type": "number"}),
                **{k: _column({"type": ["number", "null"], "minimum": lo, "maximum": hi})
                   for k, (lo, hi) in host_energy.FLOAT_FIELDS.items()},
                "cpu_method": _column({"enum": list(host_energy.CPU_METHODS)}),
                "ram_method": _column({"enum": list(host_energy.RAM_METHODS)})}},
    },
    "oneOf": [{"properties": {"source": {"const": "simulated"}}},
              {"properties": {"source": {"const": "codecarbon"},
                              "codecarbon_version": {"minLength": 1}},
               "required": ["codecarbon_version"]}],
}


class HostEnergyOut(Schema):
    batch_id: str
    status: str
    samples: int
    inserted: int


@router.post(
    "/host-energy",
    response={200: HostEnergyOut, 400: ErrorOut, 401: ErrorOut, 413: ErrorOut, 415: ErrorOut,
              422: ErrorOut},
    summary="Send host CPU/RAM energy measured with codecarbon (host token)",
    auth=host_token,
    openapi_extra=declared_body(HOST_ENERGY_SCHEMA),
)
def post_host_energy(request: HttpRequest):
    host = request.auth
    doc = json_body(request)
    return Status(200, host_energy.accept(host, doc))


class CsvImportOut(Schema):
    format: str
    rows: int
    runs_created: int
    runs_updated: int
    runs_skipped: int


@router.post(
    "/codecarbon/emissions-csv",
    auth=team_token_auth,
    response={200: CsvImportOut, 401: ErrorOut, 413: ErrorOut, 422: ErrorOut},
    summary="Upload an emissions.csv written by codecarbon 2.x or 3.x (team API token)",
)
def post_emissions_csv(request: HttpRequest, file: UploadedFile = File(...)):  # noqa: B008
    return Status(200, emissions_csv.import_file(request.auth.team, file.read()))
