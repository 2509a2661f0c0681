"""API for host agents and host management: enroll, server time, whoami, the host list, issue
enrollment tokens, revoke/rotate/remove. Mounted at /api/v1/ by greenops/api/v1.py."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Router, Schema
from ninja.responses import Status
from ninja.security import django_auth

from greenops import ratelimit, windows
from greenops.errors import FieldError
from greenops.request_body import declared_body, json_body, one_of
from greenops.teams.api_tokens import authorize_caller, team_auth
from greenops.teams.permissions import authorize_api
from greenops.telemetry import enrollment
from greenops.telemetry.host_auth import host_token
from greenops.telemetry.host_status import host_status, host_statuses
from greenops.telemetry.models import Host
from greenops.telemetry.power import power_intervals
from greenops.telemetry.queries import RANGES

PowerRange = one_of(RANGES)

router = Router(tags=["hosts"])


class ErrorOut(Schema):
    error: str
    field: str | None
    message: str


class EnrolledOut(Schema):
    host: str
    host_id: int
    team: str
    token: str
    gpus: int


@router.post("/enroll", response={201: EnrolledOut, 400: ErrorOut, 401: ErrorOut, 422: ErrorOut,
                                  429: ErrorOut},
             summary="Trade a single-use enrollment token for a host token",
             description="Limited per source address: after RATELIMIT_ENROLL_FAILURES (20) "
             "refused tokens in RATELIMIT_WINDOW_S (900 s), one request per "
             "RATELIMIT_LOCKED_PROBE_S (10 s) is checked and the rest answer 429 with "
             "Retry-After; a valid token is never locked out.",
             openapi_extra=declared_body({
                 "type": "object", "required": ["token", "hostname", "gpus"],
                 "properties": {"token": {"type": "string"},
                                "hostname": {"type": "string", "minLength": 1,
                                             "maxLength": enrollment.HOSTNAME_MAX,
                                             "pattern": "\\S"},  # not only spaces
                                "agent_version": {"type": "string"},
                                "facts": {"type": "object"},
                                "gpus": {"type": "array", "minItems": 1,
                                         "items": {"type": "object"}}}}))
def post_enroll(request: HttpRequest):
    limit, ip = ratelimit.enroll_limit(), ratelimit.client_ip(request)
    if ratelimit.retry_after_s(limit, ip) is not None and not ratelimit.locked_probe(limit, ip):
        # Over the limit, the address's requests are checked one per LOCKED_PROBE_S, not
        # refused for the whole window: hosts behind one NAT address must not lose a valid
        # token to another's bad attempts, and a 256-bit token cannot be guessed at that pace.
        wait = settings.RATELIMIT_LOCKED_PROBE_S
        raise FieldError(429, "rate_limited", "token", "too many failed enrollments from this "
                         f"address; try again in {wait} s", retry_after_s=wait)
    doc = json_body(request, small=True)
    try:
        host, token = enrollment.enroll(doc)
    except FieldError as exc:
        if exc.status == 401:  # a wrong, used or expired token: a guess
            ratelimit.record_failure(limit, ip)
        raise
    return Status(201, {"host": host.name, "host_id": host.id, "team": host.team.slug,
                        "token": token, "gpus": host.gpus.count()})


@router.get("/time", summary="Server clock (Unix seconds), for the agent's clock-skew check")
def get_time(request: HttpRequest):
    return {"time": time.time(), "iso": timezone.now().isoformat()}


@router.get("/agent/whoami", response={200: dict, 401: ErrorOut}, auth=host_token,
            summary="Which host this host token belongs to (the agent's status/doctor check)")
def get_whoami(request: HttpRequest):
    host = request.auth
    s = host_status(host)
    # What the server sees of this host, for `greenops-agent status`: how long since its last
    # batch, and batches accepted but not yet stored (the data lag, a server-side backlog).
    return {"host": host.name, "team": host.team.slug, "gpus": len(s.gpu_names),
            "silent_s": s.silent_s, "pending_batches": s.pending_batches,
            "data_lag_s": s.data_lag_s}


@router.get("/teams/{slug}/hosts", auth=team_auth, response={200: list[dict], 403: ErrorOut,
                                                               404: ErrorOut})
def list_hosts(request: HttpRequest, slug: str):
    team = authorize_caller(request, slug, "hosts.view")
    return Status(200, [s.as_dict() for s in host_statuses(team)])


@router.get("/teams/{slug}/hosts/{host_id}/power", auth=team_auth,
            response={200: dict, 403: ErrorOut, 404: ErrorOut},
            summary="A host's average power per interval, per GPU and for the host")
def get_host_power(request: HttpRequest, slug: str, host_id: int,
                   range: PowerRange = "day"):  # noqa: A002 - the API's name
    team = authorize_caller(request, slug, "hosts.view")
    host = get_object_or_404(Host, id=host_id, team=team)
    return Status(200, power_intervals(host, windows.parse_range(range, RANGES)))


@router.post("/teams/{slug}/enrollment-tokens", auth=django_auth,
             response={201: dict, 403: ErrorOut, 404: ErrorOut})
def create_enrollment_token(request: HttpRequest, slug: str):
    team, _ = authorize_api(request.user, slug, "hosts.manage")
    row, token = enrollment.issue_enrollment_token(team, request.user)
    return Status(201, {"token": token, "expires_at": row.expires_at.isoformat()})


def _host(team, host_id: int) -> Host:
    return get_object_or_404(Host, id=host_id, team=team, removed_at__isnull=True)


@router.post("/teams/{slug}/hosts/{host_id}/revoke", auth=django_auth,
             response={200: dict, 403: ErrorOut, 404: ErrorOut})
def api_revoke_host(request: HttpRequest, slug: str, host_id: int):
    team, _ = authorize_api(request.user, slug, "hosts.manage")
    host = _host(team, host_id)
    enrollment.revoke(host, request.user)
    return Status(200, {"host": host.name, "token_state": "revoked"})


@router.post("/teams/{slug}/hosts/{host_id}/rotate", auth=django_auth,
             response={200: dict, 403: ErrorOut, 404: ErrorOut})
def api_rotate_host(request: HttpRequest, slug: str, host_id: int):
    team, _ = authorize_api(request.user, slug, "hosts.manage")
    host = _host(team, host_id)
    return Status(200, {"host": host.name, "token": enrollment.rotate(host, request.user)})


@router.delete("/teams/{slug}/hosts/{host_id}", auth=django_auth,
               response={200: dict, 403: ErrorOut, 404: ErrorOut})
def api_remove_host(request: HttpRequest, slug: str, host_id: int):
    team, _ = authorize_api(request.user, slug, "hosts.manage")
    host = _host(team, host_id)
    enrollment.remove(host, request.user)
    return Status(200, {"host": host.name, "token_state": "removed"})
