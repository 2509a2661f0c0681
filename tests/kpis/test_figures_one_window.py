"""One figure, one answer (issue 29, item 1): the team home, the KPI page, the KPI API and the
monthly report of one team print the same [start, end) for the same label and show the same
cost to the cent and the same energy to the Wh.

The fleet (team in Europe/Paris, "now" = 2026-12-04 14:05 UTC):
  host "node-a": p4d.24xlarge in us-east-1, on demand (the bundled price snapshot), 2 GPUs;
  every hour from 2026-11-27 12:00 UTC up to and including the filling hour 14:00 on 4 Dec
  each GPU reports 60 minutes: GPU 0 at 1.8 MJ (0.5 kWh) per hour, GPU 1 at 0.9 MJ, and the
  host 0.36 MJ (0.1 kWh) of CPU + RAM per hour (codecarbon's share).
Windows (whole finished hours, windows.period / windows.so_far):
  "week":           [27 Nov 14:00, 4 Dec 14:00) UTC = 168 hours, printed
                    "7 days to 4 Dec 2026 14:00 UTC";
  December so far:  [30 Nov 23:00, 4 Dec 14:00) UTC = 87 hours (midnight in Paris on 1 Dec),
                    printed "1 Dec 2026 – 4 Dec 15:00, Europe/Paris (so far)".
Per hour: GPU energy 0.75 kWh, IT energy 0.85 kWh; cost = 1 host-hour at the snapshot's
on-demand price. So the week is 168 x 0.85 = 142.8 kWh of IT energy and 168 x price; the
month so far 87 x 0.85 = 73.95 kWh and 87 x price. The filling 14:00 hour (and its cost) is
in none of them -- the edge the issue found between the home and the KPI page.
"""

from __future__ import annotations

import datetime as dt
import re
from unittest import mock

import pytest

from greenops.windows import HOUR
from tests.support.factories import make_host

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 4, 14, 5, tzinfo=UTC)
FIRST = dt.datetime(2026, 11, 27, 12, tzinfo=UTC)
CURRENT = dt.datetime(2026, 12, 4, 14, tzinfo=UTC)
GPU_J = (1_800_000.0, 900_000.0)
HOST_J = 360_000.0


@pytest.fixture
def fleet(team):
    from greenops.costs.catalog import HourlyPrice, host_price
    from greenops.kpis import rollup
    from greenops.telemetry.models import GpuHour, Host, HostEnergyHour

    team.time_zone = "Europe/Paris"
    team.save(update_fields=["time_zone"])
    host, _ = make_host(team, "node-a", gpus=2)
    Host.objects.filter(id=host.id).update(created_at=FIRST - dt.timedelta(days=1))
    host.refresh_from_db()
    hours = []
    t = FIRST
    while t <= CURRENT:  # the filling hour too: it must be left out everywhere
        hours.append(t)
        t += HOUR
    gpus = list(host.gpus.order_by("index"))
    GpuHour.objects.bulk_create([
        GpuHour(gpu=g, bucket=h, samples=60, util_sum=50.0 * 60, util_n=60, energy_j=GPU_J[i],
                util_minutes=60, idle_minutes=0)
        for h in hours for i, g in enumerate(gpus)])
    HostEnergyHour.objects.bulk_create([
        HostEnergyHour(host=host, bucket=h, cpu_energy_j=HOST_J * 0.75,
                       ram_energy_j=HOST_J * 0.25, cpu_method="rapl", ram_method="constant",
                       samples=60) for h in hours])
    rollup.rebuild(team, FIRST, CURRENT + HOUR)
    price = host_price(host, NOW)
    assert isinstance(price, HourlyPrice)
    return {"host": host, "usd_per_hour": price.usd_per_hour}


def _wh(kwh: float | None) -> int:
    assert kwh is not None
    return round(kwh * 1000)


def _cents(usd: float | None) -> int:
    assert usd is not None
    return round(usd * 100)


def _figure(html: str, key: str) -> str:
    return html.split(f'data-kpi="{key}">', 1)[1].split("<", 1)[0].strip()


def _window(html: str) -> tuple[str, str, str]:
    m = re.search(r'data-window data-start="([^"]+)" data-end="([^"]+)">([^<]+)<', html)
    assert m, "no printed window"
    return m.group(1), m.group(2), m.group(3).strip()


def test_week_home_kpi_page_and_api_agree(client, users, team, fleet):
    client.force_login(users["member"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        # The home's first view finds no cost snapshot: it says "being computed" and its
        # refresh runs after the response (in-process), so the second view has the figures.
        client.get(f"/teams/{team.slug}/?range=week")
        home = client.get(f"/teams/{team.slug}/?range=week")
        page = client.get(f"/teams/{team.slug}/kpis/?range=week")
        api = client.get(f"/api/v1/teams/{team.slug}/kpis", {"range": "week"})
    assert home.status_code == page.status_code == api.status_code == 200
    home_html, page_html, data = home.content.decode(), page.content.decode(), api.json()

    text = "7 days to 4 Dec 2026 14:00 UTC"
    start, end = "2026-11-27T14:00:00+00:00", "2026-12-04T14:00:00+00:00"
    assert _window(home_html)[:2] == (start, end)
    assert _window(home_html)[2].startswith(f"Cards: {text} · ")
    assert _window(page_html) == (start, end, text)
    assert (data["start"], data["end"], data["window"]["text"]) == (start, end, text)

    # 168 whole hours x 0.85 kWh = 142.8 kWh of IT energy, 168 x 0.75 = 126 kWh of GPU energy.
    head = {c.key: c.value for c in home.context["head"]["cards"]}
    cur = page.context["ov"]["current"]
    for key, kwh in (("energy_kwh", 142.8), ("gpu_energy_kwh", 126.0)):
        assert _wh(head[key]) == _wh(cur[key]) == _wh(data["current"][key]) == kwh * 1000, key
    # 168 billed host-hours at the snapshot's on-demand price, to the cent on every surface.
    cost = 168 * fleet["usd_per_hour"]
    assert _cents(head["cost_usd"]) == _cents(cur["cost_usd"]) == \
        _cents(data["current"]["cost_usd"]) == _cents(cost)
    printed = f"{cost:,.2f}"
    assert _figure(home_html, "cost_usd") == f"${printed}"
    assert _figure(page_html, "cost_usd") == f"{printed} USD"
    # GPU <= IT on the same page, in the same window.
    assert head["gpu_energy_kwh"] <= head["energy_kwh"]


def test_month_so_far_home_kpi_page_api_and_report_agree(client, users, team, fleet):
    from greenops.reports import generate
    from greenops.reports.models import Status, Trigger
    from greenops.reports.month_figures import Month

    client.force_login(users["member"])
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        report = generate.request(team, Month(2026, 12), Trigger.PAGE, enqueue=False)
        report = generate.run(report.id, now=NOW)
        assert report.status == Status.DONE, report.error
        client.get(f"/teams/{team.slug}/")  # no cost snapshot yet: refreshed after it
        home = client.get(f"/teams/{team.slug}/")
        page = client.get(f"/teams/{team.slug}/kpis/", {"month": "2026-12"})
        api = client.get(f"/api/v1/teams/{team.slug}/kpis", {"month": "2026-12"})
        shown = client.get(f"/teams/{team.slug}/reports/{report.id}/")
    assert home.status_code == page.status_code == api.status_code == shown.status_code == 200
    data = api.json()

    text = "1 Dec 2026 – 4 Dec 15:00, Europe/Paris (so far)"
    start, end = "2026-11-30T23:00:00+00:00", "2026-12-04T14:00:00+00:00"
    month = home.context["head"]["month"]
    assert (month["start"].isoformat(), month["end"].isoformat(), month["text"]) == (
        start, end, text)
    assert _window(page.content.decode()) == (start, end, text)
    assert (data["start"], data["end"], data["window"]["text"]) == (start, end, text)
    fig = report.figures
    assert (fig["start"], fig["end"], fig["window_text"], fig["so_far"]) == (
        start, end, text, True)
    assert text in shown.content.decode()

    # 87 whole hours (23:00 UTC on 30 Nov to 14:00 on 4 Dec) x 0.85 kWh = 73.95 kWh.
    cur = page.context["ov"]["current"]
    assert _wh(month["energy_kwh"]) == _wh(cur["energy_kwh"]) == \
        _wh(data["current"]["energy_kwh"]) == _wh(fig["totals"]["energy_kwh"]) == 73_950
    assert _wh(cur["gpu_energy_kwh"]) == _wh(fig["totals"]["gpu_energy_kwh"]) == 65_250
    cost = 87 * fleet["usd_per_hour"]
    assert _cents(month["cost_usd"]) == _cents(cur["cost_usd"]) == \
        _cents(data["current"]["cost_usd"]) == _cents(fig["totals"]["cost_usd"]) == _cents(cost)
    # The report's host rows bill the same 87 hours (not the rest of December, not 14:00).
    (row,) = fig["hosts"]
    assert row["running_hours"] == 87 and _cents(row["cost_usd"]) == _cents(cost)
    assert f"{cost:,.2f} USD" in shown.content.decode()
    assert f"${cost:,.2f}" in home.content.decode()
