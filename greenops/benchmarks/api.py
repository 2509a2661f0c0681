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
from greenops.request_body import declared_body, json_body
from greenops.teams.permissions import authorize_api
from greenops.telemetry.host_auth import team_or_host_token_auth

router = Router(tags=["benchmarks"])


def _run_out(run: BenchmarkRun, created: bool) -> dict:
    return {"id": run.id, "run_id": str(run.run_id), "workload": run.workload.slug,
            "verdict": run.verdict or "not gated", "url": runs.run_url(run),
            "created": created}


@router.post("/benchmarks/runs", auth=team_or_host_token_auth, response={200: dict, 201: dict},
             summary="Store a measured benchmark run (team API token or host token)",
             description="The JSON `greenops-agent bench --output` writes. 201 when stored, "
             "200 when this run_id was already stored (a resend stores nothing twice).",
             openapi_extra=declared_body({"type": "object",
                                          "required": ["run_id", "workload", "hardware_key"],
                                          "properties": {k: {} for k in sorted(runs.DOC_KEYS)}}))
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
             "(member or above)")
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
