"""Pages: team KPI overview, workload KPIs, training jobs. Thin: access check, query, render."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from greenops import windows
from greenops.errors import FieldError
from greenops.kpis import kpi_charts, queries
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.workloads import jobs
from greenops.workloads.models import TrainingJob, Workload, WorkloadKind


def _cards(ov: dict) -> list[dict]:
    """(label, value, unit, change %, note) for the overview cards, in a fixed order."""
    spec = [("IT energy", "energy_kwh", "kWh", 3), ("Facility energy (× PUE)",
            "facility_energy_kwh", "kWh", 3), ("Carbon", "co2e_kg", "kg CO2e", 3),
            ("Cost", "cost_usd", "USD", 2), ("GPU utilisation", "gpu_util_pct", "%", 1),
            ("Inferences", "requests", "", 0), ("Throughput", "throughput_per_s", "/s", 2),
            ("Energy per inference", "energy_per_inference_j", "J", 2),
            ("Carbon per 1k inferences", "co2e_per_1k_inferences_g", "g", 3),
            ("Energy per token", "energy_per_token_j", "J", 3),
            ("p50 latency", "latency_p50_ms", "ms", 1), ("p99 latency", "latency_p99_ms", "ms", 1)]
    # Rates say how much of the period they were measured over ("measured 1 min of 24 h").
    notes = {"throughput_per_s": ov["current"]["coverage"]}
    # Percentiles past the servers' highest bucket bound are that bound, as Prometheus shows.
    for q in ("p50", "p99"):
        if ov["current"].get(f"latency_{q}_above"):
            notes[f"latency_{q}_ms"] = "at least: above the highest bucket bound"
    unknown = ov["current"].get("unknown", {})
    return [{"label": label, "key": key, "value": ov["current"][key], "unit": unit,
             "digits": digits, "change": ov["change_pct"].get(key), "note": notes.get(key),
             "why": unknown.get(key) or _why(ov["current"], key)}
            for label, key, unit, digits in spec]


def _why(current: dict, key: str) -> str:
    """Why a card without a figure has none (unknown is not zero, and says why)."""
    if current.get(key) is not None:
        return ""
    if key.startswith("latency_"):
        return "no latency histogram reported"
    if key in ("throughput_per_s", "energy_per_inference_j", "co2e_per_1k_inferences_g"):
        return "no inferences reported" if not current.get("requests") else "not measured"
    if key == "energy_per_token_j":
        return "no token counts reported"
    if key == "gpu_util_pct":
        return "no GPU utilisation reported"
    return "no data in this window"


def _window(request: HttpRequest, team: Team) -> tuple[str, windows.Window]:
    """The page's window: `?month=YYYY-MM` (a calendar month in the team's time zone, so far
    while it runs: the window its report covers) or `?range=` (a named period)."""
    if "month" in request.GET:
        try:
            # Not a range key: no named range is the current one in the page's range nav.
            return "calendar-month", queries.month_window(team, request.GET["month"])
        except FieldError:
            raise Http404("Unknown month") from None
    key = windows.range_from_request(request, queries.RANGES)
    return key, queries.window(key)


@team_permission("team.view")
def overview(request: HttpRequest, team: Team) -> HttpResponse:
    key, w = _window(request, team)
    ov = queries.window_overview(team, None, w, queries.PERIOD.get(key, queries.Period.HOUR))
    s = queries.series(team, None, key, w=w)
    return render(request, "kpis/overview.html", {
        "team": team, "ov": ov, "cards": _cards(ov), "range_key": key, "ranges": queries.RANGES,
        "workloads": queries.workload_table(team, key, w=w), "series": s,
        "figures": {"energy": kpi_charts.energy(s)},
        "jobs": TrainingJob.objects.filter(team=team).select_related("workload")[:20],
    })


@team_permission("team.view")
def workload(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    wl = get_object_or_404(Workload, team=team, slug=workload_slug)
    key, w = _window(request, team)
    ov = queries.window_overview(team, wl, w, queries.PERIOD.get(key, queries.Period.HOUR))
    s = queries.series(team, wl, key, w=w)
    figs = {"energy": kpi_charts.energy(s)}
    if wl.kind != WorkloadKind.TRAINING:
        figs.update(epi=kpi_charts.energy_per_inference(s), latency=kpi_charts.latency_vs_energy(s),
                    throughput=kpi_charts.throughput(s))
    return render(request, "kpis/workload.html", {
        "team": team, "workload": wl, "ov": ov, "cards": _cards(ov), "range_key": key,
        "ranges": queries.RANGES, "series": s,
        "charts": [{"id": f"fig-{name}", "fig": fig} for name, fig in figs.items()],
        "jobs": wl.training_jobs.all()[:50],
        "sharing": wl.sharing(),
    })


@team_permission("team.view")
def training_job(request: HttpRequest, team: Team, job_id: int) -> HttpResponse:
    job = get_object_or_404(TrainingJob.objects.select_related("workload"), team=team, id=job_id)
    return render(request, "kpis/job.html", {"team": team, "job": job, "s": jobs.summary(job)})
