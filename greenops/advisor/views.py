"""Pages of the advisor app: a workload's diagnosis. Thin: access check, advise, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from greenops import windows
from greenops.advisor import diagnose
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.workloads.models import Workload


@team_permission("team.view")
def workload(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    wl = get_object_or_404(Workload, team=team, slug=workload_slug)
    key = windows.range_from_request(request, diagnose.RANGES, default="week")
    window = diagnose.window(key)
    return render(request, "advisor/workload.html", {
        "team": team, "workload": wl, "range_key": key, "ranges": diagnose.RANGES,
        "window": window, "advice": diagnose.advise(wl, window),
        "thresholds": {"min_minutes": diagnose.MIN_MEASURED_MINUTES,
                       "min_share_pct": diagnose.MIN_METRIC_SHARE * 100},
    })
