"""Pages: a team's benchmarked workloads, a workload's history, a run. Thin: access, query,
render; the domain work is in greenops.benchmarks.runs."""

from __future__ import annotations

from django.db.models import Count, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from collectors import bench_gate as gate
from greenops.benchmarks import benchmark_charts, runs
from greenops.benchmarks.models import BenchmarkRun
from greenops.errors import FieldError
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.workloads.models import Workload


@team_permission("team.view")
def overview(request: HttpRequest, team: Team) -> HttpResponse:
    latest_id = (BenchmarkRun.objects.filter(workload=OuterRef("pk"))
                 .order_by("-started_at", "-id").values("id")[:1])
    workloads = list(Workload.objects.filter(team=team)
                     .annotate(runs=Count("benchmark_runs"), latest_id=Subquery(latest_id))
                     .order_by("name"))
    latest = BenchmarkRun.objects.in_bulk([w.latest_id for w in workloads if w.latest_id])
    return render(request, "benchmarks/overview.html", {
        "team": team, "rows": [{"workload": w, "latest": latest.get(w.latest_id)}
                               for w in workloads]})


@team_permission("team.view")
def workload_history(request: HttpRequest, team: Team, workload_slug: str) -> HttpResponse:
    workload = get_object_or_404(Workload, team=team, slug=workload_slug)
    branch_list = runs.branches(workload)
    branch = request.GET.get("branch") or None
    if branch is not None and branch not in branch_list:
        branch = None
    points = runs.history(workload, branch)
    steps = runs.change_points(points)
    charts = [{"id": f"fig-{k.key}", "fig": benchmark_charts.kpi_history(
        points, k, steps if k.key == gate.PRIMARY else [])} for k in gate.KPIS
              if any(p["kpis"][k.key]["value"] is not None for p in points)]
    step_by_run = {c["run"].id: c for c in steps}
    for p in points:
        p["step"] = step_by_run.get(p["run"].id)
    return render(request, "benchmarks/history.html", {
        "team": team, "workload": workload, "points": list(reversed(points)),
        "charts": charts, "branches": branch_list, "branch": branch, "steps": steps,
        "simulated": any(p["run"].simulated for p in points)})


def _run_context(request: HttpRequest, team: Team, run: BenchmarkRun) -> dict:
    result = run.gate_result()
    acks = {a.kpi: a for a in run.acknowledgements.select_related("user")}
    rows = []
    if result:
        for row, cells in zip(result.rows, gate.table_cells(result), strict=True):
            rows.append({"row": row, "cells": cells, "ack": acks.get(row.kpi)})
    samples = list(run.samples.all())
    return {
        "team": team, "run": run, "result": result, "rows": rows, "samples": samples,
        "has_base": any(s.role == "base" for s in samples),
        "unacknowledged": [(k, gate.KPI_BY_KEY[k].label) for k in run.unacknowledged_kpis()],
        "can_ack": "benchmarks.acknowledge" in request.team_actions,
        "labels": sorted(run.labels.items()),
    }


@team_permission("team.view")
def run_detail(request: HttpRequest, team: Team, run_id: int) -> HttpResponse:
    run = get_object_or_404(BenchmarkRun.objects.select_related("workload"), team=team,
                            id=run_id)
    return render(request, "benchmarks/run.html", _run_context(request, team, run))


@require_POST
@team_permission("benchmarks.acknowledge")
def acknowledge(request: HttpRequest, team: Team, run_id: int) -> HttpResponse:
    run = get_object_or_404(BenchmarkRun, team=team, id=run_id)
    try:
        runs.acknowledge(run, request.POST.get("kpi", ""), request.POST.get("reason", ""),
                         request.user)
    except FieldError as exc:
        context = _run_context(request, team, run)
        context["ack_error"] = f"{exc.field}: {exc.message}"
        return render(request, "benchmarks/run.html", context, status=400)
    return redirect("benchmark-run", slug=team.slug, run_id=run.id)
