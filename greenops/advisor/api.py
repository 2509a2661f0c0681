"""JSON API of the advisor app, mounted on /api/v1/ by greenops/api/v1.py."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router
from ninja.responses import Status

from greenops import windows
from greenops.advisor import diagnose, fleet
from greenops.request_body import one_of
from greenops.teams.api_tokens import authorize_caller, team_auth
from greenops.workloads.models import Workload

router = Router(tags=["advisor"])
# Checked by windows.parse_range (a 422 naming range); declared here.
AdvisorRange = one_of(diagnose.RANGES)


@router.get("/teams/{slug}/workloads/{workload}/fleet-advice", auth=team_auth,
            response={200: dict},
            summary="Which accelerator for the workload's model, and how many replicas for its "
                    "p99 target")
def get_fleet_advice(request: HttpRequest, slug: str, workload: str,
                     range: AdvisorRange = "week"):
    """The services of the team serving the same model compared per inference on their device
    models, with the monthly saving of moving traffic; and the replicas the measured peak needs
    at the workload's p99 target. A figure that cannot be computed is null with its reason in
    the `unknown` map beside it."""
    team = authorize_caller(request, slug, "team.view")
    wl = get_object_or_404(Workload, team=team, slug=workload)
    window = diagnose.window(windows.parse_range(range, diagnose.RANGES))
    advice = diagnose.advise(wl, window)
    return Status(200, {"team": team.slug, "workload": wl.slug, "window": window.as_dict(),
                        **fleet.comparison_json(fleet.compare_accelerators(wl, window), wl),
                        **fleet.replicas_json(fleet.replicas(wl, window, advice.monthly), wl)})
