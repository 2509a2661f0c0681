"""JSON API of the workloads app, mounted on /api/v1/ by greenops/api/v1.py.

People (session) list and register workloads; applications (team API token, or a host token of
the team) start and stop training jobs.
"""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status
from pydantic import WithJsonSchema

from greenops.errors import invalid
from greenops.request_body import NO_NUL, declared_body, json_body, text
from greenops.teams import audit
from greenops.teams.api_tokens import actor_of, authorize_caller, team_auth
from greenops.teams.models import AuditEvent
from greenops.telemetry.host_auth import team_or_host_token_auth
from greenops.telemetry.models import Gpu
from greenops.windows import RANGES, parse_range, period
from greenops.workloads import jobs, pods
from greenops.workloads.forms import WorkloadForm, first_error
from greenops.workloads.models import Workload, WorkloadKind

router = Router(tags=["workloads"])
POD_RANGES = [k for k in RANGES if k != "hour"]  # periods of whole finished hours
# Checked by windows.parse_range (a 422 naming the parameter); declared here.
PodRange = Annotated[str, WithJsonSchema({"type": "string", "enum": POD_RANGES})]

WORKLOAD_KEYS = {"name", "slug", "kind", "description", "hosts", "gpus", "interruptible",
                 "checkpoint_interval_min", "latency_critical", "served_model", "p99_target_ms",
                 "match_process", "match_namespace", "match_pod_prefix"}


_NAMED = "^[^\\u0000]*[A-Za-z0-9][^\\u0000]*$"  # slugify keeps ASCII letters and digits
# What WorkloadForm and _form_data accept. The slug (given or derived from the name) must be
# one no other workload of the team uses, and hosts and GPUs the team's: state, not schema.
WORKLOAD_SCHEMA = {
    "type": "object", "required": ["name", "kind"], "additionalProperties": False,
    "properties": {
        "name": text(100, pattern=_NAMED, description="a letter or digit at least (the slug is "
                     "derived from it)"),
        "slug": {"type": "string", "maxLength": 100, "pattern": "^[-a-zA-Z0-9_]*$"},
        "kind": {"enum": list(WorkloadKind.values)},
        "description": {"type": "string", "pattern": NO_NUL},
        "hosts": {"type": "array", "items": {"type": "string", "pattern": NO_NUL},
                  "description": "host names of the team"},
        "gpus": {"type": "array", "description": "GPU UUIDs or {host, index} of the team",
                 "items": {"oneOf": [
                     {"type": "string", "minLength": 1, "pattern": NO_NUL},
                     {"type": "object", "required": ["host", "index"],
                      "additionalProperties": False,
                      "properties": {"host": {"type": "string", "pattern": NO_NUL},
                                     "index": {"type": "integer", "minimum": 0,
                                               "maximum": 1023}}}]}},
        "interruptible": {"type": "boolean"},
        "checkpoint_interval_min": {"type": ["integer", "null"], "minimum": 0,
                                    "maximum": 2**31 - 1},
        "latency_critical": {"type": "boolean"},
        "served_model": text(200, description="the model this service serves, as its metrics "
                             "label it; services with the same model are compared across "
                             "accelerators by the advisor"),
        "p99_target_ms": {"type": ["number", "null"], "minimum": 0.001,
                          "description": "p99 latency objective in ms; the advisor sizes "
                                         "replicas for it"},
        # A process name pattern has no spaces or control characters (WorkloadForm); the schema
        # states the printable-ASCII part of that, which every real process name is.
        "match_process": text(128, pattern="^[!-~]*$"),
        # As WorkloadForm checks them: a DNS label, and a pod name prefix that needs its
        # namespace.
        "match_namespace": text(63, pattern="^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"),
        "match_pod_prefix": text(253, pattern="^([a-z0-9][-a-z0-9.]*)?$"),
    },
    "if": {"required": ["match_pod_prefix"],
           "properties": {"match_pod_prefix": {"minLength": 1}}},
    "then": {"required": ["match_namespace"],
             "properties": {"match_namespace": {"minLength": 1}}},
}
# What jobs.start_job accepts; the workload, host and GPUs must be the team's (state).
JOB_SCHEMA = {
    "type": "object", "required": ["workload", "name"], "additionalProperties": False,
    "properties": {
        "workload": {"type": "string", "pattern": NO_NUL, "description": "a workload slug"},
        "name": text(200, pattern="^[^\\u0000]*\\S[^\\u0000]*$"),
        "external_id": text(100),
        "started_at": {"type": "number", "minimum": 0, "description": "Unix seconds, not in "
                       "the future; default now"},
        "host": {"type": "string", "pattern": NO_NUL},
        "gpus": {"type": "array", "minItems": 1, "items": {
            "oneOf": [{"type": "integer", "minimum": 0, "maximum": 1023},
                      {"type": "string", "pattern": NO_NUL}]},
                 "description": "GPU indices (with host) or UUIDs"},
    },
}


def workload_out(w: Workload) -> dict:
    return {
        "slug": w.slug, "name": w.name, "kind": w.kind, "description": w.description,
        "hosts": [h.name for h in w.hosts.all()],
        "gpus": [{"host": g.host.name, "index": g.index, "uuid": g.uuid}
                 for g in w.gpus.select_related("host")],
        "interruptible": w.interruptible, "checkpoint_interval_min": w.checkpoint_interval_min,
        "latency_critical": w.latency_critical,
        "served_model": w.served_model, "p99_target_ms": w.p99_target_ms,
        "match_process": w.match_process, "match_namespace": w.match_namespace,
        "match_pod_prefix": w.match_pod_prefix,
    }


def _form_data(team, doc: dict) -> dict:
    """API names (host names, GPU UUIDs or {host, index}) -> the form's primary keys."""
    unknown = set(doc) - WORKLOAD_KEYS
    if unknown:
        raise invalid(sorted(unknown)[0], "is not a known field")
    data = {k: v for k, v in doc.items() if k not in ("hosts", "gpus")}
    hosts = doc.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise invalid("hosts", "must be an array of host names")
    by_name = dict(team.hosts.filter(name__in=hosts).values_list("name", "id"))
    for i, h in enumerate(hosts):
        if h not in by_name:
            raise invalid(f"hosts[{i}]", "no host of this team with that name")
    data["hosts"] = [by_name[h] for h in hosts]
    gpus = doc.get("gpus", [])
    if not isinstance(gpus, list):
        raise invalid("gpus", "must be an array of GPU UUIDs or {host, index} objects")
    ids = []
    for i, g in enumerate(gpus):
        team_gpus = Gpu.objects.filter(host__team=team)
        if isinstance(g, str):
            gpu = team_gpus.filter(uuid=g).first() if g else None
        elif isinstance(g, dict) and set(g) == {"host", "index"} and type(g["index"]) is int:
            gpu = team_gpus.filter(host__name=g["host"], index=g["index"]).first()
        else:
            raise invalid(f"gpus[{i}]", "must be a GPU UUID or {\"host\": name, \"index\": n}")
        if gpu is None:
            raise invalid(f"gpus[{i}]", "no such GPU on this team's hosts")
        ids.append(gpu.id)
    data["gpus"] = ids
    target = data.get("p99_target_ms")
    if target is not None and type(target) not in (int, float):
        raise invalid("p99_target_ms", "must be a number of milliseconds, or null")
    if target is None:
        data.pop("p99_target_ms", None)  # an empty box is an absent key in form data
    for flag in ("interruptible", "latency_critical"):
        if flag in data and type(data[flag]) is not bool:
            raise invalid(flag, "must be true or false")
        if not data.get(flag):
            data.pop(flag, None)  # an unchecked box is an absent key in form data
    return data


@router.get("/teams/{slug}/workloads", auth=team_auth, summary="A team's workloads")
def list_workloads(request: HttpRequest, slug: str):
    team = authorize_caller(request, slug, "team.view")
    return [workload_out(w) for w in team.workloads.prefetch_related("hosts")]


@router.post("/teams/{slug}/workloads", auth=team_auth, response={201: dict},
             summary="Register a workload (owner or admin)",
             openapi_extra=declared_body(WORKLOAD_SCHEMA))
def create_workload(request: HttpRequest, slug: str):
    team = authorize_caller(request, slug, "workloads.manage")
    doc = json_body(request)
    if not isinstance(doc, dict):
        raise invalid("", "the payload must be a JSON object")
    form = WorkloadForm(_form_data(team, doc), team=team)
    if not form.is_valid():
        raise invalid(*first_error(form))
    workload = form.save()
    actor, label = actor_of(request)
    audit.record(team, actor, AuditEvent.Action.WORKLOAD_CREATED, workload.slug,
                 actor_label=label, name=workload.name)
    return Status(201, workload_out(workload))


@router.get("/teams/{slug}/pods", auth=team_auth,
            summary="Kubernetes pods' energy, cost and CO2e over a period")
def list_pods(request: HttpRequest, slug: str, range: PodRange = "day"):  # noqa: A002 - the API's name
    """Each pod's (and, for the nodes' own team, the idle time's) share of the GPU-hours it
    held: J, $ and CO2e over whole finished hours. ``cost_usd`` is null with ``cost_reason``
    when a host had no price."""
    team = authorize_caller(request, slug, "team.view")
    key = parse_range(range, POD_RANGES)
    return pods.page_dict(pods.pods_page(team, period(key)))


def _caller_team(request: HttpRequest):
    return request.auth.team


@router.post("/training-jobs", auth=team_or_host_token_auth, response={201: dict},
             summary="Start a training job (team API token or host token)",
             openapi_extra=declared_body(JOB_SCHEMA))
def start_training_job(request: HttpRequest):
    doc = json_body(request)
    job = jobs.start_job(_caller_team(request), doc, started_by=request.auth.label)
    return Status(201, jobs.summary(job))


@router.post("/training-jobs/{job_id}/stop", auth=team_or_host_token_auth, response={200: dict},
             summary="Stop a training job; its energy, carbon and cost are computed",
             openapi_extra=declared_body({
                 "type": "object", "additionalProperties": False, "properties": {
                     "stopped_at": {"type": "number", "minimum": 0,
                                    "description": "Unix seconds; default now"}}},
                 required=False))
def stop_training_job(request: HttpRequest, job_id: int):
    job = jobs.job_for_caller(_caller_team(request), job_id)
    doc = json_body(request) \
        if request.body else {}
    return Status(200, jobs.summary(jobs.stop_job(job, doc)))


@router.get("/training-jobs/{job_id}", auth=team_or_host_token_auth, response={200: dict},
            summary="A training job's figures")
def get_training_job(request: HttpRequest, job_id: int):
    return Status(200, jobs.summary(jobs.job_for_caller(_caller_team(request), job_id)))
