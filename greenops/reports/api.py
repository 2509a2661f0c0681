"""JSON API of the reports app, mounted on /api/v1/ by greenops/api/v1.py."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema
from ninja.responses import Status
from ninja.security import django_auth

from greenops.reports import generate
from greenops.reports.models import Report, Trigger
from greenops.reports.month_figures import Month
from greenops.reports.views import status_dict
from greenops.teams.api_tokens import authorize_caller, team_auth
from greenops.teams.permissions import authorize_api

router = Router(tags=["reports"])


class ReportRequest(Schema):
    # Month.parse: YYYY-MM from 2000 on.
    month: str = Field(json_schema_extra={"pattern": "^(2[0-9]{3}|[3-9][0-9]{3})-(0[1-9]|1[0-2])$",
                                          "examples": ["2026-10"]})


@router.get("/teams/{slug}/reports", auth=team_auth, response={200: list[dict]},
            summary="The team's report generations, newest month first")
def list_reports(request: HttpRequest, slug: str):
    team = authorize_caller(request, slug, "team.view")
    rows = Report.objects.filter(team=team).select_related("team", "unchanged_from")[:200]
    return Status(200, [status_dict(r) for r in rows])


@router.post("/teams/{slug}/reports", auth=django_auth, response={202: dict},
             summary="Generate a month's report (YYYY-MM, calendar month in the team's zone)")
def post_report(request: HttpRequest, slug: str, body: ReportRequest):
    team, _role = authorize_api(request.user, slug, "reports.manage")
    report = generate.request(team, Month.parse(body.month), Trigger.API, request.user)
    return Status(202, status_dict(report))


@router.get("/teams/{slug}/reports/{report_id}", auth=team_auth, response={200: dict},
            summary="One generation: status, progress, and the figures it stored")
def get_report(request: HttpRequest, slug: str, report_id: int):
    team = authorize_caller(request, slug, "team.view")
    report = get_object_or_404(Report.objects.select_related("team", "unchanged_from"),
                               team=team, id=report_id)
    shown = report.unchanged_from or report
    return Status(200, {**status_dict(report), "figures": shown.figures,
                        "difference": report.difference})
