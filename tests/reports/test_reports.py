"""Monthly reports: a hand-computed month with a time-zone edge, CSV = PDF = page = API,
an honest empty month, revision 2 with its difference, delivery, the command and the schedule.

The month (October 2026, team in Europe/Paris: UTC+2 until 25 October, UTC+1 after):
  October runs from 2026-09-30 22:00 UTC to 2026-10-31 23:00 UTC.
  Host A: 1 GPU, aws g.test in eu-test-1, on-demand at $4.00/h (a test catalog row);
          its site "Paris DC": PUE 1.5, grid intensity 400 g CO2e/kWh (site override).
  Every hour below is 60 wire-format samples, one per minute, 200 W x 60 s = 12,000 J each,
  so 720,000 J = 0.2 kWh of GPU energy per hour.
    S  2026-09-30 21:00 UTC = 23:00 CEST on 30 Sept -> September, util 50 %
    H0 2026-09-30 22:00 UTC = 00:00 CEST on 1 Oct   -> October,   util 2 % (idle, < 5 %)
    H1 2026-10-15 12:00 UTC                         -> October,   util 50 %
    H2 2026-10-31 22:00 UTC = 23:00 CET on 31 Oct   -> October,   util 50 %
    H3 2026-10-31 23:00 UTC = 00:00 CET on 1 Nov    -> November (its 23:30 UTC sample too)
  October: IT 3 x 0.2 = 0.6 kWh; facility 0.6 x 1.5 = 0.9 kWh; CO2e 0.9 x 400 = 360 g = 0.36 kg
           cost: 3 running hours x $4 = $12.00; idle: 1 GPU-hour (H0) x $4 = $4.00
           GPU util (2 x 60 + 50 x 60 + 50 x 60) / 180 = 34.0 %; GPU-hours 180 min / 60 = 3
  September: IT 0.2 kWh, so October's change is (0.6 - 0.2) / 0.2 = +200 %.
  Workload "Ranker" on GPU A0: 1000 inferences in H1 and 2000 in H2 (500 in H3: November),
           each in a 10-minute window, so 3000 / 1200 s measured = 2.5 per second;
           3000 inferences; 2,160,000 J / 3000 = 720 J each; 360 g / 3000 = 0.12 g each;
           KPI cost 180 GPU-minutes x $4/60 = $12 -> $4.00 per 1k inferences; SCI 0.12 g.
"""

from __future__ import annotations

import datetime as dt
import io

import orjson
import pytest
from pypdf import PdfReader

from greenops.kpis import queries as kpi_queries
from greenops.kpis import rollup
from greenops.reports import csv_writer, generate, month_figures
from greenops.reports.models import Report, Status, Subscription, Trigger
from greenops.reports.month_figures import Month
from tests.support.reports import (
    AFTER,
    H2,
    H3,
    OCT,
    UTC,
    hour_batch,
    set_zone,
)


def test_month_in_the_team_zone_is_hand_computed(team, october):
    fig = month_figures.month_figures(team, OCT, now=AFTER)
    assert (fig["start"], fig["end"]) == ("2026-09-30T22:00:00+00:00",
                                          "2026-10-31T23:00:00+00:00")
    t = fig["totals"]
    assert t["gpu_energy_kwh"] == pytest.approx(0.6)  # H0 + H1 + H2; H3 (23:30 UTC) is November
    assert t["energy_kwh"] == pytest.approx(0.6)
    assert t["facility_energy_kwh"] == pytest.approx(0.9)
    assert t["co2e_kg"] == pytest.approx(0.36)
    assert t["co2e_market_kg"] is None  # no supplier-specific factor on the site
    assert t["cost_usd"] == pytest.approx(12.0)
    assert t["idle_gpu_hours"] == 1 and t["idle_cost_usd"] == pytest.approx(4.0)
    assert t["gpu_util_pct"] == pytest.approx(34.0)
    assert t["gpu_hours"] == pytest.approx(3.0)
    assert t["requests"] == 3000
    assert fig["previous"]["energy_kwh"] == pytest.approx(0.2)  # S, in September
    assert fig["change_pct"]["energy_kwh"] == pytest.approx(200.0)
    assert fig["hours_with_data"] == 3 and fig["hours_in_month"] == 745  # 31 d + 1 h (DST)
    (w,) = fig["workloads"]
    assert w["requests"] == 3000
    assert w["energy_per_inference_j"] == pytest.approx(720.0)
    assert w["co2e_per_inference_g"] == pytest.approx(0.12)
    assert w["cost_per_1k_inferences_usd"] == pytest.approx(4.0)
    # Each window spans 10 minutes: 3000 inferences / 1200 s measured = 2.5 per second.
    assert w["throughput_per_s"] == pytest.approx(2.5)
    (host,) = fig["hosts"]
    assert host["scope"].startswith("Scope 3") and host["purchase_option"] == "on_demand"
    assert host["cost_usd"] == pytest.approx(12.0) and host["running_hours"] == 3
    (sci,) = fig["sci"]["rows"]
    assert sci["unit"] == "inference" and sci["sci_g"] == pytest.approx(0.12)
    assert sci["m_g"] is None
    by_option = {o["option"]: o["cost_usd"] for o in fig["cost_by_option"]}
    assert by_option["on_demand"] == pytest.approx(12.0) and by_option["spot"] == 0.0
    oct31 = next(d for d in fig["daily"] if d["day"] == "2026-10-31")
    assert oct31["facility_energy_kwh"] == pytest.approx(0.3)  # H2 only: 0.2 x 1.5
    assert len(fig["daily"]) == 31


def test_report_figures_are_the_kpi_engines(team, october):
    """The totals and workload rows are what the KPI API answers for the same window."""
    fig = month_figures.month_figures(team, OCT, now=AFTER)
    start, end = month_figures.month_window(team, OCT)
    k = kpi_queries.kpis(team, None, start, end)
    for key in ("energy_kwh", "facility_energy_kwh", "co2e_kg", "requests", "gpu_util_pct"):
        assert fig["totals"][key] == k[key]
    # One cost model: the month's host costs equal the KPI rollups' hourly costs here (an
    # on-demand host, billed for the hours it ran).
    assert fig["totals"]["cost_usd"] == pytest.approx(k["cost_usd"])
    kw = kpi_queries.kpis(team, october["workload"], start, end)
    (w,) = fig["workloads"]
    assert (w["latency_p50_ms"], w["latency_p99_ms"]) == (kw["latency_p50_ms"],
                                                         kw["latency_p99_ms"])


def _generate(team, month=OCT, now=AFTER, trigger=Trigger.COMMAND) -> Report:
    report = generate.request(team, month, trigger, enqueue=False)
    return generate.run(report.id, now=now)


def _pdf_text(data: bytes) -> str:
    reader = PdfReader(io.BytesIO(data))
    assert len(reader.pages) >= 2
    # Table cells wrap: compare with whitespace collapsed, as a reader sees it.
    return " ".join(" ".join(p.extract_text() for p in reader.pages).split())


def test_csv_pdf_page_and_api_agree(client, users, team, october):
    report = _generate(team)
    assert report.status == Status.DONE and report.revision == 1, report.error
    fig = report.figures
    # CSV: host rows add up to the total row, which is the report's totals.
    back = csv_writer.read_totals(bytes(report.csv_data))
    assert back["total"]["it_kwh"] == pytest.approx(0.6)
    assert back["total"]["co2e_location_kg"] == pytest.approx(0.36)
    assert back["total"]["cost_usd"] == pytest.approx(12.0)
    assert back["total"]["inferences"] == 3000
    for col in ("accelerator_kwh", "it_kwh", "facility_kwh", "co2e_location_kg", "cost_usd",
                "accelerator_hours", "idle_accelerator_hours", "idle_cost_usd"):
        assert back["hosts_sum"][col] == pytest.approx(back["total"][col]), col
    # PDF, page and API show the same strings for the same figures.
    pdf = _pdf_text(bytes(report.pdf_data))
    client.force_login(users["member"])
    page = client.get(f"/teams/{team.slug}/reports/{report.id}/").content.decode()
    api = client.get(f"/api/v1/teams/{team.slug}/reports/{report.id}").json()
    assert api["figures"] == fig
    for shown in ("0.600 kWh", "0.900 kWh", "0.360 kg CO2e", "12.00 USD", "+200.0 %",
                  "720.00 J", "0.1200 g", "4.0000 USD", "34.0 %", "Scope 3 (cat. 1, cloud)",
                  "Europe/Paris", "2.500 /s", "measured 20 min of 31 d"):
        assert shown in pdf, shown
        assert shown in page, shown
    # The CSV's downloads are the stored bytes, for a member of the team.
    r = client.get(f"/teams/{team.slug}/reports/{report.id}/report.csv")
    assert r.status_code == 200 and b"".join(r.streaming_content) == bytes(report.csv_data)
    r = client.get(f"/teams/{team.slug}/reports/{report.id}/report.pdf")
    assert r["Content-Type"] == "application/pdf"
    assert b"".join(r.streaming_content).startswith(b"%PDF")


def test_empty_month_is_an_honest_complete_report(client, users, team):
    report = _generate(team, Month(2026, 8))
    assert report.status == Status.DONE and report.revision == 1
    fig = report.figures
    assert fig["totals"]["energy_kwh"] == 0 and fig["totals"]["cost_usd"] == 0
    assert fig["hours_with_data"] == 0 and fig["workloads"] == [] and fig["hosts"] == []
    pdf = _pdf_text(bytes(report.pdf_data))
    assert "No telemetry for this month" in pdf and "Methodology" in pdf
    back = csv_writer.read_totals(bytes(report.csv_data))
    assert back["total"]["it_kwh"] == 0.0
    client.force_login(users["owner"])
    html = client.get(f"/teams/{team.slug}/reports/{report.id}/").content.decode()
    assert "No telemetry for this month" in html and "No workload had inferences" in html


def test_late_data_makes_revision_two_with_its_difference(client, users, team, october,
                                                          post_batch):
    first = _generate(team)
    same = _generate(team)
    assert same.revision is None and same.unchanged_from == first  # nothing changed
    # An agent replays a spooled hour of October (2026-10-20 08:00 UTC): +0.2 kWh, +$4.
    host_token = october["host"].set_new_token()
    october["host"].save()
    late = dt.datetime(2026, 10, 20, 8, tzinfo=UTC)
    assert post_batch(host_token, hour_batch(late, 50.0)).status_code == 202
    rollup.rebuild(team, late, late + dt.timedelta(hours=1))
    second = _generate(team)
    assert second.revision == 2
    diff = {d["figure"]: d for d in second.difference}
    assert diff["totals.energy_kwh"]["before"] == pytest.approx(0.6)
    assert diff["totals.energy_kwh"]["after"] == pytest.approx(0.8)
    assert diff["totals.energy_kwh"]["change"] == pytest.approx(0.2)
    assert diff["totals.cost_usd"]["change"] == pytest.approx(4.0)  # one more running hour
    assert "Restated" in _pdf_text(bytes(second.pdf_data))
    # The first revision is untouched and still downloadable.
    first.refresh_from_db()
    assert first.revision == 1 and first.figures["totals"]["energy_kwh"] == pytest.approx(0.6)
    client.force_login(users["member"])
    r = client.get(f"/teams/{team.slug}/reports/{first.id}/report.csv")
    assert r.status_code == 200
    html = client.get(f"/teams/{team.slug}/reports/{second.id}/").content.decode()
    assert "Restated:" in html and "totals.energy_kwh" in html and "revision 1" in html


def test_a_claimed_report_runs_once(team):
    report = generate.request(team, Month(2026, 8), enqueue=False)
    assert generate.run(report.id, now=AFTER) is not None
    assert generate.run(report.id, now=AFTER) is None  # a redelivered task does nothing
    assert generate.request(team, Month(2026, 8), enqueue=False).id != report.id


def test_outsider_gets_404_for_another_teams_report(client, users, team, other_team):
    report = _generate(team, Month(2026, 8))
    client.force_login(users["outsider"])
    for path in (f"/teams/{team.slug}/reports/{report.id}/",
                 f"/teams/{team.slug}/reports/{report.id}/report.pdf",
                 f"/teams/{other_team.slug}/reports/{report.id}/",  # own team, their id
                 f"/teams/{other_team.slug}/reports/{report.id}/report.csv",
                 f"/api/v1/teams/{team.slug}/reports/{report.id}"):
        assert client.get(path).status_code == 404, path


def test_bad_month_is_a_4xx_naming_the_field(client, users, team):
    client.force_login(users["member"])
    r = client.post(f"/teams/{team.slug}/reports/generate", {"month": "2026-13"})
    assert r.status_code == 400 and b"month: must be a calendar month" in r.content
    r = client.post(f"/api/v1/teams/{team.slug}/reports", orjson.dumps({"month": "Oct"}),
                    content_type="application/json")
    assert r.status_code == 422 and r.json()["field"] == "month"
    assert not Report.objects.exists()


def test_page_and_api_generate_and_report_status(client, users, team,
                                                 django_capture_on_commit_callbacks):
    client.force_login(users["member"])
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(f"/teams/{team.slug}/reports/generate", {"month": "2026-08"})
    assert r.status_code == 302
    report = Report.objects.get()
    assert report.status == Status.DONE and report.trigger == Trigger.PAGE  # eager in tests
    s = client.get(f"/teams/{team.slug}/reports/{report.id}/status").json()
    assert s["status"] == "done" and s["progress_pct"] == 100 and s["revision"] == 1
    assert s["files"]["pdf"].endswith("report.pdf")
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(f"/api/v1/teams/{team.slug}/reports", orjson.dumps({"month": "2026-08"}),
                        content_type="application/json")
    assert r.status_code == 202 and r.json()["status"] == "pending"
    listed = client.get(f"/api/v1/teams/{team.slug}/reports").json()
    assert [x["unchanged_from_revision"] for x in listed] == [1, None]


def test_new_revision_of_a_closed_month_is_emailed_to_subscribers(team, users, mailoutbox):
    Subscription.objects.create(team=team, user=users["member"])
    report = _generate(team, Month(2026, 8))
    (mail,) = mailoutbox
    assert mail.bcc == ["member@example.com"] and "August 2026" in mail.subject
    assert {a[0] for a in mail.attachments} == {report.file_name("pdf"),
                                                report.file_name("csv")}
    report.refresh_from_db()
    assert report.emailed_to == ["member@example.com"]
    _generate(team, Month(2026, 8))  # no change: no second mail
    assert len(mailoutbox) == 1


def test_provisional_month_is_not_emailed_and_its_closed_successor_is(team, users,
                                                                       mailoutbox):
    Subscription.objects.create(team=team, user=users["member"])
    report = _generate(team, Month(2026, 11), now=dt.datetime(2026, 11, 15, tzinfo=UTC))
    assert report.revision == 1 and not report.closed and mailoutbox == []
    # Same (empty) figures after the month closed: still a new, final revision, and mailed.
    final = _generate(team, Month(2026, 11), now=dt.datetime(2026, 12, 3, tzinfo=UTC))
    assert final.revision == 2 and final.closed and final.difference == []
    assert len(mailoutbox) == 1


def test_someone_who_left_the_team_gets_no_more_reports(team, users, mailoutbox):
    from greenops.teams.models import Membership

    Subscription.objects.create(team=team, user=users["member"])
    Membership.objects.filter(team=team, user=users["member"]).delete()
    _generate(team, Month(2026, 8))
    assert mailoutbox == []


def test_schedule_waits_for_the_month_to_close_in_the_teams_zone_plus_grace(team, host,
                                                                          settings):
    settings.REPORTS_GRACE_HOURS = 48
    set_zone(team, "Europe/Paris")
    # October closes at 2026-10-31 23:00 UTC in Paris (UTC+1); with 48 h grace, due from
    # 2026-11-02 23:00 UTC (a UTC team would wait until 3 Nov 00:00).
    assert generate.due_months(dt.datetime(2026, 11, 2, 22, 59, tzinfo=UTC)) == []
    due = generate.due_months(dt.datetime(2026, 11, 2, 23, 0, tzinfo=UTC))
    assert [(t.id, str(m)) for t, m in due] == [(team.id, "2026-10")]
    ids = generate.schedule(dt.datetime(2026, 11, 2, 23, 0, tzinfo=UTC))
    report = Report.objects.get(id__in=ids)
    assert report.trigger == Trigger.SCHEDULE and report.time_zone == "Europe/Paris"
    # Requested once: while it is pending, and once it is done, it is not requested again.
    assert generate.due_months(dt.datetime(2026, 11, 3, 1, tzinfo=UTC)) == []


def test_alert_summary_counts_firings_in_the_month_and_the_state_at_its_end(team):
    from greenops.alerts.models import Rule, RuleEvent, State

    set_zone(team, "Europe/Paris")
    rule = Rule.objects.create(team=team, name="Ranker too slow", kind="threshold",
                               kpi="latency_p99_ms", fire_level=200.0,
                               created_at=dt.datetime(2026, 9, 1, tzinfo=UTC))
    for at, a, b in ((dt.datetime(2026, 10, 10, tzinfo=UTC), State.OK, State.FIRING),
                     (dt.datetime(2026, 10, 11, tzinfo=UTC), State.FIRING, State.OK),
                     (H2 + dt.timedelta(minutes=30), State.OK, State.FIRING),  # 31 Oct, 23:30 CET
                     (H3 + dt.timedelta(minutes=30), State.FIRING, State.OK)):  # November
        RuleEvent.objects.create(rule=rule, at=at, from_state=a, to_state=b)
    fig = month_figures.month_figures(team, OCT, now=AFTER)
    assert fig["alerts"]["rows"] == [{"rule": "Ranker too slow", "what": "latency_p99_ms",
                                      "fired": 2, "state": "Firing"}]


def test_market_based_carbon_and_embodied_m_where_the_site_records_them(team, october):
    site = october["site"]
    site.supplier_intensity_g_per_kwh = 100.0
    site.supplier_intensity_source = "green tariff contract"
    site.supplier_intensity_year = 2026
    site.embodied_co2e_g_per_gpu_hour = 50.0
    site.embodied_source = "vendor LCA"
    site.save()
    fig = month_figures.month_figures(team, OCT, now=AFTER)
    # 0.9 facility kWh x 100 g/kWh = 90 g; location-based stays 360 g.
    assert fig["totals"]["co2e_market_kg"] == pytest.approx(0.09)
    assert fig["totals"]["co2e_kg"] == pytest.approx(0.36)
    assert fig["hosts"][0]["market_factor_source"] == "green tariff contract (2026)"
    # SCI per inference = (E x I + M) / R = (360 g + 3 GPU-hours x 50 g) / 3000 = 0.17 g.
    (sci,) = fig["sci"]["rows"]
    assert sci["m_g"] == pytest.approx(150.0) and sci["sci_g"] == pytest.approx(0.17)


def test_report_command_backfills_months_and_names_bad_arguments(team, capsys):
    from django.core.management import CommandError, call_command

    call_command("report", "--team", team.slug, "--backfill", "2")
    out = capsys.readouterr()
    last = month_figures.current_month(team).previous()
    assert out.out.splitlines() == [f"{team.slug} {last.previous()}: revision 1",
                                    f"{team.slug} {last}: revision 1"]
    assert "[##############################] 2/2" in out.err  # the progress bar
    call_command("report", "--all", "--month", str(last))
    assert capsys.readouterr().out.strip() == f"{team.slug} {last}: no change, revision 1 stands"
    with pytest.raises(CommandError, match="--month"):
        call_command("report", "--team", team.slug, "--month", "2026-13")
    with pytest.raises(CommandError, match="--team"):
        call_command("report", "--team", "nope")
    assert Report.objects.filter(trigger=Trigger.COMMAND).count() == 3


def test_a_failure_is_shown_with_its_reason(client, users, team, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("KPI rollups unavailable")

    monkeypatch.setattr(month_figures, "month_figures", broken)
    report = _generate(team, Month(2026, 8))
    assert report.status == Status.FAILED and report.revision is None
    assert report.error == "RuntimeError: KPI rollups unavailable"
    client.force_login(users["member"])
    s = client.get(f"/teams/{team.slug}/reports/{report.id}/status").json()
    assert s["status"] == "failed" and "KPI rollups unavailable" in s["error"]
    assert s["files"] == {}
    html = client.get(f"/teams/{team.slug}/reports/").content.decode()
    assert "KPI rollups unavailable" in html


def test_lost_and_stale_generations_are_sent_again(team, monkeypatch):
    from greenops.reports import tasks

    sent: list[int] = []
    monkeypatch.setattr(tasks.generate_report, "delay", sent.append)
    t0 = dt.datetime(2026, 11, 15, 12, tzinfo=UTC)
    lost = Report.objects.create(team=team, month=dt.date(2026, 9, 1), created_at=t0)
    dead = Report.objects.create(team=team, month=dt.date(2026, 8, 1), created_at=t0,
                                 status=Status.RUNNING, started_at=t0)
    fresh = Report.objects.create(team=team, month=dt.date(2026, 7, 1),
                                  created_at=t0 + dt.timedelta(minutes=25))
    # 31 minutes later: the pending one is lost (> 10 min), the running one stale (> 30 min).
    assert sorted(generate.schedule(t0 + dt.timedelta(minutes=31))) == sorted([lost.id, dead.id])
    assert sorted(sent) == sorted([lost.id, dead.id]) and fresh.id not in sent
    # The stale one can be claimed again; a recently started one cannot.
    assert generate.run(dead.id, now=t0 + dt.timedelta(minutes=31)).status == Status.DONE
    busy = Report.objects.create(team=team, month=dt.date(2026, 6, 1), status=Status.RUNNING,
                                 started_at=t0)
    assert generate.run(busy.id, now=t0 + dt.timedelta(minutes=5)) is None


def test_schedule_rechecks_a_closed_month_daily_and_late_data_becomes_revision_two(
        team, october, post_batch, settings, monkeypatch, django_capture_on_commit_callbacks):
    from greenops.reports import tasks

    settings.REPORTS_RECHECK_DAYS = 30
    clock = [dt.datetime(2026, 11, 3, tzinfo=UTC)]  # past October's close + 48 h in Paris
    monkeypatch.setattr(tasks.generate_report, "delay",
                        lambda report_id: generate.run(report_id, now=clock[0]))

    def tick() -> list[int]:  # one beat tick, its queued tasks run as a worker would
        with django_capture_on_commit_callbacks(execute=True):
            return generate.schedule(clock[0])

    (first_id,) = tick()
    assert Report.objects.get(id=first_id).revision == 1
    clock[0] += dt.timedelta(hours=12)
    assert tick() == []  # checked less than a day ago
    # An agent replays an October hour; the next daily check restates the month.
    token = october["host"].set_new_token()
    october["host"].save()
    late = dt.datetime(2026, 10, 20, 8, tzinfo=UTC)
    assert post_batch(token, hour_batch(late, 50.0)).status_code == 202
    rollup.rebuild(team, late, late + dt.timedelta(hours=1))
    clock[0] += dt.timedelta(hours=12, minutes=1)  # a day (and the minute it took) later
    (second_id,) = tick()
    second = Report.objects.get(id=second_id)
    assert second.revision == 2 and second.trigger == Trigger.SCHEDULE
    assert {d["figure"] for d in second.difference} >= {"totals.energy_kwh", "totals.cost_usd"}
    # 30 days after the first report, October is left alone.
    assert all(str(m) != "2026-10" for _, m in generate.due_months(
        dt.datetime(2026, 12, 3, 1, tzinfo=UTC)))


def test_a_half_hour_zone_says_how_its_month_boundary_is_counted(team):
    set_zone(team, "Asia/Kolkata")  # UTC+5:30: October starts 2026-09-30 18:30 UTC
    fig = month_figures.month_figures(team, OCT, now=AFTER)
    assert fig["start"] == "2026-09-30T18:30:00+00:00"
    assert "start at :30 UTC" in fig["methodology"]["boundary"]
    set_zone(team, "UTC")
    assert month_figures.month_figures(team, OCT, now=AFTER)["methodology"]["boundary"] == ""
