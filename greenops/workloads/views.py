"""Pages: the team's workloads (list, register, edit) and its API tokens. Thin views.

Who may do what is the team permission matrix (greenops/teams/permissions.py): everyone in the
team reads workloads; admins and owners register and change them and manage API tokens.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from greenops.teams import audit
from greenops.teams.models import ApiToken, AuditEvent, Team
from greenops.teams.permissions import team_permission
from greenops.workloads.forms import WorkloadForm
from greenops.workloads.models import Workload


@team_permission("team.view")
def workload_list(request: HttpRequest, team: Team) -> HttpResponse:
    workloads = team.workloads.prefetch_related("hosts", "gpus__host")
    return render(request, "workloads/list.html", {
        "team": team, "workloads": workloads,
        "can_edit": "workloads.manage" in request.team_actions,
    })


def _edit(request: HttpRequest, team: Team, workload_slug: str | None) -> HttpResponse:
    workload = get_object_or_404(Workload, team=team, slug=workload_slug) if workload_slug \
        else None
    form = WorkloadForm(request.POST or None, instance=workload, team=team)
    if request.method == "POST" and form.is_valid():
        saved = form.save()
        audit.record(team, request.user, AuditEvent.Action.WORKLOAD_CHANGED if workload
                     else AuditEvent.Action.WORKLOAD_CREATED, saved.slug, name=saved.name)
        return redirect("workload-list", slug=team.slug)
    status = 400 if request.method == "POST" else 200
    return render(request, "workloads/edit.html",
                  {"team": team, "form": form, "workload": workload}, status=status)


@team_permission("workloads.manage")
def workload_create(request: HttpRequest, team: Team) -> HttpResponse:
    return _edit(request, team, None)


@team_permission("workloads.manage")
def workload_edit(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    return _edit(request, team, workload_slug)


@team_permission("tokens.manage")
def api_tokens(request: HttpRequest, team: Team) -> HttpResponse:
    """Owners and admins see, create and revoke the team's API tokens."""
    new_token, error, status = None, None, 200
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        if not name or len(name) > 100:
            error, status = "Give the token a name of at most 100 characters.", 400
        else:
            row, new_token = ApiToken.issue(team, name, created_by=request.user)
            audit.record(team, request.user, AuditEvent.Action.TOKEN_CREATED, str(row),
                         token_id=row.id)
    return render(request, "workloads/tokens.html", {
        "team": team, "tokens": team.api_tokens.select_related("created_by"),
        "can_admin": "tokens.manage" in request.team_actions,
        "new_token": new_token, "error": error,
    }, status=status)


@require_POST
@team_permission("tokens.manage")
def api_token_revoke(request: HttpRequest, team: Team, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, team=team, id=token_id)
    if token.revoke():  # a second click revokes nothing and records nothing
        audit.record(team, request.user, AuditEvent.Action.TOKEN_REVOKED, str(token),
                     token_id=token.id)
    return redirect("api-tokens", slug=team.slug)
