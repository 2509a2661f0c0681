"""JSON API of the costs app, mounted on /api/v1/ by greenops/api/v1.py."""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from django.utils import timezone
from ninja import Router
from ninja.responses import Status
from pydantic import WithJsonSchema

from greenops import windows
from greenops.costs.accounting import team_costs
from greenops.costs.catalog import is_stale
from greenops.costs.models import Price
from greenops.costs.month_cost import team_usage
from greenops.costs.team_recommendations import team_recommendations
from greenops.teams.api_tokens import authorize_caller, team_auth

router = Router(tags=["costs"])
# Days, as parse_lookback reads them (it answers anything else with a 422 naming lookback).
Lookback = Annotated[str | None, WithJsonSchema(
    {"type": "string", "enum": [str(d) for d in windows.LOOKBACK_DAYS]})]


@router.get("/teams/{slug}/recommendations", auth=team_auth, response={200: dict},
            summary="Purchase-option recommendations from measured usage (estimates)")
def get_recommendations(request: HttpRequest, slug: str, lookback: Lookback = None):
    team = authorize_caller(request, slug, "team.view")
    return Status(200, team_recommendations(team, windows.parse_lookback(lookback)))


@router.get("/teams/{slug}/costs", auth=team_auth, response={200: dict},
            summary="Cost per host, workload and idle GPU-hours over a lookback")
def get_costs(request: HttpRequest, slug: str, lookback: Lookback = None):
    team = authorize_caller(request, slug, "team.view")
    return Status(200, team_costs(team_usage(team, windows.parse_lookback(lookback))))


@router.get("/prices", auth=team_auth, response={200: dict},
            summary="The price catalog with each price's source and age")
def get_prices(request: HttpRequest, region: str = "", instance_type: str = ""):
    qs = Price.objects.all()
    if region:
        qs = qs.filter(region=region)
    if instance_type:
        qs = qs.filter(instance_type=instance_type)
    now = timezone.now()
    return Status(200, {"prices": [
        {"provider": p.provider, "region": p.region, "instance_type": p.instance_type,
         "option": p.option, "term_years": p.term_years, "payment": p.payment,
         "usd_per_hour": float(p.usd_per_hour), "interruption_band": p.interruption_band,
         "method": p.method, "source": p.source, "as_of": p.as_of.isoformat(),
         "age_days": p.age(now).days, "stale": is_stale(p, now)}
        for p in qs
    ]})
