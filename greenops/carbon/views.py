"""Pages of the carbon app. Thin: access check, one domain call, render."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib import messages
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from greenops.carbon import accounting, emissions_csv
from greenops.carbon.models import Site
from greenops.carbon.runs import runs_with_totals
from greenops.errors import FieldError
from greenops.teams.models import Team
from greenops.teams.permissions import team_permission
from greenops.telemetry.models import HostEnergyHour
from greenops.units import j_to_kwh

RUNS_SHOWN = 200


@team_permission("team.view")
def runs(request: HttpRequest, team: Team) -> HttpResponse:
    rows = list(runs_with_totals(team)[:RUNS_SHOWN])
    return render(request, "carbon/runs.html", {
        "team": team, "runs": rows, "can_upload": "runs.upload" in request.team_actions,
        "api_endpoint": request.build_absolute_uri("/api/codecarbon"),
    })


@require_POST
@team_permission("runs.upload")
def upload_csv(request: HttpRequest, team: Team) -> HttpResponse:
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, "Choose an emissions.csv file to upload.")
    elif upload.size > emissions_csv.MAX_BYTES:
        messages.error(request, f"The file is larger than {emissions_csv.MAX_BYTES} bytes.")
    else:
        try:
            result = emissions_csv.import_file(team, upload.read())
        except FieldError as exc:
            messages.error(request, f"{upload.name}: {exc.message}. Nothing was imported.")
        else:
            messages.success(
                request,
                f"{upload.name} ({result['format']}): {result['rows']} rows, "
                f"{result['runs_created']} new runs, {result['runs_updated']} updated, "
                f"{result['runs_skipped']} already sent by the codecarbon client.",
            )
    return redirect("carbon-runs", slug=team.slug)


@team_permission("hosts.view")
def sites(request: HttpRequest, team: Team) -> HttpResponse:
    since = timezone.now() - dt.timedelta(days=1)
    energy = {
        row["host_id"]: row
        for row in HostEnergyHour.objects.filter(host__team=team, bucket__gte=since)
        .values("host_id").annotate(cpu_j=Sum("cpu_energy_j"), ram_j=Sum("ram_energy_j"))
    }
    hosts = []
    for host in team.hosts.all():
        factors = accounting.site_factors(host)
        e = energy.get(host.id, {})
        it_j = (e.get("cpu_j") or 0.0) + (e.get("ram_j") or 0.0)
        methods = list(
            HostEnergyHour.objects.filter(host=host, bucket__gte=since)
            .values_list("cpu_method", "ram_method").distinct()
        )
        hosts.append({"host": host, "factors": factors, "methods": methods,
                      "cpu_kwh": j_to_kwh(e.get("cpu_j") or 0.0),
                      "ram_kwh": j_to_kwh(e.get("ram_j") or 0.0),
                      "carbon": accounting.carbon_for_energy(it_j, factors) if e else None})
    return render(request, "carbon/sites.html", {
        "team": team, "sites": Site.objects.filter(team=team), "hosts": hosts,
        "default_pue": settings.GREENOPS_DEFAULT_PUE,
    })
