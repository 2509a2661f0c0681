"""Issue 8 item 11: a site edit never rewrites past hours' carbon; each hour uses the PUE and
grid intensity in force then."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops.carbon.accounting import carbon_of
from greenops.carbon.models import FactorsPeriod, HostSite, Site
from greenops.energy import it_energy
from greenops.kpis import queries, rollup
from greenops.kpis.models import Period
from greenops.telemetry.models import GpuHour
from tests.conftest import make_host

HOUR = dt.timedelta(hours=1)


def test_site_edit_applies_from_now_and_keeps_past_hours(team):
    # One GPU, 1 kWh (3.6 MJ) in an hour two hours ago and 1 kWh in the next hour.
    # Site Frankfurt: PUE 1.3, 400 g/kWh until the edit now; then PUE 1.1, 200 g/kWh.
    #   past hour:   1 kWh x 1.3 x 400 = 520 g
    #   next hour:   1 kWh x 1.1 x 200 = 220 g        both: 740 g
    # (with today's factors for both it would be 440 g; the past 520 g would become 220 g)
    host, _ = make_host(team, gpus=1)
    gpu = host.gpus.get()
    site = Site.objects.create(team=team, name="Frankfurt", pue=1.3,
                               grid_intensity_override_g_per_kwh=400.0)
    HostSite.objects.create(host=host, site=site)
    now = timezone.now()
    past = now.replace(minute=0, second=0, microsecond=0) - 2 * HOUR
    future = past + 3 * HOUR
    for bucket in (past, future):
        GpuHour.objects.create(gpu=gpu, bucket=bucket, samples=60, util_sum=6000, util_n=60,
                               energy_j=3_600_000)
    rollup.rebuild(team, past, past + HOUR)  # accounted while the old factors were in force
    assert queries.kpis(team, None, past, past + HOUR)["co2e_kg"] == pytest.approx(0.52)
    site.pue, site.grid_intensity_override_g_per_kwh = 1.1, 200.0
    site.save()
    [old, new] = FactorsPeriod.objects.filter(host=host).order_by("valid_from")
    assert (old.pue, old.intensity_g_per_kwh, new.pue, new.intensity_g_per_kwh) == (
        1.3, 400.0, 1.1, 200.0)
    assert old.valid_to == new.valid_from and new.valid_from >= now
    gpus = list(host.gpus.select_related("host"))
    assert carbon_of(it_energy(gpus, past, future + HOUR)).co2e_g == pytest.approx(740.0)
    # An explicit rebuild of the past hour keeps its factors.
    rollup.rebuild(team, past, past + HOUR)
    k = queries.kpis(team, None, past, past + HOUR, Period.HOUR)
    assert k["co2e_kg"] == pytest.approx(0.52) and k["pue"] == pytest.approx(1.3)


def test_an_edit_that_changes_nothing_opens_no_period(team):
    host, _ = make_host(team, gpus=1)
    site = Site.objects.create(team=team, name="Lab", pue=1.2, country="DEU")
    HostSite.objects.create(host=host, site=site)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - HOUR
    GpuHour.objects.create(gpu=host.gpus.get(), bucket=hour, samples=60, util_sum=6000,
                           util_n=60, energy_j=3_600_000)
    gpus = list(host.gpus.select_related("host"))
    carbon_of(it_energy(gpus, hour, hour + HOUR))
    site.save()
    site.save()
    assert FactorsPeriod.objects.filter(host=host).count() == 1


def test_restating_the_past_is_explicit_and_audited(team):
    from django.core.management import call_command

    from greenops.teams.models import AuditEvent

    # As above, then restate from two days ago: the past hour is recomputed with the new
    # factors, 1 kWh x 1.1 x 200 = 220 g, and the audit log says who, why and from when.
    host, _ = make_host(team, gpus=1)
    site = Site.objects.create(team=team, name="Frankfurt", pue=1.3,
                               grid_intensity_override_g_per_kwh=400.0)
    HostSite.objects.create(host=host, site=site)
    past = timezone.now().replace(minute=0, second=0, microsecond=0) - 2 * HOUR
    GpuHour.objects.create(gpu=host.gpus.get(), bucket=past, samples=60, util_sum=6000,
                           util_n=60, energy_j=3_600_000)
    rollup.rebuild(team, past, past + HOUR)
    site.pue, site.grid_intensity_override_g_per_kwh = 1.1, 200.0
    site.save()
    assert queries.kpis(team, None, past, past + HOUR)["co2e_kg"] == pytest.approx(0.52)
    since = (past - dt.timedelta(days=2)).date().isoformat()
    call_command("restate_factors", team.slug, since=since, reason="meter data for Q4")
    assert queries.kpis(team, None, past, past + HOUR)["co2e_kg"] == pytest.approx(0.22)
    event = AuditEvent.objects.get(team=team, action="carbon.restate_factors")
    assert event.detail["reason"] == "meter data for Q4" and event.detail["since"].startswith(
        since)


def test_methodology_page_states_the_history_rules(client, users):
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    part = html[html.index('id="history"'):]
    assert "Each hour is costed at the price in force at its start" in part
    assert "past hours keep the factors they were computed with" in part
    assert "manage.py restate_factors" in part
