"""Hourly/daily KPI rollups: hand-computed rows, idempotence, late data, and the read side."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops import windows
from greenops.kpis import metrics, queries, rollup
from greenops.kpis.models import KpiRollup, Period, RollupCursor
from tests.support.kpis import H, add_gpu_hour, add_windows, build_scenario, stand_in_factors

HOUR = dt.timedelta(hours=1)


def _snapshot():
    return sorted(
        KpiRollup.objects.values_list("workload_id", "period", "bucket", "requests",
                                      "gpu_energy_j", "facility_energy_j", "co2e_g", "cost_usd",
                                      "intensity_source", "latency_buckets")
    , key=lambda r: (r[0] or 0, r[1], r[2]))


@pytest.fixture
def scenario(team):
    return build_scenario(team)


def test_hour_row_holds_the_hand_computed_figures_and_its_sources(scenario):
    w = scenario["workload"]
    add_windows(w, H, latencies=[10.0] * 3000 + [100.0] * 635)
    rollup.rebuild(w.team, H, H + HOUR, stand_in_factors())
    row = KpiRollup.objects.get(workload=w, period=Period.HOUR, bucket=H)
    assert row.requests == 3635
    assert row.gpu_energy_j == pytest.approx(2_520_000)
    assert row.facility_energy_j == pytest.approx(1.115 * 3_600_000)
    assert row.co2e_g == pytest.approx(363.5)
    assert row.cost_usd == pytest.approx(6.0)  # host-hours: $8 x 1/2 + $2 x 1 (see measure)
    # The stored carbon figure keeps the intensity and PUE it used, with their sources.
    assert row.intensity_g_per_kwh == pytest.approx(363.5 / 1.115)
    assert "400 g/kWh (test table: A)" in row.intensity_source
    assert "1.5 (site A)" in row.pue_source
    # Team total: all three GPUs, each once; CPU/RAM of both hosts in full.
    team_row = KpiRollup.objects.get(workload__isnull=True, period=Period.HOUR, bucket=H)
    assert team_row.gpu_energy_j == pytest.approx(6_120_000)
    assert team_row.cpu_ram_energy_j == pytest.approx(612_000)
    # A: (5,400,000 + 432,000) J x 1.5, B: 900,000 J x 1.1
    assert team_row.facility_energy_j == pytest.approx(5_832_000 * 1.5 + 900_000 * 1.1)


def test_rerunning_changes_nothing_and_day_rows_merge_hours(scenario):
    w = scenario["workload"]
    add_windows(w, H)
    add_gpu_hour(scenario["a0"], H + HOUR, 360_000, 10.0, 60)
    add_windows(w, H + HOUR, requests=(365,))
    rollup.rebuild(w.team, H, H + 2 * HOUR, stand_in_factors())
    first = _snapshot()
    rollup.rebuild(w.team, H, H + 2 * HOUR, stand_in_factors())
    assert [r[:9] for r in _snapshot()] == [r[:9] for r in first]
    day = KpiRollup.objects.get(workload=w, period=Period.DAY, bucket=H.replace(hour=0))
    assert day.requests == 4000
    assert day.gpu_energy_j == pytest.approx(2_520_000 + 360_000)
    # H: $6; H+1: only host A ran, W's share 1/2 of $8 = $4
    assert day.cost_usd == pytest.approx(6.0 + 4.0)


def test_run_picks_up_late_inference_windows_through_the_cursor(scenario):
    w = scenario["workload"]
    now = H + 30 * HOUR
    out = rollup.run(now=now, lookback_h=2, factors=stand_in_factors())
    assert out["hours"] == 2
    assert not KpiRollup.objects.filter(workload=w, bucket=H).exists()  # outside the lookback
    batch = add_windows(w, H)  # arrives late, for an hour 30 hours before `now`
    rollup.run(now=now + dt.timedelta(minutes=5), lookback_h=2, factors=stand_in_factors())
    row = KpiRollup.objects.get(workload=w, period=Period.HOUR, bucket=H)
    assert row.requests == 3635 and row.gpu_energy_j == pytest.approx(2_520_000)
    assert RollupCursor.objects.get(name=rollup.CURSOR).position == batch.received_at
    # Once past the cursor (and its overlap), that hour is left alone.
    KpiRollup.objects.filter(bucket=H).delete()
    RollupCursor.objects.filter(name=rollup.CURSOR).update(
        position=batch.received_at + dt.timedelta(minutes=6))
    rollup.run(now=now + dt.timedelta(minutes=10), lookback_h=2, factors=stand_in_factors())
    assert not KpiRollup.objects.filter(bucket=H).exists()


def test_celery_task_runs_the_rollup(scenario, settings):
    from greenops.kpis.tasks import rollup_kpis

    assert "kpi-rollups" in settings.CELERY_BEAT_SCHEDULE
    result = rollup_kpis.apply(kwargs={"lookback_h": 1}).get()
    assert result["hours"] == 1


def test_overview_compares_with_the_previous_period(scenario):
    w = scenario["workload"]
    add_windows(w, H)  # 3635 requests in hour H
    add_windows(w, H - 24 * HOUR, requests=(1000,))  # previous day
    rollup.rebuild(w.team, H - 24 * HOUR, H + HOUR, stand_in_factors())
    # Half an hour after H ended: figures count whole finished hours (windows.period).
    ov = queries.overview(w.team, w, "day", now=H + dt.timedelta(minutes=90))
    assert ov["current"]["requests"] == 3635
    assert ov["previous"]["requests"] == 1000
    # The GPUs ran only in hour H, so the previous day measured none of its host-hours: the
    # change is flagged, not shown as a bare +263.5 % (issue 29 item 4, coverage travels).
    assert ov["change_pct"]["requests"] is None
    assert ov["coverage_flag"].startswith("change not shown: the previous period")
    assert metrics.change_pct(3635, 1000) == pytest.approx(263.5)  # what it would have said
    assert ov["current"]["energy_per_inference_j"] == pytest.approx(2_916_000 / 3635)
    s = queries.series(w.team, w, "day", now=H + dt.timedelta(minutes=90))
    assert s["t"] == [H.isoformat()] and s["requests"] == [3635]


def test_telemetry_arriving_after_the_lookback_still_reaches_the_kpis(team, host, post_batch):
    """An agent that replays its spool after a 6-hour outage: its hours get rolled up."""
    import time as _time

    from greenops.kpis.measure import Factors, HourlyPrice, SiteFactors
    from greenops.telemetry.models import LateHour
    from tests.support.factories import make_batch

    _, token = host
    old = (_time.time() // 3600 - 6) * 3600 + 600  # 10 minutes into the hour 6 hours ago
    live = _time.time() - 60
    assert post_batch(token, make_batch(n_per_gpu=60, start=old)).status_code == 202
    assert post_batch(token, make_batch(n_per_gpu=5, start=live)).status_code == 202
    late_hour = dt.datetime.fromtimestamp(old // 3600 * 3600, dt.UTC)
    assert list(LateHour.objects.values_list("hour", flat=True)) == [late_hour]  # not the live one
    factors = Factors(site_factors=lambda h, hour: SiteFactors(1.5, "test", 400.0, "test"),
                      price=lambda h, hour: HourlyPrice(8.0, "on_demand", "test", None, False))
    result = rollup.run(lookback_h=3, factors=factors)
    assert result["late_hours"] == 1
    row = KpiRollup.objects.get(team=team, workload=None, period="hour", bucket=late_hour)
    assert row.gpu_energy_j == pytest.approx(59 * (200 + 210))
    assert not LateHour.objects.exists()
    assert rollup.run(lookback_h=3, factors=factors)["late_hours"] == 0


def test_no_hour_falls_between_late_marks_and_the_rollup_lookback(team):
    """Issue 8 item 9. A batch for hour H stored between H+2h and H+3h, after the last rollup
    run that reached H, used to reach the GPU rollups and never the KPIs: ingest marks only
    hours older than 2 h, and the next run's 3-hour lookback (H+1, H+2, H+3) no longer held H."""
    from greenops.telemetry import late
    from tests.support.factories import make_host

    host, _ = make_host(team, "A", gpus=1)
    gpu = host.gpus.get()
    factors = stand_in_factors()
    # Beat runs the rollup every 5 minutes; the run at H+2h55m still covers H, H+1 and H+2.
    rollup.run(now=H + dt.timedelta(hours=2, minutes=55), factors=factors)
    assert not KpiRollup.objects.filter(bucket=H).exists()  # nothing for H yet
    # The agent's batch for H is stored at H+2h59m, as ingest does it: GPU rollups, then the
    # late mark if ingest judges the hour out of the rollup's reach.
    stored_at = H + dt.timedelta(hours=2, minutes=59)
    add_gpu_hour(gpu, H, 3_600_000, 50.0, 60)
    if late.is_late(H, stored_at):
        late.mark(team.id, H, H + dt.timedelta(minutes=59), stored_at)
    # The next run, at H+3h00m30s.
    rollup.run(now=H + dt.timedelta(hours=3, seconds=30), factors=factors)
    row = KpiRollup.objects.get(team=team, workload=None, period=Period.HOUR, bucket=H)
    assert row.gpu_energy_j == pytest.approx(3_600_000)  # 60 min x 1 kWh/h = 3.6 MJ


def test_a_run_after_a_long_pause_reaches_back_to_where_the_last_run_stopped(team):
    """Beat down for 5 hours: a live batch stored just before the outage for the hour then
    current, and not marked late, is still rolled up by the first run after it."""
    from greenops.telemetry import late
    from tests.support.factories import make_host

    host, _ = make_host(team, "A", gpus=1)
    gpu = host.gpus.get()
    rollup.run(now=H + dt.timedelta(minutes=50), factors=stand_in_factors())
    add_gpu_hour(gpu, H, 1_800_000, 50.0, 30)
    assert not late.is_late(H, H + dt.timedelta(minutes=52))  # a live batch: no mark
    rollup.run(now=H + dt.timedelta(hours=5, minutes=50), factors=stand_in_factors())
    row = KpiRollup.objects.get(team=team, workload=None, period=Period.HOUR, bucket=H)
    assert row.gpu_energy_j == pytest.approx(1_800_000)


def test_throughput_divides_by_the_seconds_measured(scenario):
    """Issue 8 item 1: a service doing 100 requests/s for one measured minute showed 0.07/s on
    the day view (6,000 requests spread over 24 h) and another figure on a custom window. A
    window carries its start and end; throughput is requests over the seconds measured."""
    from greenops.kpis.models import InferenceBatch, InferenceWindow

    w = scenario["workload"]
    t0 = H + dt.timedelta(minutes=20)
    batch = InferenceBatch.objects.create(team=w.team, windows=1)
    InferenceWindow.objects.create(batch=batch, workload=w, start=t0,
                                   end=t0 + dt.timedelta(minutes=1), requests=6000)
    rollup.rebuild(w.team, H, H + HOUR, stand_in_factors())
    now = H + dt.timedelta(minutes=90)  # H has finished: figures count whole finished hours
    ov = queries.overview(w.team, w, "day", now=now)
    # 6,000 requests / 60 s measured = 100 /s (not 6,000 / 86,400 s = 0.07 /s)
    assert ov["current"]["throughput_per_s"] == pytest.approx(100.0)
    assert ov["current"]["measured_s"] == 60.0
    assert ov["current"]["coverage"] == "measured 1 min of 24 h"
    # The team's figure too (its inference workloads' windows), and the hour series.
    assert queries.overview(w.team, None, "day", now=now)["current"]["throughput_per_s"] == \
        pytest.approx(100.0)
    assert queries.series(w.team, w, "day", now=now)["throughput_per_s"] == [pytest.approx(100.0)]
    # A one-minute custom window reads the hour rollup around it: the same 100 /s.
    custom = queries.window_kpis(w.team, w, windows.custom(
        t0.isoformat(), (t0 + dt.timedelta(minutes=1)).isoformat()))
    assert custom["current"]["throughput_per_s"] == pytest.approx(100.0)
    assert custom["current"]["coverage"] == "measured 1 min of 1 h"  # of the hour it read


def test_kpi_page_says_how_much_of_the_period_was_measured(client, users, scenario):
    from greenops.kpis.models import InferenceBatch, InferenceWindow
    from greenops.windows import floor_hour

    w = scenario["workload"]
    hour = floor_hour(dt.datetime.now(dt.UTC)) - HOUR  # the last finished hour
    batch = InferenceBatch.objects.create(team=w.team, windows=1)
    InferenceWindow.objects.create(batch=batch, workload=w, start=hour,
                                   end=hour + dt.timedelta(minutes=1), requests=6000)
    rollup.rebuild(w.team, hour, hour + HOUR, stand_in_factors())
    client.force_login(users["member"])
    html = client.get(f"/teams/{w.team.slug}/kpis/workloads/{w.slug}/").content.decode()
    assert 'data-kpi="throughput_per_s">100.00 /s' in html
    assert 'data-coverage="throughput_per_s">measured 1 min of 24 h' in html


def test_throughput_is_unknown_when_a_window_has_no_start(scenario):
    """A sender that gives only each window's end: the seconds it counted over are unknown,
    so throughput is unknown (with the reason), never the requests over the whole period."""
    w = scenario["workload"]
    add_windows(w, H)  # windows without a start
    rollup.rebuild(w.team, H, H + HOUR, stand_in_factors())
    cur = queries.overview(w.team, w, "day", now=H + dt.timedelta(minutes=90))["current"]
    assert cur["requests"] == 3635 and cur["throughput_per_s"] is None
    assert cur["measured_s"] is None and "unknown" in cur["coverage"]


# Killed mutants of `make mutate MODULES=rollup` (issue 16, tests/mutation/SURVIVORS.md). Figures:
# the scenario of tests/kpis/test_measure.py, workload W in hour H = 363.5 g CO2e and $6.00 with
# the stand-in factors.


def test_run_measures_with_the_factors_it_is_given(scenario):
    # run_3 (factors = None), run_4 (factors and cached_factors()), run_80/83 (rollup_hour
    # without them) measured with the database's own factors instead of the stand-ins (no
    # site: the default PUE and us-east-1's grid intensity), 309.3 g instead of 363.5 g.
    w = scenario["workload"]
    add_windows(w, H)
    out = rollup.run(now=H + dt.timedelta(minutes=30), lookback_h=1, factors=stand_in_factors())
    assert out["hours"] == 1  # only H: lookback 1 h from H:30
    row = KpiRollup.objects.get(workload=w, period=Period.HOUR, bucket=H)
    assert row.co2e_g == pytest.approx(363.5)
    assert row.cost_usd == pytest.approx(6.0)
    assert "400 g/kWh (test table: A)" in row.intensity_source
    # run_86 (rollup_day(None, day)): the day row is the merge of that one hour.
    day = KpiRollup.objects.get(workload=w, period=Period.DAY, bucket=H.replace(hour=0))
    assert day.requests == 3635 and day.co2e_g == pytest.approx(363.5)


def test_run_counts_the_hours_of_every_team(scenario):
    # run_90 (done = len(hours) instead of +=): two active teams, one hour each (lookback 1 h).
    from greenops.teams.models import Team
    from tests.support.factories import make_host

    make_host(Team.objects.create(name="Second"), "A", gpus=1)
    out = rollup.run(now=H + dt.timedelta(minutes=30), lookback_h=1, factors=stand_in_factors())
    assert out["hours"] == 2


def test_a_batch_committed_just_before_the_cursor_is_still_picked_up(scenario):
    # _touched_hours_5 (since + OVERLAP instead of since - OVERLAP): a batch whose transaction
    # committed late carries a received_at up to OVERLAP (5 min) before the cursor. Here it is
    # 4 minutes before: inside the overlap, so its hour (30 h outside the lookback) is rebuilt.
    w = scenario["workload"]
    batch = add_windows(w, H)
    RollupCursor.objects.create(name=rollup.CURSOR,
                                position=batch.received_at + dt.timedelta(minutes=4))
    rollup.run(now=H + 30 * dt.timedelta(hours=1), lookback_h=1, factors=stand_in_factors())
    row = KpiRollup.objects.get(workload=w, period=Period.HOUR, bucket=H)
    assert row.requests == 3635
    # The cursor does not move back to the older batch.
    assert RollupCursor.objects.get(name=rollup.CURSOR).position == \
        batch.received_at + dt.timedelta(minutes=4)


def _job(scenario, name, stopped_at=None):
    from greenops.workloads.models import TrainingJob

    job = TrainingJob.objects.create(team=scenario["workload"].team, workload=scenario["workload"],
                                     name=name, started_at=H, stopped_at=stopped_at)
    job.gpus.add(scenario["a0"])
    return job


# A job on GPU A0 over hour H, with the stand-in factors (see tests/kpis/test_measure.py):
# 1,800,000 J GPU + half of host A's 432,000 J CPU/RAM = 2,016,000 J = 0.56 kWh; x PUE 1.5 =
# 0.84 kWh; x 400 g/kWh = 336 g; host A's $8/h x 1 h x 1/2 (one of its two GPUs) = $4.
JOB_CO2E_KG, JOB_USD = 0.336, 4.0


def test_running_jobs_are_accounted_with_the_runs_factors(scenario):
    # run_106, 109: refresh_recent without the run's factors (the database's own: 309.3 g).
    job = _job(scenario, "running")
    out = rollup.run(now=H + HOUR, lookback_h=1, factors=stand_in_factors())
    assert out["jobs"] == 1
    job.refresh_from_db()
    assert job.co2e_kg == pytest.approx(JOB_CO2E_KG) and job.cost_usd == pytest.approx(JOB_USD)


def test_jobs_overlapping_a_late_hour_are_accounted_again(scenario):
    # run_111..122: the jobs of a late hour's team that ran in that hour are accounted again,
    # with the run's factors and clock, and counted. Here hour H is late (30 h before `now`):
    # the stopped job ran in it; the running job ran in it too and is also "recent".
    from greenops.telemetry.models import LateHour

    stopped = _job(scenario, "stopped", stopped_at=H + HOUR)
    running = _job(scenario, "running")
    # Telemetry stamped after the run's `now`: a running job is measured up to `now` (run_116
    # measured up to the wall clock, adding this hour's 360,000 J).
    add_gpu_hour(scenario["a0"], H + 40 * HOUR, 360_000, 10.0, 60)
    LateHour.objects.create(team=scenario["workload"].team, hour=H)
    out = rollup.run(now=H + 30 * HOUR, lookback_h=1, factors=stand_in_factors())
    assert out["late_hours"] == 1
    assert out["jobs"] == 3  # the running job as recent, then both as overlapping hour H
    for job in (stopped, running):
        job.refresh_from_db()
        assert job.gpu_energy_j == pytest.approx(1_800_000)
        assert job.co2e_kg == pytest.approx(JOB_CO2E_KG) and job.cost_usd == pytest.approx(JOB_USD)


def test_an_hour_row_is_kept_when_any_one_figure_is_there():
    # _empty_2..7 (an `or` of the kept figures turned into `and`): each figure alone keeps the
    # hour's row; an unknown cost alone too (a host without a price that did not run).
    from greenops.kpis.metrics import Totals

    assert rollup._empty(Totals())
    for one in (dict(requests=1), dict(gpu_minutes=1), dict(gpu_energy_j=1.0),
                dict(cpu_ram_energy_j=1.0), dict(latency_buckets={"10": 1}), dict(latency_n=1),
                dict(cost_usd=None), dict(cost_usd=0.01)):
        assert not rollup._empty(Totals(**one)), one


def test_rebuild_counts_the_hours_it_did(scenario):
    # rebuild_5, 6, 17..19: [H, H + 1 h) is one hour; [H, H + 3 h) three, and no row past them.
    team = scenario["workload"].team
    assert rollup.rebuild(team, H, H + HOUR, stand_in_factors()) == 1
    assert rollup.rebuild(team, H, H + 3 * HOUR, stand_in_factors()) == 3


def test_the_team_rows_inference_figures_are_its_serving_gpus(scenario):
    # rollup_hour_62, 68 (no serving GPUs measured), 71, 75 (without the factors), 77 (cost
    # None): the team row's per-inference figures are workload W's GPUs (A0 and host B's B0)
    # measured once: 2,520,000 J GPU + 396,000 J CPU/RAM share = 2,916,000 J, 363.5 g, $6.
    w = scenario["workload"]
    add_windows(w, H)
    rollup.rebuild(w.team, H, H + HOUR, stand_in_factors())
    team_row = KpiRollup.objects.get(workload__isnull=True, period=Period.HOUR, bucket=H)
    assert team_row.inference_energy_j == pytest.approx(2_916_000)
    assert team_row.inference_co2e_g == pytest.approx(363.5)
    assert team_row.inference_cost_usd == pytest.approx(6.0)


def test_a_day_row_merges_only_its_own_teams_hours_of_that_day(scenario):
    # rollup_day_6 (any team's hours), _8, _9 (hours of the day before / after), _15..28 (stale
    # day rows: left behind, or other days' / other teams' deleted, or replaced instead of
    # updated). Requests: W has 3635 in hour H, 1000 at 23:00 the day before, 2000 at 00:00 the
    # day after; another team 7 in hour H.
    from greenops.teams.models import Team
    from greenops.workloads.models import Workload

    w, day = scenario["workload"], H.replace(hour=0)
    add_windows(w, H)
    add_windows(w, day - HOUR, requests=(1000,))
    add_windows(w, day + 24 * HOUR, requests=(2000,))
    other = Team.objects.create(name="Other")
    add_windows(Workload.objects.create(team=other, name="Else", kind="inference"), H,
                requests=(7,))
    rollup.rebuild(other, H, H + HOUR, stand_in_factors())
    for start in (day - HOUR, H, day + 24 * HOUR):
        rollup.rebuild(w.team, start, start + HOUR, stand_in_factors())
    rows = KpiRollup.objects.filter(team=w.team, period=Period.DAY, bucket=day)
    assert rows.get(workload=w).requests == 3635
    assert rows.get(workload__isnull=True).requests == 3635
    # Rebuilding the day updates its rows in place (_22 deleted and re-inserted W's).
    ids = sorted(rows.values_list("id", flat=True))
    rollup.rollup_day(w.team, day)
    assert sorted(rows.values_list("id", flat=True)) == ids
    # The day's hour rows are gone (say, the hosts and workloads were emptied): its day rows go
    # with them; the days around it and the other team's day stay.
    KpiRollup.objects.filter(team=w.team, period=Period.HOUR, bucket__gte=day,
                             bucket__lt=day + 24 * HOUR).delete()
    rollup.rollup_day(w.team, day)
    assert not rows.exists()
    assert KpiRollup.objects.get(workload=w, period=Period.DAY, bucket=day - 24 * HOUR) \
        .requests == 1000
    assert KpiRollup.objects.get(workload=w, period=Period.DAY, bucket=day + 24 * HOUR) \
        .requests == 2000
    assert KpiRollup.objects.filter(team=other, period=Period.DAY, bucket=day).count() == 2


def test_a_run_takes_the_5000_oldest_late_hours_and_leaves_the_rest_for_the_next(
        team, monkeypatch):
    # run_28 (`[:5000]` -> `[:5001]`): one run rebuilds at most 5,000 late (team, hour) marks,
    # oldest first; the rest wait, still marked, for the next run. Rebuilding 5,001 real hours
    # would take minutes, so the hour and day rebuilds and the late hours' job accounting are
    # recorded instead of done: what is asserted is which marks this run took and left.
    from greenops.telemetry.models import LateHour

    rebuilt, jobs_for = [], []
    monkeypatch.setattr(rollup, "rollup_hour", lambda t, hour, factors: rebuilt.append(hour))
    monkeypatch.setattr(rollup, "rollup_day", lambda t, day: None)
    monkeypatch.setattr(rollup.job_accounting, "refresh_overlapping",
                        lambda team_id, start, end, now, factors: jobs_for.append(start) or 0)
    first = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    marks = [first + i * HOUR for i in range(5001)]  # 5,001 hours: 2025-01-01 00:00 onwards
    LateHour.objects.bulk_create([LateHour(team=team, hour=h) for h in marks])
    now = dt.datetime(2026, 1, 1, 12, 30, tzinfo=dt.UTC)  # long after every mark

    out = rollup.run(now=now, lookback_h=1, factors=stand_in_factors())
    assert out["late_hours"] == 5000
    assert jobs_for == marks[:5000]
    # lookback 1 h: the current hour (12:00) plus the 5,000 oldest marks, not the newest.
    assert sorted(rebuilt) == marks[:5000] + [dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)]
    assert list(LateHour.objects.values_list("hour", flat=True)) == [marks[5000]]

    rebuilt.clear()
    jobs_for.clear()
    out = rollup.run(now=now, lookback_h=1, factors=stand_in_factors())
    assert out["late_hours"] == 1 and jobs_for == [marks[5000]]
    assert marks[5000] in rebuilt and not LateHour.objects.exists()
