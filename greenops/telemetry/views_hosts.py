"""Host management pages: list, Add host (enrollment token + install command), revoke, rotate,
remove; and the agent downloads the install command points at. Thin: checks, one call, render."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from greenops.site import site_url
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.telemetry import agent_dist, enrollment
from greenops.telemetry.host_status import host_statuses
from greenops.telemetry.models import Host
from greenops.units import plural


def server_url(request: HttpRequest) -> str:
    # SITE_URL when configured; else the URL the admin's browser used, which the host can most
    # likely reach too.
    return site_url(request)


@team_permission("hosts.view")
def host_list(request: HttpRequest, team: Team) -> HttpResponse:
    return render(request, "teams/hosts.html", {
        "team": team, "hosts": host_statuses(team),
        "removed_hosts": host_statuses(team, removed=True),
        "can_manage": "hosts.manage" in request.team_actions,
        "can_delete_history": "hosts.delete_history" in request.team_actions,
    })


@team_permission("hosts.manage")
def add_host(request: HttpRequest, team: Team) -> HttpResponse:
    ctx: dict = {"team": team, "unit": agent_dist.systemd_unit(),
                 "ttl_minutes": int(enrollment.enroll_token_ttl().total_seconds() // 60)}
    if request.method == "POST":
        row, token = enrollment.issue_enrollment_token(team, request.user)
        server = server_url(request)
        wheel = agent_dist.agent_wheel()
        wheel_url = server + reverse("agent-wheel", args=[wheel.filename])
        ctx.update(token=token, expires_at=row.expires_at, server=server, wheel_url=wheel_url,
                   command=agent_dist.install_command(server, wheel_url, token))
    return render(request, "teams/add_host.html", ctx)


def _host(team: Team, host_id: int) -> Host:
    return get_object_or_404(Host, id=host_id, team=team, removed_at__isnull=True)


@require_POST
@team_permission("hosts.manage")
def revoke_host(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    host = _host(team, host_id)
    enrollment.revoke(host, request.user)
    messages.success(request, f"{host.name}: token revoked; the agent can no longer send data.")
    return redirect("host-list", team.slug)


@require_POST
@team_permission("hosts.manage")
def rotate_host(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    host = _host(team, host_id)
    token = enrollment.rotate(host, request.user)
    return render(request, "teams/host_rotated.html", {"team": team, "host": host,
                                                       "token": token})


@require_POST
@team_permission("hosts.manage")
def remove_host(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    host = _host(team, host_id)
    enrollment.remove(host, request.user)
    messages.success(request, f"{host.name} removed; its history stays in reports.")
    return redirect("host-list", team.slug)


@require_POST
@team_permission("hosts.delete_history")
def delete_host_history(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, id=host_id, team=team)
    if request.POST.get("confirm", "").strip() != host.name:
        messages.error(request, f"Type the host's name ({host.name}) to delete its history.")
        return redirect("host-list", team.slug)
    deleted = enrollment.delete_history(host, request.user)
    messages.success(request, f"{host.name} and its history ({plural(deleted, 'sample')}) deleted.")
    return redirect("host-list", team.slug)


def agent_wheel(request: HttpRequest, filename: str) -> HttpResponse:
    """Public on purpose: the agent's code is open source, and the GPU host has no session."""
    wheel = agent_dist.agent_wheel()
    if filename != wheel.filename:
        return HttpResponse(f"not found; current agent is {wheel.filename}\n", status=404,
                            content_type="text/plain")
    response = HttpResponse(wheel.content, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{wheel.filename}"'
    response["X-Content-SHA256"] = wheel.sha256
    return response


def systemd_unit(request: HttpRequest) -> HttpResponse:
    return HttpResponse(agent_dist.systemd_unit(), content_type="text/plain")
