"""Pages. Thin: access check (the team permission matrix), one query function, render."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from dashboards import fleet_charts, headline, tasks
from dashboards.forms import HostEditForm
from greenops import windows
from greenops.teams import audit
from greenops.teams.models import AuditEvent, Team
from greenops.teams.permissions import team_permission
from greenops.telemetry import fleet, host_samples
from greenops.telemetry.devices import device_energy
from greenops.telemetry.models import DEVICE_NOUNS, DeviceKind, Gpu, Host
from greenops.telemetry.power import power_intervals
from greenops.telemetry.queries import RANGES

# Hosts the team home lists (offline first); a 125-host fleet's table is on the Hosts page.
HOME_HOSTS = 20


@login_required
def home(request: HttpRequest) -> HttpResponse:
    memberships = request.user.memberships.select_related("team").order_by("team__name")
    return render(request, "dashboards/home.html", {"memberships": memberships})


@team_permission("team.view")
def team_dashboard(request: HttpRequest, team: Team) -> HttpResponse:
    """The team home: what the team's AI costs and what to change, then the fleet's charts."""
    key = windows.range_from_request(request, RANGES)
    now = timezone.now()
    # Every host with its GPUs' ids, offline first: the charts' GPUs and the host table.
    team_hosts = fleet.team_hosts(team, now)
    # Closed chart buckets from the team's fleet rollups, the still-filling ones live.
    fleet_series = fleet.team_fleet_series(team, key, now, team_hosts)
    # The cost figures: this hour's snapshot (beat takes them), else the last one the team has
    # labelled with its time, else "being computed" -- never computed in the request (tens of
    # seconds at 1,000 GPUs): dashboards.tasks.refresh_team_home takes it. The cards, month to
    # date and daily bars: KPI rollups only, kept until those change.
    usage, kpis, kpis_kept = headline.page_figures(team, key, now)
    if usage.state != "current":  # a task computes them; the page shows what it has
        tasks.request_refresh(team)
    # The KPI figures likewise, where computing them here would not be quick (page_figures).
    if kpis_kept["state"] != "current":
        tasks.request_kpis_refresh(team, key)
    days = kpis["daily"]
    # Removed hosts keep their history in the charts but leave the host table (Hosts page lists
    # them separately). At most HOME_HOSTS rows, offline ones first (what needs a look); the
    # Hosts page has all.
    current = [h for h in team_hosts if h["removed_at"] is None]
    # What the team's devices are called ("GPUs", "accelerators", "devices" for a mix).
    # Each chart line says what its device is ("inf2-1 · accelerator 0"): only the non-GPUs
    # need naming, GPUs are the charts' default.
    # The kinds, and the non-GPU devices only: a GPU fleet of 10,000 reads no row per GPU here.
    team_devices = Gpu.objects.filter(host__team=team)
    device_kinds = sorted(team_devices.order_by().values_list("kind", flat=True).distinct())
    nouns = {(h, i): DEVICE_NOUNS[kind][0] for h, i, kind in team_devices.exclude(
        kind=DeviceKind.GPU).values_list("host__name", "index", "kind")}
    ctx = {
        "team": team,
        "head": headline.headline(team, key, now, usage, kpis, kpis_kept),
        "recommendations": headline.top_recommendations(team, now, usage=usage),
        "costs_pending": usage.pending,
        "firing": headline.firing_alerts(team),
        "usage": fleet_series,
        "figures": {
            **fleet_charts.fleet_figures(fleet_series, device_kinds, nouns),
            "cost_by_workload": fleet_charts.per_day_by_workload(
                days, "cost_usd", "Cost per day by workload", "USD", ",.2f"
            ),
            "co2e_by_workload": fleet_charts.per_day_by_workload(
                days, "co2e_kg", "Carbon per day by workload", "kg CO2e", ",.3g"
            ),
        },
        "hosts": current[:HOME_HOSTS],
        "device_kinds": device_kinds,
        "n_hosts": len(current),
        "ranges": RANGES,
        "range_key": key,
        "now": now,
    }
    return render(request, "dashboards/team.html", ctx)


POWER_ROWS = 12  # intervals in the host page's power table


@team_permission("hosts.view")
def host_detail(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    host = get_object_or_404(Host, id=host_id, team=team)
    key = windows.range_from_request(request, RANGES)
    fleet_series = fleet.fleet_series(list(host.gpus.select_related("host")), key)
    procs = host_samples.processes_by_gpu(host)
    gpus = list(host.gpus.all())
    # Each device's energy over the range's whole finished hours, and how it was measured.
    energy_window = windows.period(key)
    energy = device_energy(gpus, energy_window)
    for g in gpus:
        g.current_processes = procs.get(g.id, [])
        g.energy = energy[g.id]
    ctx = {
        "energy_window": energy_window,
        "team": team,
        "host": host,
        "gpus": gpus,
        "activity": host_samples.activity(host, timezone.now() - timedelta(hours=24)),
        "processes_seen_at": min((p.seen_at for ps in procs.values() for p in ps), default=None),
        "usage": fleet_series,
        "figures": fleet_charts.fleet_figures(
            fleet_series, [g.kind for g in gpus], {(host.name, g.index): g.noun for g in gpus}),
        "ranges": RANGES,
        "range_key": key,
        "online": host.is_online(),
        # The newest intervals with a power figure, newest first; the API gives them all.
        "power": power_intervals(host, key),
    }
    ctx["power_rows"] = list(reversed(ctx["power"]["intervals"]))[:POWER_ROWS]
    return render(request, "dashboards/host.html", ctx)


@team_permission("hosts.manage")
def host_edit(request: HttpRequest, team: Team, host_id: int) -> HttpResponse:
    """Correct what prices a host and where it runs; every change is in the audit log."""
    host = get_object_or_404(Host, id=host_id, team=team)
    form = HostEditForm(request.POST or None, instance=host)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            changes = form.changes()
            form.save()
            if changes:
                audit.record(
                    team,
                    request.user,
                    AuditEvent.Action.HOST_CHANGED,
                    host.name,
                    host_id=host.id,
                    changes=changes,
                )
        return redirect("host-detail", team.slug, host.id)
    return render(
        request,
        "dashboards/host_edit.html",
        {"team": team, "host": host, "form": form},
        status=400 if form.is_bound else 200,
    )


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True, "database": connection.vendor})
