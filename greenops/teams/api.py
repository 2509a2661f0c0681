"""Team API: members, invitations, the audit log, the permission matrix (session auth)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.responses import Status
from ninja.security import django_auth

from greenops.errors import invalid
from greenops.site import site_url
from greenops.teams import invitations
from greenops.teams.api_tokens import authorize_caller, team_auth
from greenops.teams.models import Role
from greenops.teams.permissions import ROLE_ORDER, authorize_api, matrix_rows

router = Router(tags=["teams"])


class ErrorOut(Schema):
    error: str
    field: str | None
    message: str


class InviteIn(Schema):
    # What create_invitation checks (naming the field): an address with an @, the column's 254
    # characters, no NUL; a role of Role.
    email: str = Field(json_schema_extra={"maxLength": 254,
                                          "pattern": "^[^\\u0000]*@[^\\u0000]*$"})
    role: str = Field(Role.MEMBER.value, json_schema_extra={"enum": list(Role.values)})


@router.get("/permissions", auth=django_auth, summary="The permission matrix")
def get_permissions(request: HttpRequest):
    return {"roles": list(ROLE_ORDER), "actions": matrix_rows()}


@router.get("/teams/{slug}/members", auth=team_auth,
            response={200: list[dict], 403: ErrorOut, 404: ErrorOut})
def list_members(request: HttpRequest, slug: str):
    team = authorize_caller(request, slug, "members.view")
    rows = team.memberships.select_related("user").order_by("user__username")
    return Status(200, [{"id": m.id, "username": m.user.get_username(), "role": m.role}
                        for m in rows])


@router.post("/teams/{slug}/invitations", auth=django_auth,
             response={201: dict, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut})
def create_invitation(request: HttpRequest, slug: str, body: InviteIn):
    team, _ = authorize_api(request.user, slug, "members.manage")
    if "@" not in body.email or len(body.email) > 254 or "\x00" in body.email:
        raise invalid("email", "must be an email address")
    if body.role not in Role.values:
        raise invalid("role", f"must be one of {', '.join(Role.values)}")
    inv, _link = invitations.invite(team, request.user, body.email, body.role,
                                    site_url=site_url(request))
    inv.refresh_from_db(fields=["mail_status", "mail_error"])  # in-process tasks ran already
    return Status(201, {"id": inv.id, "email": inv.email, "role": inv.role,
                        "expires_at": inv.expires_at.isoformat(), "mail": inv.mail_status,
                        "mail_error": inv.mail_error or None})


@router.get("/teams/{slug}/audit", auth=team_auth,
            response={200: list[dict], 403: ErrorOut, 404: ErrorOut})
def list_audit(request: HttpRequest, slug: str, limit: int = 100):
    team = authorize_caller(request, slug, "audit.view")
    events = team.audit_events.all()[: max(1, min(limit, 1000))]
    return Status(200, [{"at": e.created_at.isoformat(), "actor": e.actor_label,
                         "action": e.action, "target": e.target, "detail": e.detail}
                        for e in events])
