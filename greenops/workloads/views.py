"""Pages: the team's workloads (list, register, edit) and its API tokens. Thin views.

Who may do what is the team permission matrix (greenops/teams/permissions.py): everyone in the
team reads workloads; admins and owners register and change them and manage API tokens.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from greenops.teams import audit
from greenops.teams.models import ApiToken, AuditEvent, Membership, Team
from greenops.teams.permissions import team_permission
from greenops.telemetry.models import Gpu, Host
from greenops.windows import period, range_from_request, ranges
from greenops.workloads.forms import WorkloadForm
from greenops.workloads.models import NamespaceTeam, Workload
from greenops.workloads.pods import NO_POD, UNMAPPED, pods_page
from greenops.workloads.seen import seen_gpus


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
                     else AuditEvent.Action.WORKLOAD_CREATED, saved.slug, name=saved.name,
                     match_process=saved.match_process, match_namespace=saved.match_namespace,
                     match_pod_prefix=saved.match_pod_prefix)
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


@team_permission("team.view")
def workload_gpus(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    """The GPUs configured for the workload beside the GPUs its matching rules see it on in the
    team's hosts' latest process snapshots (greenops.workloads.seen)."""
    workload = get_object_or_404(Workload, team=team, slug=workload_slug)
    return render(request, "workloads/gpus.html", {
        "team": team, "workload": workload, "seen": seen_gpus(workload),
        "can_edit": "workloads.manage" in request.team_actions,
    })


@require_POST
@team_permission("workloads.manage")
def workload_gpu_add(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    """Add one GPU of the team to the workload's configured GPUs: an explicit, audited edit
    (from here on its cost and energy count for the workload; the past stays as configured)."""
    workload = get_object_or_404(Workload, team=team, slug=workload_slug)
    raw = request.POST.get("gpu", "")
    gpu = Gpu.objects.filter(host__team=team, id=int(raw)).select_related("host").first() \
        if raw.isdigit() and len(raw) < 10 else None
    if gpu is None:
        return HttpResponseBadRequest("gpu: no GPU of this team with that id",
                                      content_type="text/plain")
    if not workload.gpu_queryset().filter(id=gpu.id).exists():  # a second click adds nothing
        workload.gpus.add(gpu)
        audit.record(team, request.user, AuditEvent.Action.WORKLOAD_CHANGED, workload.slug,
                     name=workload.name, gpu_added=gpu.uuid or f"{gpu.host.name}/{gpu.index}",
                     host=gpu.host.name, gpu_index=gpu.index, reason="seen running it")
    return redirect("workload-gpus", slug=team.slug, workload_slug=workload.slug)


POD_RANGES = ranges("day", "week", "month", "quarter")
# A Kubernetes namespace name: an RFC 1123 label.
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@team_permission("team.view")
def pod_list(request: HttpRequest, team: Team) -> HttpResponse:
    """Kubernetes pods as workloads: each pod's share of the GPU-hours it held, in J, $ and
    CO2e (greenops.workloads.pods), and the namespace -> team map for the team's nodes."""
    return _pods_page(request, team)


def _pods_page(request: HttpRequest, team: Team, error: str | None = None,
               typed: str = "") -> HttpResponse:
    key = range_from_request(request, POD_RANGES, default="day")
    # Mapping is for the team whose nodes run the pods: a team without hosts has none to map.
    can_map = "workloads.manage" in request.team_actions and \
        Host.objects.filter(team=team, removed_at__isnull=True).exists()
    return render(request, "workloads/pods.html", {
        "team": team, "page": pods_page(team, period(key)), "ranges": POD_RANGES.values(),
        "range_key": key, "can_map": can_map, "unmapped": UNMAPPED, "no_pod": NO_POD,
        "mappings": team.namespace_mappings.select_related("team") if can_map else [],
        "my_teams": Team.objects.filter(memberships__user=request.user).order_by("name")
        if can_map else [],
        "map_error": error, "typed_namespace": typed,
    }, status=400 if error else 200)


@require_POST
@team_permission("workloads.manage")
def namespace_map(request: HttpRequest, team: Team) -> HttpResponse:
    """Map a namespace of the team's nodes to a team the admin is a member of: that team then
    sees the namespace's pods (and nothing else of the nodes)."""
    namespace = request.POST.get("namespace", "").strip()
    if not NAMESPACE_RE.match(namespace):
        return _pods_page(request, team, "Namespace: a Kubernetes namespace is at most 63 "
                          "lower-case letters, digits and '-', starting and ending with a letter "
                          "or digit.", namespace[:63])
    target = Team.objects.filter(slug=request.POST.get("team", "")[:100]).first()
    if target is None or not Membership.objects.filter(team=target, user=request.user).exists():
        return _pods_page(request, team, "Team: choose a team you are a member of.",
                          namespace)
    NamespaceTeam.objects.update_or_create(owner=team, namespace=namespace,
                                           defaults={"team": target})
    audit.record(team, request.user, AuditEvent.Action.WORKLOAD_CHANGED,
                 f"namespace {namespace}", namespace=namespace, mapped_to=target.slug)
    return redirect("pod-list", slug=team.slug)


@require_POST
@team_permission("workloads.manage")
def namespace_unmap(request: HttpRequest, team: Team, mapping_id: int) -> HttpResponse:
    mapping = get_object_or_404(NamespaceTeam, owner=team, id=mapping_id)
    mapping.delete()
    audit.record(team, request.user, AuditEvent.Action.WORKLOAD_CHANGED,
                 f"namespace {mapping.namespace}", namespace=mapping.namespace, mapped_to=None)
    return redirect("pod-list", slug=team.slug)


@team_permission("tokens.manage")
def api_tokens(request: HttpRequest, team: Team) -> HttpResponse:
    """Owners and admins see, create and revoke the team's API tokens."""
    new_token, error, status = None, None, 200
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        scope = request.POST.get("scope", ApiToken.Scope.INGEST)
        days = request.POST.get("expires_in_days", "").strip()
        if not name or len(name) > 100:
            error, status = "Give the token a name of at most 100 characters.", 400
        elif scope not in ApiToken.Scope.values:
            error, status = f"Scope must be one of {', '.join(ApiToken.Scope.values)}.", 400
        elif days and not (days.isdigit() and 1 <= int(days) <= 3650):
            error, status = "Expiry must be a whole number of days from 1 to 3650, or empty.", 400
        else:
            expires_at = timezone.now() + timedelta(days=int(days)) if days else None
            row, new_token = ApiToken.issue(team, name, created_by=request.user, scope=scope,
                                            expires_at=expires_at)
            audit.record(team, request.user, AuditEvent.Action.TOKEN_CREATED, str(row),
                         token_id=row.id, scope=scope,
                         expires_at=expires_at.isoformat() if expires_at else None)
    return render(request, "workloads/tokens.html", {
        "team": team, "tokens": team.api_tokens.select_related("created_by"),
        "can_admin": "tokens.manage" in request.team_actions,
        "new_token": new_token, "error": error, "scopes": ApiToken.Scope.choices,
        "now": timezone.now(),
    }, status=status)


@require_POST
@team_permission("tokens.manage")
def api_token_revoke(request: HttpRequest, team: Team, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, team=team, id=token_id)
    if token.revoke():  # a second click revokes nothing and records nothing
        audit.record(team, request.user, AuditEvent.Action.TOKEN_REVOKED, str(token),
                     token_id=token.id)
    return redirect("api-tokens", slug=team.slug)
