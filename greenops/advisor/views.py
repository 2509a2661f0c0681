"""Pages of the advisor app: a workload's diagnosis and the variant comparison. Thin: access
check, parse, the domain function, render."""

from __future__ import annotations

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from greenops import windows
from greenops.advisor import diagnose, fleet, variants
from greenops.advisor.models import VariantPair
from greenops.errors import FieldError, invalid
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.workloads.models import Workload


@team_permission("team.view")
def workload(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    wl = get_object_or_404(Workload, team=team, slug=workload_slug)
    key = windows.range_from_request(request, diagnose.RANGES, default="week")
    window = diagnose.window(key)
    advice = diagnose.advise(wl, window)
    return render(request, "advisor/workload.html", {
        "team": team, "workload": wl, "range_key": key, "ranges": diagnose.RANGES,
        "window": window, "advice": advice,
        "accelerators": fleet.compare_accelerators(wl, window),
        "replicas": fleet.replicas(wl, window, advice.monthly),
        "fleet_rules": {"min_requests": fleet.MIN_COMPARE_REQUESTS,
                        "min_p99_requests": fleet.MIN_P99_REQUESTS},
        "pairs": VariantPair.objects.filter(Q(a_workload=wl) | Q(b_workload=wl), team=team),
        "thresholds": {"min_minutes": diagnose.MIN_MEASURED_MINUTES,
                       "min_share_pct": diagnose.MIN_METRIC_SHARE * 100},
    })


def _side(request: HttpRequest, team: Team, name: str, default_slug: str | None,
          default: windows.Window) -> variants.Side:
    """One variant from ?a=slug&a_start=...&a_end=... (errors name the parameter)."""
    slug = request.GET.get(name) or default_slug
    wl = Workload.objects.filter(team=team, slug=slug).first()
    if wl is None:
        raise invalid(name, "must be one of this team's workloads")
    start_s, end_s = request.GET.get(f"{name}_start"), request.GET.get(f"{name}_end")
    start = windows.parse_time(start_s, f"{name}_start") if start_s else default.start
    end = windows.parse_time(end_s, f"{name}_end") if end_s else default.end
    if end <= start:
        raise invalid(f"{name}_end", "must be after the start")
    if end - start > windows.MAX_CUSTOM_SPAN:
        raise invalid(f"{name}_end", f"a period may span at most "
                                     f"{windows.MAX_CUSTOM_SPAN.days} days")
    return variants.Side(wl, variants.hour_window(start, end))


@team_permission("team.view")
def compare(request: HttpRequest, team: Team) -> HttpResponse:
    workloads = list(Workload.objects.filter(team=team))
    default = windows.lookback(7)
    first = workloads[0].slug if workloads else None
    second = workloads[1].slug if len(workloads) > 1 else first
    context = {"team": team, "workloads": workloads, "params": request.GET}
    if not workloads:
        return render(request, "advisor/compare.html", context)
    try:
        a = _side(request, team, "a", first, default)
        b = _side(request, team, "b", second, default)
    except FieldError as exc:
        context["error"] = exc
        return render(request, "advisor/compare.html", context, status=400)
    context.update(a=a, b=b, comparison=variants.compare(team, a, b))
    return render(request, "advisor/compare.html", context)


# ---- Marked variant pairs ------------------------------------------------------------------

def _pairs_context(request: HttpRequest, team: Team) -> dict:
    return {"team": team, "pairs": VariantPair.objects.filter(team=team).select_related(
                "a_workload", "b_workload", "created_by"),
            "workloads": list(Workload.objects.filter(team=team)),
            "can_manage": "variants.manage" in request.team_actions, "form": request.POST}


@team_permission("team.view")
def pairs(request: HttpRequest, team: Team) -> HttpResponse:
    return render(request, "advisor/pairs.html", _pairs_context(request, team))


@require_POST
@team_permission("variants.manage")
def pair_new(request: HttpRequest, team: Team) -> HttpResponse:
    try:
        pair = variants.create_pair(team, request.POST, request.user)
    except FieldError as exc:
        context = _pairs_context(request, team)
        context["error"] = exc
        return render(request, "advisor/pairs.html", context, status=400)
    return redirect("advisor-pair", slug=team.slug, pair_id=pair.id)


@team_permission("team.view")
def pair(request: HttpRequest, team: Team, pair_id: int) -> HttpResponse:
    found = get_object_or_404(VariantPair.objects.select_related("a_workload", "b_workload"),
                              team=team, id=pair_id)
    key = windows.range_from_request(request, diagnose.RANGES, default="week")
    a, b = variants.pair_sides(found, diagnose.window(key))
    return render(request, "advisor/pair.html", {
        "team": team, "pair": found, "a": a, "b": b, "range_key": key,
        "ranges": diagnose.RANGES, "comparison": variants.compare(team, a, b),
        "uses_range": found.a_start is None or found.b_start is None,
        "can_manage": "variants.manage" in request.team_actions})


@require_POST
@team_permission("variants.manage")
def pair_delete(request: HttpRequest, team: Team, pair_id: int) -> HttpResponse:
    # A second click (already deleted) lands on the list too, rather than a 404.
    VariantPair.objects.filter(team=team, id=pair_id).delete()
    return redirect("advisor-pairs", slug=team.slug)
