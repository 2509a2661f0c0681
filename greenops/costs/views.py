"""Pages of the costs app. Thin: access check, the domain functions, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from greenops import windows
from greenops.costs import cost_charts
from greenops.costs.accounting import team_costs
from greenops.costs.models import PriceRefresh
from greenops.costs.month_cost import team_usage
from greenops.costs.team_recommendations import team_recommendations
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission


@team_permission("team.view")
def recommendations(request: HttpRequest, team: Team) -> HttpResponse:
    days = windows.lookback_from_request(request)
    usage = team_usage(team, days)
    report = team_recommendations(team, days, usage=usage)
    charts = []
    for i, rec in enumerate(report["recommendations"]):
        spec = cost_charts.commitment_curve(rec)
        if spec is not None:
            charts.append({"id": f"fig-commit-{i}", "spec": spec})
    ctx = {
        "team": team,
        "lookback": days,
        "lookbacks": windows.LOOKBACK_DAYS,
        "costs": team_costs(usage),
        "report": report,
        "charts": charts,
        "last_refresh": PriceRefresh.objects.first(),
    }
    return render(request, "costs/recommendations.html", ctx)
