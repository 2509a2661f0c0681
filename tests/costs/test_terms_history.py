"""Issue 8 item 11: a host's cost terms keep their validity periods. Switching a host from
on-demand to reserved, or editing an on-premises host's $/kWh, applies from the moment of the
edit: a closed month keeps its cost on the Costs page, the KPIs and the monthly report, and
only an explicit, audited restate rewrites it.

Every figure below is worked out by hand in the comment beside it. The prices are written the
way the catalog stores them (greenops.costs.models.Price, an AWS Price List API rate in $/h);
the snapshot's own rows for the offer are removed first so the test's rates are the only ones.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from greenops.carbon.models import HostSite, Site
from greenops.costs.accounting import collect, team_costs
from greenops.costs.models import (
    SINCE_EVER,
    HostCostConfig,
    HostTermsPeriod,
)
from greenops.kpis import queries, rollup
from greenops.kpis.models import Period
from greenops.reports.month_figures import Month, month_figures
from greenops.teams.models import AuditEvent
from greenops.telemetry.models import GpuHour, Host
from tests.support.costs import SWITCH, UTC, at, enrolled, only_prices, switch_to_reserved
from tests.support.factories import make_host

HOUR = dt.timedelta(hours=1)
OCT = (dt.datetime(2026, 10, 1, tzinfo=UTC), SWITCH)
OCT_RUN = dt.datetime(2026, 10, 10, 0, 0, tzinfo=UTC)  # 10 running hours from here
NOV_RUN = dt.datetime(2026, 11, 10, 0, 0, tzinfo=UTC)  # and 10 from here
NOV_END = dt.datetime(2026, 11, 11, 0, 0, tzinfo=UTC)
DAY = dt.timedelta(days=1)
# The KPI rollups are checked on the day of each month's running hours (rebuilding whole
# months would take minutes): Oct 10 and Nov 10.
OCT_DAY = (OCT_RUN, OCT_RUN + DAY)
NOV_DAY = (NOV_RUN, NOV_RUN + DAY)






def ran(host, start: dt.datetime, hours: int, kwh: float = 0.3) -> None:
    """The host's first GPU reported in `hours` hours from `start` (hour rollups)."""
    gpu = host.gpus.order_by("index").first()
    GpuHour.objects.bulk_create([
        GpuHour(gpu=gpu, bucket=start + i * HOUR, samples=60, util_sum=80.0 * 60, util_n=60,
                energy_j=kwh * 3_600_000)
        for i in range(hours)])


def costs_page(team, now: dt.datetime) -> float | None:
    """The Costs page's total for its 30-day lookback ending at the start of `now`'s hour."""
    return team_costs(collect(team, 30, now))["total_cost_usd"]


def kpi_cost(team, start, end) -> float | None:
    return queries.kpis(team, None, start, end, Period.HOUR)["cost_usd"]


def report_cost(team, month: Month) -> float | None:
    return month_figures(team, month, now=NOV_END)["totals"]["cost_usd"]


@pytest.fixture
def od_host(team):
    """A p4d host (2 GPUs) on-demand at $30/h, enrolled 2026-09-15, that ran 10 hours in
    October and 10 in November; reserved 1y no-upfront is $18/h."""
    only_prices(on_demand="30.00", reserved="18.00")
    host, _ = make_host(team)
    enrolled(host, dt.datetime(2026, 9, 15, tzinfo=UTC))
    ran(host, OCT_RUN, 10)
    ran(host, NOV_RUN, 10)
    return host




def test_switching_to_reserved_keeps_the_closed_month(od_host):
    team = od_host.team
    # October, on-demand, billed for the hours it ran: 10 h x $30 = $300 on every page.
    # Costs page at 2026-11-01 00:00: its 30 days are Oct 2 - Nov 1, which hold the 10 hours.
    assert costs_page(team, SWITCH) == pytest.approx(300.0)
    rollup.rebuild(team, *OCT_DAY)
    assert kpi_cost(team, *OCT_DAY) == pytest.approx(300.0)
    assert report_cost(team, Month(2026, 10)) == pytest.approx(300.0)

    switch_to_reserved(od_host)

    # Unchanged after the switch, also when the KPI rollups are recomputed. (Before this change
    # October was re-priced as reserved for every hour owned: 720 h x $18 = $12,960 on the
    # Costs page, 24 h x $18 = $432 for the KPIs of Oct 10, 744 h x $18 = $13,392 in the
    # report.)
    assert costs_page(team, SWITCH) == pytest.approx(300.0)
    rollup.rebuild(team, *OCT_DAY)
    assert kpi_cost(team, *OCT_DAY) == pytest.approx(300.0)
    assert report_cost(team, Month(2026, 10)) == pytest.approx(300.0)
    # November on the new terms: reserved, every hour owned. Nov 10: 24 h x $18 = $432.
    rollup.rebuild(team, *NOV_DAY)
    assert kpi_cost(team, *NOV_DAY) == pytest.approx(432.0)
    # The Costs page at Nov 11 00:00 spans Oct 12 - Nov 11: no October running hour after
    # Oct 12, and Nov 1 - Nov 11 is 240 h x $18 = $4,320.
    assert costs_page(team, NOV_END) == pytest.approx(4320.0)


@pytest.fixture
def on_prem(team):
    """An on-premises host: hardware $52,560 over 36 months = 52,560 / (36 x 730) = $2.00/h,
    electricity $0.10/kWh, site PUE 1.5; enrolled 2026-10-01; each running hour 1 kWh of GPU
    energy (no CPU/RAM readings)."""
    host, _ = make_host(team, name="basement-1")
    host.provider, host.purchase_option, host.instance_type, host.region = (
        "on_prem", "on_prem", "", "")
    host.save()
    enrolled(host, OCT[0])
    HostCostConfig.objects.create(host=host, hardware_usd=Decimal("52560"),
                                  amortisation_months=36,
                                  electricity_usd_per_kwh=Decimal("0.10"), source="invoice")
    site = Site.objects.create(team=team, name="Basement", pue=1.5, country="DEU")
    HostSite.objects.create(host=host, site=site)
    ran(host, OCT_RUN, 10, kwh=1.0)
    ran(host, NOV_RUN, 10, kwh=1.0)
    return host


def test_editing_on_prem_electricity_keeps_the_closed_month(on_prem):
    team = on_prem.team
    # October: 744 h owned x $2 = $1,488 + 10 kWh x PUE 1.5 x $0.10 = $1.50 -> $1,489.50.
    # KPIs of Oct 10: 24 h x $2 + $1.50 = $49.50.
    rollup.rebuild(team, *OCT_DAY)
    assert kpi_cost(team, *OCT_DAY) == pytest.approx(49.5)
    assert report_cost(team, Month(2026, 10)) == pytest.approx(1489.5)
    with at(SWITCH):
        config = on_prem.cost_config
        config.electricity_usd_per_kwh = Decimal("0.30")
        config.save()
    # (Before this change: 10 x 1.5 x 0.30 = $4.50, so October became $1,492.50, Oct 10 $52.50.)
    rollup.rebuild(team, *OCT_DAY)
    assert kpi_cost(team, *OCT_DAY) == pytest.approx(49.5)
    assert report_cost(team, Month(2026, 10)) == pytest.approx(1489.5)
    # Nov 10 at the new rate: 24 h x $2 = $48 + 10 kWh x 1.5 x $0.30 = $4.50 -> $52.50.
    rollup.rebuild(team, *NOV_DAY)
    assert kpi_cost(team, *NOV_DAY) == pytest.approx(52.5)
    # The November report, read on 11 Nov at 00:00 (NOV_END): the running month so far, 1-10
    # Nov owned = 240 h x $2 = $480, + $4.50 = $484.50 (issue 29: a running month counts whole
    # finished hours up to now, not the owned hours still to come).
    assert report_cost(team, Month(2026, 11)) == pytest.approx(484.5)


def test_the_terms_history_of_a_switch(od_host):
    team = od_host.team
    costs_page(team, SWITCH)  # first pricing records the terms in force since ever
    switch_to_reserved(od_host)
    # The host save and the cost settings at the same instant make one change, not two.
    old, new = HostTermsPeriod.objects.filter(host=od_host).order_by("valid_from")
    assert (old.valid_from, old.valid_to, old.purchase_option) == (SINCE_EVER, SWITCH,
                                                                    "on_demand")
    assert (new.valid_from, new.valid_to, new.purchase_option, new.term_years, new.payment,
            new.source) == (SWITCH, None, "reserved", 1, "no_upfront", "RI purchase 2026-11")


def test_an_hour_is_split_exactly_at_the_change(od_host):
    # The host ran 11:00-13:00 on Oct 20 and was switched to reserved at 12:15. Window
    # 11:00-14:00:
    #   11:00 on-demand, ran:                           1 h    x $30 = $30.00
    #   12:00 ran; 15 min on-demand, 45 min reserved:   0.25 x $30 + 0.75 x $18 = $21.00
    #   13:00 did not run, reserved (every hour owned): 1 h    x $18 = $18.00
    # Total $69.00, 3 billed hours (at the 12:00 price for the whole hour it would be $78 or
    # $66, at the 13:00 terms for all of it $54).
    team = od_host.team
    start = dt.datetime(2026, 10, 20, 11, tzinfo=UTC)
    ran(od_host, start, 2)
    costs_page(team, start)
    switch_to_reserved(od_host, start + dt.timedelta(hours=1, minutes=15))
    rollup.rebuild(team, start, start + 3 * HOUR)
    assert kpi_cost(team, start, start + HOUR) == pytest.approx(30.0)
    assert kpi_cost(team, start + HOUR, start + 2 * HOUR) == pytest.approx(21.0)
    assert kpi_cost(team, start, start + 3 * HOUR) == pytest.approx(69.0)
    from greenops.costs.accounting import gpu_usage, host_costs

    hosts = list(Host.objects.filter(pk=od_host.pk).prefetch_related("gpus"))
    [row] = host_costs(hosts, gpu_usage(hosts, start, start + 3 * HOUR), start,
                       start + 3 * HOUR)
    assert row.cost_usd == pytest.approx(69.0) and row.billed_hours == 3


def test_electricity_is_split_at_a_change_and_a_change_on_the_hour_splits_nothing(on_prem):
    # Oct 10 00:00 and 01:00 each 1 kWh, PUE 1.5, hardware $2/h. $/kWh 0.10 -> 0.30 at 00:30,
    # then -> 0.50 at exactly 01:00:
    #   00:00  $2 + 0.5 x 1 kWh x 1.5 x 0.10 + 0.5 x 1 kWh x 1.5 x 0.30 = 2 + 0.075 + 0.225
    #          = $2.30
    #   01:00  $2 + 1 kWh x 1.5 x 0.50 = $2.75
    team = on_prem.team
    h0 = OCT_RUN
    costs_page(team, h0)
    for when, rate in ((h0 + dt.timedelta(minutes=30), "0.30"), (h0 + HOUR, "0.50")):
        with at(when):
            config = HostCostConfig.objects.get(host=on_prem)
            config.electricity_usd_per_kwh = Decimal(rate)
            config.save()
    rollup.rebuild(team, h0, h0 + 2 * HOUR)
    assert kpi_cost(team, h0, h0 + HOUR) == pytest.approx(2.30)
    assert kpi_cost(team, h0 + HOUR, h0 + 2 * HOUR) == pytest.approx(2.75)


def test_restating_terms_is_explicit_and_audited(od_host):
    team = od_host.team
    costs_page(team, SWITCH)
    switch_to_reserved(od_host)
    oct31 = SWITCH - DAY
    # Without a reason nothing is rewritten and nothing is logged.
    with pytest.raises(CommandError, match="--reason"):
        call_command("restate_terms", team.slug, since="2026-10-31", reason="  ")
    assert report_cost(team, Month(2026, 10)) == pytest.approx(300.0)
    assert not AuditEvent.objects.filter(team=team, action="costs.restate_terms").exists()
    # The reservation was in fact bought on Oct 31: restate from then (run at Nov 1 01:00, so
    # the command rebuilds 25 hours of KPIs). October: Oct 1-30 on-demand, 10 h x $30 = $300,
    # plus Oct 31 reserved, every hour owned: 24 h x $18 = $432 -> $732.
    with at(SWITCH + HOUR):
        call_command("restate_terms", team.slug, since="2026-10-31", reason="RI bought 31 Oct",
                     host=[od_host.name])
    assert kpi_cost(team, oct31, SWITCH) == pytest.approx(432.0)
    assert report_cost(team, Month(2026, 10)) == pytest.approx(732.0)
    event = AuditEvent.objects.get(team=team, action="costs.restate_terms")
    assert event.detail["reason"] == "RI bought 31 Oct"
    assert event.detail["since"].startswith("2026-10-31")
    assert event.detail["terms"][od_host.name]["purchase_option"] == "reserved"
    periods = list(HostTermsPeriod.objects.filter(host=od_host).order_by("valid_from")
                   .values_list("purchase_option", "valid_from", "valid_to"))
    assert periods == [("on_demand", SINCE_EVER, oct31), ("reserved", oct31, None)]


def test_restate_names_bad_arguments(od_host):
    team = od_host.team
    with pytest.raises(CommandError, match="--host"):
        call_command("restate_terms", team.slug, since="2026-10-01", reason="x", host=["nope"])
    with pytest.raises(CommandError, match="--since"):
        call_command("restate_terms", team.slug, since="last week", reason="x")
    with pytest.raises(CommandError, match="team"):
        call_command("restate_terms", "no-such-team", since="2026-10-01", reason="x")
    assert not AuditEvent.objects.filter(action="costs.restate_terms").exists()


def test_edits_that_change_no_term_open_no_period(od_host):
    costs_page(od_host.team, SWITCH)
    assert HostTermsPeriod.objects.filter(host=od_host).count() == 1
    od_host.save()  # nothing changed
    od_host.last_seen = SWITCH
    od_host.save(update_fields=["last_seen"])
    HostCostConfig.objects.create(host=od_host)  # the defaults the catalog used already
    od_host.hostname = "renamed"
    od_host.save()
    assert HostTermsPeriod.objects.filter(host=od_host).count() == 1


def test_a_host_never_priced_records_its_terms_at_first_use(od_host):
    # Edited before anything priced it: no history yet, so its first pricing takes the
    # terms as they are then, for every hour (like a host enrolled with them).
    switch_to_reserved(od_host)
    assert not HostTermsPeriod.objects.filter(host=od_host).exists()
    # October at reserved: 744 h x $18 = $13,392.
    assert report_cost(od_host.team, Month(2026, 10)) == pytest.approx(13392.0)
    [p] = HostTermsPeriod.objects.filter(host=od_host)
    assert (p.valid_from, p.purchase_option) == (SINCE_EVER, "reserved")


def test_deleting_a_host_or_its_settings(on_prem):
    costs_page(on_prem.team, SWITCH)
    # Settings deleted: the host falls back to no settings from now on (no hardware cost).
    with at(SWITCH):
        HostCostConfig.objects.filter(host=on_prem).delete()
    last = HostTermsPeriod.objects.filter(host=on_prem).order_by("valid_from").last()
    assert (last.valid_from, last.hardware_usd) == (SWITCH, None)
    # A host deleted with its settings takes its history with it, recording nothing new.
    HostCostConfig.objects.create(host=on_prem, hardware_usd=Decimal("1000"))
    Host.objects.get(pk=on_prem.pk).delete()
    assert not HostTermsPeriod.objects.filter(host_id=on_prem.pk).exists()


def test_the_migration_seeds_every_host_with_its_terms_since_ever(od_host, on_prem):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("greenops.costs.migrations.0010_host_terms_periods")
    migration.seed_terms(apps, None)
    rows = {p.host_id: p for p in HostTermsPeriod.objects.all()}
    assert rows[od_host.pk].valid_from == SINCE_EVER
    assert rows[od_host.pk].purchase_option == "on_demand"
    assert rows[od_host.pk].hardware_usd is None and rows[od_host.pk].term_years == 1
    # $52,560 over 36 months = $2/h; its $/kWh and source come with it.
    p = rows[on_prem.pk]
    assert p.hardware_usd_per_hour == Decimal("2")
    assert p.electricity_usd_per_kwh == Decimal("0.1") and p.source == "invoice"
    # Seeded rows are what a first use would have recorded: no change is seen.
    assert HostTermsPeriod.record(on_prem) is False


def test_idle_cost_keeps_the_price_of_its_hour(od_host):
    # GPU 1 idle (0 %) through 2 hours of Oct 10 (120 idle minutes) while GPU 0 ran: 2 idle
    # GPU-hours x $30 / 2 GPUs = $30. After the switch the per-GPU rate is $18 / 2 = $9, but
    # October's idle cost stays $30 (it was 2 x $9 = $18 before this change).
    from greenops.telemetry.models import GpuMinute

    gpu1 = od_host.gpus.get(index=1)
    GpuMinute.objects.bulk_create([
        GpuMinute(gpu=gpu1, bucket=OCT_RUN + dt.timedelta(minutes=m), samples=1, util_sum=0.0,
                  util_n=1, energy_j=60 * 50.0) for m in range(120)])
    before = team_costs(collect(od_host.team, 30, SWITCH))
    assert before["idle_cost_usd"] == pytest.approx(30.0)
    switch_to_reserved(od_host)
    after = team_costs(collect(od_host.team, 30, SWITCH))
    assert after["idle_cost_usd"] == pytest.approx(30.0)
    assert after["hosts"][0]["idle_gpu_hours"] == pytest.approx(2.0)


def test_methodology_page_states_the_terms_rule(client, users):
    client.force_login(users["member"])
    html = client.get("/methodology/").content.decode()
    part = html[html.index('id="history"'):html.index('id="recommendations"')]
    assert "Every host's cost terms keep their validity periods" in part
    assert "keeps its closed months at on-demand" in part
    assert "split at the change" in part
    assert "manage.py restate_terms" in part


def test_a_host_location_edit_changes_carbon_from_then_on(team, settings):
    # No site: the grid intensity comes from the host's own country. 1 kWh in the hour before
    # the edit (Germany) and 1 kWh in the hour after (France), PUE 1.2 (GREENOPS_DEFAULT_PUE):
    # each hour's carbon = 1 kWh x 1.2 x that country's intensity (codecarbon's figures).
    from greenops.carbon import intensity
    from greenops.carbon.accounting import carbon_of
    from greenops.energy import it_energy

    settings.GREENOPS_DEFAULT_PUE = 1.2
    host, _ = make_host(team, gpus=1)
    host.country, host.region, host.provider = "DEU", "", ""
    host.save()
    h0 = OCT_RUN
    ran(host, h0, 2, kwh=1.0)
    gpus = list(host.gpus.select_related("host"))
    deu = intensity.resolve(country="DEU").g_per_kwh
    fra = intensity.resolve(country="FRA").g_per_kwh
    assert deu != fra
    assert carbon_of(it_energy(gpus, h0, h0 + HOUR)).co2e_g == pytest.approx(1.2 * deu)
    with at(h0 + HOUR):
        host.country = "FRA"
        host.save()
    gpus = list(host.gpus.select_related("host"))
    assert carbon_of(it_energy(gpus, h0, h0 + HOUR)).co2e_g == pytest.approx(1.2 * deu)
    assert carbon_of(it_energy(gpus, h0 + HOUR, h0 + 2 * HOUR)).co2e_g == pytest.approx(
        1.2 * fra)


def test_the_host_edit_page_switches_from_the_moment_of_saving(client, users, od_host):
    # The real path: the owner sets "Reserved instance" on the host's edit page on Nov 1.
    team = od_host.team
    assert costs_page(team, SWITCH) == pytest.approx(300.0)  # 10 h x $30 (as above)
    client.force_login(users["owner"])
    page = client.get(f"/teams/{team.slug}/hosts/{od_host.id}/edit/").content.decode()
    assert "A change counts from the moment you save it" in page
    with at(SWITCH):
        r = client.post(f"/teams/{team.slug}/hosts/{od_host.id}/edit/", {
            "provider": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge",
            "purchase_option": "reserved", "country": "", "site": ""})
    assert r.status_code == 302
    # No cost settings: 1 year, no upfront, as the catalog assumes -> $18/h from Nov 1.
    assert costs_page(team, SWITCH) == pytest.approx(300.0)
    assert costs_page(team, NOV_END) == pytest.approx(4320.0)  # 240 h x $18
    assert AuditEvent.objects.filter(team=team, action="host.changed").exists()
