"""Pages. Thin: access check (the team permission matrix), one query function, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from dashboards import figures
from greenops import windows
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.telemetry.models import Host
from greenops.telemetry.queries import RANGES, host_usage, team_usage


@login_required
def home(request: HttpRequest) -> HttpResponse:
    memberships = request.user.memberships.select_related("team").order_by("team__name")
    return render(request, "dashboards/home.html", {"memberships": memberships})


@team_permission("team.view")
def team_dashboard(request: HttpRequest, team: Team) -> HttpResponse:
    key = windows.range_from_request(request, RANGES)
    usage = team_usage(team, key)
    # Removed hosts keep their history in the charts but leave the host table (Hosts page lists
    # them separately).
    hosts = list(team.hosts.filter(removed_at__isnull=True).prefetch_related("gpus"))
    ctx = {
        "team": team,
        "usage": usage,
        "figures": figures.dashboard_figures(usage),
        "hosts": hosts,
        "ranges": RANGES,
        "range_key": key,
        "now": timezone.now(),
    }
    return render(request, "dashboards/team.html", ctx)


@team_permission("hosts.view")
def host_detail(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, id=host_id, team=team)
    key = windows.range_from_request(request, RANGES)
    usage = host_usage(host, key)
    ctx = {
        "team": team,
        "host": host,
        "gpus": host.gpus.all(),
        "usage": usage,
        "figures": figures.dashboard_figures(usage),
        "ranges": RANGES,
        "range_key": key,
        "online": host.is_online(),
    }
    return render(request, "dashboards/host.html", ctx)


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True, "database": connection.vendor})
