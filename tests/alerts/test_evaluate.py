"""Rule evaluation, computed by hand: each kind against seeded KPI rollups, and the states.

Rollup rows are written as greenops.kpis.rollup writes them (sums per hour); the KPI engine
(greenops.kpis.queries via greenops.alerts.kpi_values) derives the figure, and each test works the
figure out by hand in a comment.
"""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.alerts import evaluate, notify
from greenops.alerts.evaluate import BREACH, CLEAR, HOLD, next_state
from greenops.alerts.models import Notification, State
from greenops.units import amount
from tests.support.alerts import NOW, email_channel, hour, make_rule, rollup

pytestmark = pytest.mark.django_db
MIN = dt.timedelta(minutes=1)


# --- the state machine alone ------------------------------------------------------------------

def test_pending_then_firing_after_for_duration():
    t0 = NOW
    assert next_state(State.OK, t0, BREACH, t0, 300, 0) == (State.PENDING, t0)
    assert next_state(State.PENDING, t0, BREACH, t0 + 4 * MIN, 300, 0) == (State.PENDING, t0)
    assert next_state(State.PENDING, t0, BREACH, t0 + 5 * MIN, 300, 0) == \
        (State.FIRING, t0 + 5 * MIN)
    # A pending alert whose value goes back is OK again: pending never notified anyone.
    assert next_state(State.PENDING, t0, HOLD, t0 + MIN, 300, 0) == (State.OK, t0 + MIN)


def test_keep_firing_for_then_ok():
    t0 = NOW
    assert next_state(State.FIRING, t0, CLEAR, t0, 0, 600) == (State.RECOVERING, t0)
    assert next_state(State.RECOVERING, t0, CLEAR, t0 + 9 * MIN, 0, 600) == \
        (State.RECOVERING, t0)
    # Breaching again while recovering is still the same episode: firing, no new message.
    assert next_state(State.RECOVERING, t0, BREACH, t0 + 2 * MIN, 0, 600)[0] == State.FIRING
    assert evaluate.notification_for(State.RECOVERING, State.FIRING, True) is None
    assert next_state(State.RECOVERING, t0, CLEAR, t0 + 10 * MIN, 0, 600)[0] == State.OK


def test_hysteresis_compare():
    # above 2.0, clears under 1.5: 1.8 holds whatever the state is
    assert evaluate.compare(2.1, "above", 2.0, 1.5) == BREACH
    assert evaluate.compare(1.8, "above", 2.0, 1.5) == HOLD
    assert evaluate.compare(1.4, "above", 2.0, 1.5) == CLEAR
    assert evaluate.compare(2.0, "above", 2.0, 2.0) == HOLD  # at the line: neither
    assert evaluate.compare(10, "below", 20, 30) == BREACH
    assert evaluate.compare(25, "below", 20, 30) == HOLD
    assert evaluate.compare(31, "below", 20, 30) == CLEAR


# --- threshold ----------------------------------------------------------------------------------

def test_threshold_with_hysteresis_fires_holds_and_resolves_once(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch], fire_level=2.0, clear_level=1.5)
    # 09:00-10:00: GPU 3000 J + CPU/RAM 600 J = 3600 J over 1200 inferences = 3.0 J each > 2.0
    rollup(team, hour(9), gpu_energy_j=3000, cpu_ram_energy_j=600, requests=1200)
    ev = evaluate.run(rule, NOW)
    assert (ev.from_state, ev.to_state) == (State.OK, State.FIRING)
    assert rule.last_value == pytest.approx(3.0)
    n = Notification.objects.get()
    assert n.kind == "firing" and n.payload["value"] == pytest.approx(3.0)
    assert n.payload["unit"] == "J" and n.payload["threshold"]["fire"] == 2.0
    assert n.payload["window"]["start"] == hour(9).isoformat()
    # Late samples raise the count: 3600 J / 2000 = 1.8 J, between clear (1.5) and fire (2.0):
    # the rule holds, and no second "firing" is written.
    rollup(team, hour(9), gpu_energy_j=3000, cpu_ram_energy_j=600, requests=2000)
    assert evaluate.run(rule, NOW + MIN) is None
    assert rule.state == State.FIRING and rule.last_value == pytest.approx(1.8)
    # Corrected again: 3600 J / 3000 = 1.2 J < 1.5: resolved, once.
    rollup(team, hour(9), gpu_energy_j=3000, cpu_ram_energy_j=600, requests=3000)
    ev = evaluate.run(rule, NOW + 2 * MIN)
    assert ev.to_state == State.OK and rule.last_value == pytest.approx(1.2)
    evaluate.run(rule, NOW + 3 * MIN)
    assert list(Notification.objects.order_by("id").values_list("kind", flat=True)) == \
        ["firing", "resolved"]


def test_threshold_without_clear_level_clears_under_the_fire_level(team):
    rule = make_rule(team, fire_level=50.0, kpi="gpu_util_pct", direction="below")
    # util_sum / util_n = 2400 / 60 = 40 % < 50 %
    rollup(team, hour(9), util_sum=2400, util_n=60)
    evaluate.run(rule, NOW)
    assert rule.state == State.FIRING and rule.last_value == pytest.approx(40.0)
    rollup(team, hour(9), util_sum=3600, util_n=60)  # 60 %
    evaluate.run(rule, NOW + MIN)
    assert rule.state == State.OK


def test_pending_for_minutes_then_firing(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch], for_minutes=5)
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3.0 J
    evaluate.run(rule, NOW)
    assert rule.state == State.PENDING and not Notification.objects.exists()
    evaluate.run(rule, NOW + 4 * MIN)
    assert rule.state == State.PENDING
    evaluate.run(rule, NOW + 5 * MIN)
    assert rule.state == State.FIRING and Notification.objects.get().kind == "firing"


def test_minimum_volume_makes_a_quiet_hour_no_data(team):
    rule = make_rule(team, min_requests=500, no_data="keep")
    rollup(team, hour(9), gpu_energy_j=3600, requests=100)  # 36 J each, but only 100 requests
    evaluate.run(rule, NOW)
    assert rule.state == State.OK and "under the rule's minimum of 500" in rule.last_detail


def test_no_data_goes_to_nodata_and_says_why(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch])
    evaluate.run(rule, NOW)  # no rollups at all
    assert rule.state == State.NODATA and rule.last_value is None
    assert rule.last_detail == "no measurements in the window; no host in the rule's scope"
    assert Notification.objects.get().kind == "nodata"
    # Data back and fine: 600 J / 1200 = 0.5 J: OK, and the no-data episode is resolved.
    rollup(team, hour(10), gpu_energy_j=600, requests=1200)
    evaluate.run(rule, NOW + dt.timedelta(hours=1))
    assert rule.state == State.OK
    assert list(Notification.objects.order_by("id").values_list("kind", flat=True)) == \
        ["nodata", "resolved"]


def test_no_data_policy_ok(team):
    rule = make_rule(team, no_data="ok")
    evaluate.run(rule, NOW)
    assert rule.state == State.OK


def test_unknown_cost_is_no_data_with_the_reason_not_zero(team):
    rule = make_rule(team, kpi="cost_usd", fire_level=1.0)
    rollup(team, hour(9), gpu_energy_j=3600, cost_usd=None, cost_source="no price for node-7")
    evaluate.run(rule, NOW)
    assert rule.state == State.NODATA and rule.last_detail == "no price for node-7"


def test_simulated_data_is_ignored_unless_the_rule_says_so(team):
    rule = make_rule(team)
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200, simulated=True)  # 3 J: would fire
    evaluate.run(rule, NOW)
    assert rule.state == State.NODATA and "simulated" in rule.last_detail
    rule.include_simulated = True
    evaluate.run(rule, NOW + MIN)
    assert rule.state == State.FIRING


def test_estimated_figures_are_named_in_the_notification(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch])
    rollup(team, hour(9), gpu_energy_j=3000, cpu_ram_energy_j=600, requests=1200,
           cpu_ram_method="CPU tdp, RAM model")
    evaluate.run(rule, NOW)
    p = Notification.objects.get().payload
    assert p["measured"] is False
    assert p["estimated"] == ["CPU/RAM energy estimated by codecarbon (CPU tdp, RAM model)"]


# --- change against a baseline ---------------------------------------------------------------

def test_change_against_last_week_with_volume_floor(team):
    rule = make_rule(team, kind="change", fire_level=20.0, clear_level=10.0, baseline_days=7,
                     min_requests=1000)
    # Last week, same hour: 2000 J / 1000 = 2.0 J. Now: 2500 J / 1000 = 2.5 J: +25 % >= 20 %.
    rollup(team, hour(9, day=3), gpu_energy_j=2000, requests=1000)
    rollup(team, hour(9), gpu_energy_j=2500, requests=1000)
    evaluate.run(rule, NOW)
    assert rule.state == State.FIRING and rule.last_value == pytest.approx(25.0)
    # Traffic doubled with energy per inference flat: 5000 J / 2000 = 2.5 J, still +25 %.
    rollup(team, hour(9), gpu_energy_j=5000, requests=2000)
    evaluate.run(rule, NOW + MIN)
    assert rule.last_value == pytest.approx(25.0)
    # +15 % (2.3 J) holds between clear (10 %) and fire (20 %); +5 % clears.
    rollup(team, hour(9), gpu_energy_j=2300, requests=1000)
    evaluate.run(rule, NOW + 2 * MIN)
    assert rule.state == State.FIRING and rule.last_value == pytest.approx(15.0)
    rollup(team, hour(9), gpu_energy_j=2100, requests=1000)
    evaluate.run(rule, NOW + 3 * MIN)
    assert rule.state == State.OK and rule.last_value == pytest.approx(5.0)
    # A quiet hour (900 requests < 1000) cannot fire even at +100 %.
    rollup(team, hour(9), gpu_energy_j=3600, requests=900)  # 4 J = +100 %
    evaluate.run(rule, NOW + 4 * MIN)
    assert rule.state == State.NODATA and "900 inferences" in rule.last_detail


# --- budget -----------------------------------------------------------------------------------

def test_budget_forecast_stays_quiet_until_enough_history(team):
    rule = make_rule(team, kind="budget", kpi="cost_usd", window="month", fire_level=300.0,
                     forecast_min_days=7)
    # 1-5 Nov: $15 a day (one priced hour a day). Month so far $75 of $300: 25 %.
    for day in range(1, 6):
        rollup(team, hour(12, day=day), cost_usd=15.0)
    now = dt.datetime(2026, 11, 6, 8, 30, tzinfo=dt.UTC)
    evaluate.run(rule, now)
    assert rule.state == State.OK
    assert "no forecast yet: 5 complete days, it needs 7" in rule.last_detail
    assert rule.last_value == pytest.approx(75.0)


def test_budget_forecast_fires_with_its_interval(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch], kind="budget", kpi="cost_usd", window="month",
                     fire_level=300.0, forecast_min_days=7)
    # 1-8 Nov: $10, $12, $10, $12, $10, $12, $10, $12 (one priced hour a day).
    daily = [10.0, 12.0] * 4
    for day, usd in enumerate(daily, start=1):
        rollup(team, hour(12, day=day), cost_usd=usd)
    now = dt.datetime(2026, 11, 9, 6, 0, tzinfo=dt.UTC)
    evaluate.run(rule, now)
    # Actual: 88 of 300. Forecast: 88 + mean 11 x 22 remaining days = 88 + 242 = 330 >= 300.
    # sd of the 8 days = sqrt(8 x 1 / 7) = 1.0690; 80 % prediction interval (greenops/forecast.py:
    # the mean's own uncertainty included): 330 +- t(0.9, 7 df) 1.4149 x 1.0690 x
    # sqrt(22 + 22^2 / 8) = 330 +- 13.739 -> 316.261 to 343.739.
    assert rule.state == State.FIRING and rule.last_value == pytest.approx(88.0)
    fc = Notification.objects.get().payload["forecast"]
    assert fc["value"] == pytest.approx(330.0)
    assert fc["low"] == pytest.approx(316.261, abs=1e-3)
    assert fc["high"] == pytest.approx(343.739, abs=1e-3)
    assert fc["days"] == 8 and fc["interval"] == "80 %"


def test_budget_actual_fires_without_forecast(team):
    rule = make_rule(team, kind="budget", kpi="co2e_kg", window="month", fire_level=5.0,
                     budget_forecast=False)
    # co2e_g 3000 + 2500 = 5500 g = 5.5 kg >= 5 kg
    rollup(team, hour(12, day=1), co2e_g=3000)
    rollup(team, hour(12, day=2), co2e_g=2500)
    evaluate.run(rule, dt.datetime(2026, 11, 3, 0, 30, tzinfo=dt.UTC))
    assert rule.state == State.FIRING and rule.last_value == pytest.approx(5.5)


def test_budget_line_prints_dollars_not_exponents(team):
    """A $60,000 monthly spend budget used to read "6e+04 USD" (the line formatted every figure
    with four significant digits)."""
    rule = make_rule(
        team, kind="budget", kpi="cost_usd", window="month", fire_level=60000, budget_forecast=False
    )
    # cost 45,000.25 + 1,234.5 = 46,234.75 $ -> "$46,235"; 46,234.75 / 60,000 = 77 %
    rollup(team, hour(12, day=1), cost_usd=45000.25)
    rollup(team, hour(12, day=2), cost_usd=1234.5)
    evaluate.run(rule, dt.datetime(2026, 11, 3, 0, 30, tzinfo=dt.UTC))
    assert "this month $46,235 of a $60,000 budget (77 %)" in rule.last_detail
    assert "e+0" not in rule.last_detail


def test_amounts_read_as_written():
    # money: whole dollars from $1,000, cents below, four significant digits under a dollar
    assert amount(60000, "USD") == "$60,000"
    assert amount(12.5, "USD") == "$12.50"
    assert amount(0.0123, "USD") == "$0.0123"
    assert amount(-2500.4, "USD") == "-$2,500"
    assert amount(60000, "kg CO2e") == "60,000 kg CO2e"
    assert amount(3.5, "GPU-hours") == "3.5 GPU-hours"
    assert amount(None, "USD") == "unknown"


def test_forecast_arithmetic():
    fc = evaluate.forecast_month([10.0, 20.0], 30)
    # 30 + 15 x 28 = 450; a prediction interval that counts the mean's own uncertainty (issue
    # 29 item 7, greenops/forecast.py): t(0.9, 1 df) = 3.0777, sd = 7.0711, m = 28 days left,
    # n = 2: 3.0777 x 7.0711 x sqrt(28 + 28^2 / 2) = 446.00 -> high 896.00; low max(30, 4.00).
    assert fc.value == pytest.approx(450.0)
    assert fc.high == pytest.approx(896.00, abs=0.01)
    assert fc.low == pytest.approx(30.0)


# --- host stopped reporting --------------------------------------------------------------------

def test_stopped_host(team, host):
    h, _ = host
    h.last_seen = NOW - dt.timedelta(minutes=20)
    h.save()
    rule = make_rule(team, kind="stopped", kpi="", stopped_minutes=10, host=h)
    evaluate.run(rule, NOW)
    assert rule.state == State.FIRING and rule.last_value == 1.0
    assert "gpu-node-1 (20 min)" in rule.last_detail
    h.last_seen = NOW
    h.save()
    rule.refresh_from_db()
    evaluate.run(rule, NOW + MIN)
    assert rule.state == State.OK


def test_error_in_one_rule_is_shown_and_recorded(team, monkeypatch):
    rule = make_rule(team)

    def broken(*a, **k):
        raise RuntimeError("rollup table locked")

    monkeypatch.setitem(evaluate.KINDS, "threshold", broken)
    ev = evaluate.run(rule, NOW)
    assert ev.to_state == State.ERROR and rule.last_error == "RuntimeError: rollup table locked"


# --- silences and mute windows ---------------------------------------------------------------

def test_silenced_rule_records_but_does_not_send_until_the_silence_ends(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch], silenced_until=NOW + dt.timedelta(minutes=30))
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3 J
    ev = evaluate.run(rule, NOW)
    assert ev.to_state == State.FIRING and ev.muted.startswith("silenced until")
    assert not Notification.objects.exists()
    rollup(team, hour(10), gpu_energy_j=3600, requests=1200)  # 11:01 reads 10:00-11:00
    evaluate.run(rule, NOW + dt.timedelta(minutes=31))
    assert Notification.objects.get().kind == "firing"


def test_mute_window_weekend_and_night(team):
    rule = make_rule(team, mute_weekdays="5,6", mute_start_hour=22, mute_end_hour=6)
    saturday = dt.datetime(2026, 11, 14, 12, tzinfo=dt.UTC)
    assert rule.muted_reason(saturday, dt.UTC) == "muted on Saturdays"
    assert rule.muted_reason(NOW.replace(hour=23), dt.UTC).startswith("muted daily 22:00")
    assert rule.muted_reason(NOW.replace(hour=5), dt.UTC).startswith("muted daily")
    assert rule.muted_reason(NOW, dt.UTC) == ""


def test_repeat_interval_while_firing(team):
    ch = email_channel(team)
    rule = make_rule(team, [ch], repeat_minutes=60)
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)
    rollup(team, hour(10), gpu_energy_j=3600, requests=1200)
    evaluate.run(rule, NOW)
    evaluate.run(rule, NOW + 59 * MIN)
    assert Notification.objects.count() == 1
    evaluate.run(rule, NOW + 60 * MIN)
    assert list(Notification.objects.order_by("id").values_list("kind", flat=True)) == \
        ["firing", "repeat"]


def test_claim_lets_one_caller_evaluate_a_minute(team):
    rule = make_rule(team)
    tick = NOW.replace(second=0)
    assert evaluate.claim(rule.id, tick) is True
    assert evaluate.claim(rule.id, tick) is False
    assert evaluate.claim(rule.id, tick + MIN) is True


def test_email_through_locmem_backend(team, mailoutbox):
    ch = email_channel(team)
    rule = make_rule(team, [ch], name="Energy per inference too high")
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)
    evaluate.run(rule, NOW)
    sent = notify.deliver(ch)
    assert [n.status for n in sent] == ["sent"]
    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    assert mail.to == ["oncall@example.com"]
    assert mail.subject == "[FIRING] Energy per inference too high · Vision"
    assert "Energy per inference: 3 J" in mail.body
    assert "fires above 2 J" in mail.body and "Figures: measured." in mail.body
    assert f"/teams/vision/alerts/{rule.id}/" in mail.body


def test_budget_month_is_the_team_calendar_month(team):
    team.time_zone = "Europe/Paris"
    team.save()
    rule = make_rule(team, kind="budget", kpi="cost_usd", window="month", fire_level=100.0,
                     budget_forecast=False)
    # 31 Oct 22:00 UTC is 23:00 in Paris: October. 31 Oct 23:00 UTC is 1 Nov 00:00: November.
    rollup(team, dt.datetime(2026, 10, 31, 22, tzinfo=dt.UTC), cost_usd=1000.0)
    rollup(team, dt.datetime(2026, 10, 31, 23, tzinfo=dt.UTC), cost_usd=50.0)
    evaluate.run(rule, dt.datetime(2026, 11, 2, 12, tzinfo=dt.UTC))
    assert rule.state == State.OK and rule.last_value == pytest.approx(50.0)
    assert Notification.objects.count() == 0


def test_idle_gpu_hours_and_idle_cost_of_a_host(team, host):
    from greenops.costs.catalog import host_price
    from tests.support.kpis import add_gpu_hour

    h, _ = host  # p4d.24xlarge in us-east-1, on demand, with 2 GPUs registered
    g0, g1 = h.gpus.order_by("index")
    # Hour and minute rollups: 60 minutes each at the given utilisation.
    for gpu, bucket, util in [(g0, hour(8), 3.0), (g0, hour(9), 2.0), (g1, hour(9), 80.0)]:
        add_gpu_hour(gpu, bucket, 1000.0, util, 60)
    idle = make_rule(team, kpi="idle_gpu_hours", window="6h", fire_level=1.0, host=h)
    evaluate.run(idle, NOW)
    # [04:00, 10:00): GPU 0 under 5 % for 120 minutes, GPU 1 busy: 2 idle GPU-hours > 1.
    assert idle.state == State.FIRING and idle.last_value == 2.0
    cost = make_rule(team, kpi="idle_cost_usd", window="6h", fire_level=1.0, host=h)
    evaluate.run(cost, NOW)
    # Each idle GPU-hour costs the host's hourly price / its 2 GPUs: 2 x price / 2 = price.
    price = host_price(h, NOW).usd_per_hour
    assert cost.last_value == pytest.approx(2 * price / 2)
    assert cost.state == (State.FIRING if price > 1.0 else State.OK)
