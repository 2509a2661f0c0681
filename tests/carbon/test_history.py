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
from tests.support.factories import make_host

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


# Issue 16 (mutation testing): the factor-period code's survivors, each test checked against
# the mutants named in tests/mutation/SURVIVORS.md by planting them by hand.

T1 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
T2 = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)
T3 = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def _rows(host):
    return [(p.valid_from, p.valid_to, p.pue, p.pue_source, p.intensity_g_per_kwh,
             p.intensity_source)
            for p in FactorsPeriod.objects.filter(host=host).order_by("valid_from")]


def test_factors_at_takes_the_period_that_starts_at_the_hour_and_the_first_before_all():
    from greenops.carbon.accounting import SiteFactors, factors_at

    # Three periods from T1, T2, T3. An hour exactly at T2 is in the second (its start is
    # inclusive); an hour before T1 gets the first period's factors; all four fields, both
    # sources included, come back as stored.
    periods = [FactorsPeriod(valid_from=start, pue=pue, pue_source=f"pue {n}",
                             intensity_g_per_kwh=g, intensity_source=f"grid {n}")
               for n, (start, pue, g) in enumerate(
                   [(T1, 1.1, 100.0), (T2, 1.2, 200.0), (T3, 1.3, 300.0)])]
    assert factors_at(periods, T2) == SiteFactors(1.2, "pue 1", 200.0, "grid 1")
    assert factors_at(periods, T1 - HOUR) == SiteFactors(1.1, "pue 0", 100.0, "grid 0")
    assert factors_at(periods, T3 + HOUR) == SiteFactors(1.3, "pue 2", 300.0, "grid 2")


def test_restate_drops_later_periods_and_closes_the_one_around_since_for_that_host_only(team):
    from greenops.carbon.accounting import SINCE_EVER, restate_factors

    # Host A: [ever, T1) 1.5/500, [T1, T3) 1.4/400, [T3, open) 1.3/300; today's site factors
    # are PUE 1.1 ("site Frankfurt") and 200 g/kWh ("site override (Frankfurt): meter").
    # Restated from T2: [ever, T1) untouched, [T1, T2), [T2, open) with today's factors; the
    # period from T3 is gone. Host B ([ever, T3), [T3, open)) is not touched at all.
    a, _ = make_host(team, name="a", gpus=1)
    b, _ = make_host(team, name="b", gpus=1)
    site = Site.objects.create(team=team, name="Frankfurt", pue=1.1,
                               grid_intensity_override_g_per_kwh=200.0, override_source="meter")
    HostSite.objects.create(host=a, site=site)
    for host, spans in ((a, [(SINCE_EVER, T1, 1.5, 500.0), (T1, T3, 1.4, 400.0),
                             (T3, None, 1.3, 300.0)]),
                        (b, [(SINCE_EVER, T3, 1.2, 250.0), (T3, None, 1.25, 260.0)])):
        for start, end, pue, g in spans:
            FactorsPeriod.objects.create(host=host, valid_from=start, valid_to=end, pue=pue,
                                         pue_source="old", intensity_g_per_kwh=g,
                                         intensity_source="old")
    b_before = _rows(b)
    restate_factors(a, T2)
    assert _rows(a) == [
        (SINCE_EVER, T1, 1.5, "old", 500.0, "old"),
        (T1, T2, 1.4, "old", 400.0, "old"),
        (T2, None, 1.1, "site Frankfurt", 200.0, "site override (Frankfurt): meter"),
    ]
    assert _rows(b) == b_before


def test_a_source_longer_than_its_column_is_cut_to_300_characters_everywhere(team):
    from greenops.carbon.accounting import (
        SINCE_EVER,
        ensure_factors,
        record_factors,
        restate_factors,
    )

    # Site name 100 characters, override source 200: the intensity source is
    # "site override (" (15) + 100 + "): " (3) + 200 = 318 characters; the column holds 300.
    # Stored cut to 300 at first use, on a change and on a restatement; an unchanged site
    # opens no new period although the full text is longer than the stored one.
    host, _ = make_host(team, gpus=1)
    name, why = "N" * 100, "m" * 200
    site = Site.objects.create(team=team, name=name, pue=1.2,
                               grid_intensity_override_g_per_kwh=350.0, override_source=why)
    HostSite.objects.create(host=host, site=site)
    source = f"site override ({name}): {why}"
    assert len(source) == 318
    ensure_factors(host)
    record_factors(host, T1)
    assert _rows(host) == [(SINCE_EVER, None, 1.2, f"site {name}", 350.0, source[:300])]
    Site.objects.filter(pk=site.pk).update(pue=1.4)  # no signal: record_factors by hand
    record_factors(host, T2)
    assert _rows(host)[1:] == [(T2, None, 1.4, f"site {name}", 350.0, source[:300])]
    restate_factors(host, T3)
    assert _rows(host)[1:] == [(T2, T3, 1.4, f"site {name}", 350.0, source[:300]),
                               (T3, None, 1.4, f"site {name}", 350.0, source[:300])]
