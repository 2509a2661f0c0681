"""JSON API of the benchmarks app, mounted on /api/v1/ by greenops/api/v1.py.

``greenops-agent bench`` posts runs and reads its baseline with a team API token (or the
host's token, on an enrolled GPU host); people acknowledge regressions with their session.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router
from ninja.responses import Status
from ninja.security import django_auth

from greenops.benchmarks import runs
from greenops.benchmarks.models import BenchmarkRun
from greenops.errors import invalid
from greenops.request_body import NO_NUL, declared_body, json_body, json_object, text
from greenops.teams.permissions import authorize_api
from greenops.telemetry.host_auth import team_or_host_token_auth

router = Router(tags=["benchmarks"])


_NUMBER = {"type": "number", "minimum": 0}
# What runs.store_run accepts. The workload must be one of the team's, the samples need one
# head repeat and distinct (role, index) pairs, and a comparison must be the verdict the gate
# gives for them: state and cross-field rules JSON Schema cannot say.
RUN_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["run_id", "workload", "hardware_key", "source", "started_at", "hardware",
                 "samples"],
    "properties": {
        "run_id": {"type": "string", "format": "uuid"},
        "workload": text(100, required=True, description="a workload slug of the team"),
        "source": {"enum": list(runs.SOURCES)},
        "started_at": {**_NUMBER, "maximum": 253402300799, "description": "Unix seconds"},
        "labels": {"type": ["object", "null"], "maxProperties": 50,
                   "propertyNames": {"maxLength": 100, "pattern": NO_NUL},
                   "additionalProperties": text(500)},
        **{k: text(n, nullable=True) for k, n in (
            ("commit", 64), ("branch", 200), ("base_commit", 64), ("baseline_commit", 64),
            ("command", 4000), ("agent_version", 40))},
        "hardware": json_object(),
        "hardware_key": text(500, required=True),
        "host_energy": json_object(nullable=True),
        "settings": json_object(nullable=True),
        "samples": {"type": "array", "minItems": 1, "maxItems": runs.MAX_SAMPLES, "items": {
            "type": "object", "required": ["role", "index", "wall_s"],
            "properties": {
                "role": {"enum": ["head", "base"]},
                "index": {"type": "integer", "minimum": 0, "maximum": runs.MAX_INDEX},
                "count": {"type": ["integer", "null"], "minimum": 1, "maximum": runs.MAX_COUNT},
                "energy_method": {"type": ["string", "null"], "maxLength": 20},
                "wall_s": _NUMBER,
                **{k: {"type": ["number", "null"], "minimum": 0}
                   for k in runs.SAMPLE_FLOATS if k != "wall_s"}}}},
        "comparison": {**json_object(nullable=True),
                       "description": "the gate result greenops-agent bench writes"},
    },
}


def _run_out(run: BenchmarkRun, created: bool) -> dict:
    return {"id": run.id, "run_id": str(run.run_id), "workload": run.workload.slug,
            "verdict": run.verdict or "not gated", "url": runs.run_url(run),
            "created": created}


@router.post("/benchmarks/runs", auth=team_or_host_token_auth, response={200: dict, 201: dict},
             summary="Store a measured benchmark run (team API token or host token)",
             description="The JSON `greenops-agent bench --output` writes. 201 when stored, "
             "200 when this run_id was already stored (a resend stores nothing twice).",
             openapi_extra=declared_body(RUN_SCHEMA))
def post_run(request: HttpRequest):
    doc = json_body(request)
    run, created = runs.store_run(request.auth.team, doc, posted_by=request.auth.label)
    return Status(201 if created else 200, _run_out(run, created))


@router.get("/benchmarks/baseline", auth=team_or_host_token_auth, response={200: dict},
            summary="The latest measured run of a branch on the same hardware",
            description="404 with the reason when there is none: no run of the branch yet, or "
            "only runs on other hardware (a hardware or driver change starts a new baseline).")
def get_baseline(request: HttpRequest, workload: str, branch: str, hardware_key: str):
    return Status(200, runs.baseline(request.auth.team, workload, branch, hardware_key))


@router.post("/teams/{slug}/benchmarks/runs/{run}/acknowledge", auth=django_auth,
             response={201: dict}, summary="Acknowledge a run's regression with a reason "
             "(member or above)", openapi_extra=declared_body({
                 "type": "object", "required": ["kpi", "reason"], "properties": {
                     "kpi": {"type": "string", "description": "a KPI the run failed on"},
                     "reason": text(2000, required=True)}}))
def acknowledge(request: HttpRequest, slug: str, run: int):
    team, _role = authorize_api(request.user, slug, "benchmarks.acknowledge")
    found = get_object_or_404(BenchmarkRun, team=team, id=run)
    doc = json_body(request)
    if not isinstance(doc, dict):
        raise invalid("", "the payload must be a JSON object with kpi and reason")
    kpi, reason = doc.get("kpi"), doc.get("reason")
    if not isinstance(kpi, str):
        raise invalid("kpi", "must be the key of a failed KPI, e.g. energy_per_inference_j")
    if not isinstance(reason, str):
        raise invalid("reason", "must be a string")
    ack = runs.acknowledge(found, kpi, reason, request.user)
    return Status(201, {"run": found.id, "kpi": ack.kpi, "reason": ack.reason,
                        "by": request.user.get_username()})
