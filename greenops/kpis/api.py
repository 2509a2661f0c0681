"""JSON API of the kpis app, mounted on /api/v1/ by greenops/api/v1.py."""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Router
from ninja.responses import Status
from pydantic import WithJsonSchema

from greenops import windows
from greenops.kpis import exposition, inference, queries
from greenops.request_body import NO_NUL, json_body, one_of
from greenops.teams.api_tokens import authorize_caller, team_auth
from greenops.telemetry.host_auth import team_or_host_token_auth
from greenops.workloads.models import Workload

router = Router(tags=["kpis"])
# Checked by windows.parse_range and parse_month (422s naming the parameter); declared here.
KpiRange = one_of(queries.RANGES)
# windows.parse_month: YYYY-MM, years 0001 to 9998 (or empty: no month).
MONTH = (r"^((000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|"
         r"999[0-8])-(0[1-9]|1[0-2]))?$")
Month = Annotated[str, WithJsonSchema({"type": "string", "pattern": MONTH})]

_COUNT = {"type": "integer", "minimum": 0}
INFERENCE_SCHEMA = {
    "type": "object",
    "required": ["batch_id", "windows"],
    "additionalProperties": False,  # inference._envelope refuses unknown fields
    "properties": {
        "batch_id": {"type": "string", "format": "uuid",
                     "description": "Fixed by the sender; a resend is a no-op."},
        "sent_at": {"type": "number", "description": "Sender clock, Unix seconds."},
        "windows": {"type": "array", "minItems": 1, "maxItems": inference.MAX_WINDOWS, "items": {
            "type": "object", "required": ["workload", "end", "requests"],
            "additionalProperties": False,
            "description": "Keys: " + ", ".join(sorted(inference.WINDOW_KEYS)),
            "properties": {
                "workload": {"type": "string", "pattern": NO_NUL,
                             "description": "Slug of a workload of the team"},
                "end": {"type": "number", "description": "Window end, Unix seconds"},
                "requests": {**_COUNT, "description": "Inferences in the window (delta)"},
                "success": _COUNT, "failure": _COUNT,
                "tokens": {**_COUNT, "description": "Generated tokens in the window"},
                "latency": {"type": "object", "description": "a histogram (le + counts) or a "
                            "mean (sum + count, e.g. Triton's default duration counter)",
                            "properties": {
                    "unit": {"enum": list(inference.UNIT_TO_MS)},
                    "le": {"type": "array", "items": {"type": "number"}},
                    "counts": {"type": "array", "items": _COUNT,
                               "description": "len(le) + 1; the last is the +Inf bucket"},
                    "cumulative": {"type": "boolean",
                                   "description": "true for Prometheus _bucket deltas"},
                    "sum": {"type": "number"},
                    "count": {**_COUNT, "description": "how many latencies sum adds up"},
                }},
            },
        }},
    },
}


@router.post(
    "/inference",
    auth=team_or_host_token_auth,
    response={202: dict},
    summary="Send inference counts and latency histograms (team API token or host token)",
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": INFERENCE_SCHEMA}}}},
)
def post_inference(request: HttpRequest):
    doc = json_body(request)
    return Status(202, inference.accept(request.auth.team, doc, sender=request.auth.label))


@router.get("/teams/{slug}/kpis", auth=team_auth, response={200: dict},
            summary="KPIs of a team or one of its workloads, with the previous period")
def get_kpis(request: HttpRequest, slug: str, range: KpiRange = "day", workload: str = "",
             start: str = "", end: str = "", month: Month = ""):
    """`range` picks a named period (whole finished hours to the start of this hour); `month`
    (YYYY-MM) a calendar month in the team's time zone, so far while it runs (the window its
    report covers); `start` and `end` (ISO 8601) any other window, widened to whole hours
    because rollups are hourly. `window` says which [start, end) was counted."""
    team = authorize_caller(request, slug, "team.view")
    wl = get_object_or_404(Workload, team=team, slug=workload) if workload else None
    if month:
        w = queries.month_window(team, month)
        return Status(200, {"team": team.slug, "workload": workload or None,
                            **queries.window_overview(team, wl, w)})
    if start or end:
        w = windows.custom(start, end)
        return Status(200, {"team": team.slug, "workload": workload or None,
                            **queries.window_kpis(team, wl, w)})
    key = windows.parse_range(range, queries.RANGES)
    return Status(200, {"team": team.slug, "workload": workload or None,
                        **queries.overview(team, wl, key)})


@router.get("/teams/{slug}/metrics", auth=team_auth,
            openapi_extra={"responses": {200: {
                "description": "Prometheus text exposition format 0.0.4",
                "content": {"text/plain": {"schema": {"type": "string"}}}}}},
            summary="The team's figures for Prometheus (text exposition format)",
            description="Scrape with a read token: `authorization: {type: Bearer, credentials: "
            "gha_…}` in the scrape config. Counters are running totals of the KPI rollups "
            "(`increase()` over a window is the KPI API's figure for it); see "
            "dashboards/grafana/ for the queries the shipped Grafana dashboard runs.")
def get_metrics(request: HttpRequest, slug: str):
    team = authorize_caller(request, slug, "team.view")
    return HttpResponse(exposition.exposition(team), content_type=exposition.CONTENT_TYPE)
