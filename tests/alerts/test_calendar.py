"""Calendar windows without noise: rules on "today" and "this month" cross local midnight,
a month boundary and both daylight-saving changes without a single message, and No data means
the source stopped (no samples from the rule's hosts for the grace the rule shows).

Team time zone Europe/Paris. 2026's changes: Sunday 29 March (02:00 CET -> 03:00 CEST, 01:00
UTC) and Sunday 25 October (03:00 CEST -> 02:00 CET, 01:00 UTC). Every seeded hour holds
3600 J over 1200 inferences = 3 J per inference, so every window's figure is 3 J.
"""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.alerts import evaluate
from greenops.alerts.models import Notification, Rule
from greenops.telemetry.models import Host
from tests.support.alerts import email_channel, make_rule, rollup

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def seed(team, start: dt.datetime, end: dt.datetime) -> None:
    t = start
    while t < end:
        rollup(team, t, gpu_energy_j=3600, requests=1200)
        t += dt.timedelta(hours=1)


@pytest.fixture
def paris(team):
    team.time_zone = "Europe/Paris"
    team.save()
    return team


def rules_for(team) -> list[Rule]:
    ch = email_channel(team)
    common = {"repeat_minutes": 0, "state_since": at(2026, 1, 1)}
    return [
        make_rule(team, [ch], name="today above 5 J", window="day", fire_level=5.0, **common),
        make_rule(team, [ch], name="month above 5 J", window="month", fire_level=5.0,
                  **common),
        # Firing all along: 3 J is below 5 J. Before, midnight sent NO DATA, then FIRING again.
        make_rule(team, [ch], name="today below 5 J", window="day", direction="below",
                  fire_level=5.0, **common),
    ]


@pytest.mark.parametrize(("label", "start", "end"), [
    ("spring forward", at(2026, 3, 28, 20), at(2026, 3, 29, 4)),    # midnight 23:00 UTC
    ("fall back", at(2026, 10, 24, 19), at(2026, 10, 25, 4)),       # midnight 22:00 UTC
    ("month boundary", at(2026, 10, 31, 20), at(2026, 11, 1, 3)),  # midnight 23:00 UTC
])
def test_crossing_midnight_sends_nothing(paris, label, start, end):
    seed(paris, start - dt.timedelta(days=3), end)
    rules = rules_for(paris)
    for rule in rules:
        evaluate.run(rule, start)
    assert [r.state for r in rules] == ["ok", "ok", "firing"]
    before = Notification.objects.count()  # the firing rule's one FIRING
    assert before == 1
    t = start
    seen_keep = set()
    while t <= end:
        for rule in rules:
            evaluate.run(rule, t)
            if rule.last_detail and "first whole hour has not ended" in rule.last_detail:
                seen_keep.add(rule.window)
        t += dt.timedelta(minutes=10)
    assert [r.state for r in rules] == ["ok", "ok", "firing"], label
    assert Notification.objects.count() == before, label
    assert not any(r.events.exclude(from_state="ok", to_state="firing").exists()
                   for r in rules)
    # The first hour after local midnight was met and held, not called No data.
    assert "day" in seen_keep
    if label == "month boundary":
        assert "month" in seen_keep


def test_the_first_hour_keeps_the_state_and_says_why(paris):
    [_, month, below] = rules_for(paris)
    seed(paris, at(2026, 10, 31, 0), at(2026, 11, 1, 1))
    evaluate.run(below, at(2026, 10, 31, 22, 0))
    evaluate.run(below, at(2026, 10, 31, 23, 30))  # 00:30 in Paris on 1 November
    assert below.state == "firing" and below.last_value == pytest.approx(3.0)
    assert below.last_detail == ("today so far (team time zone): the period began at "
                                 "2026-11-01 00:00 CET and its first whole hour has not ended; "
                                 "the rule keeps its state")
    # At 01:05 the window [00:00, 01:00) Paris = [23:00, 00:00) UTC holds one hour of 24.
    evaluate.run(below, at(2026, 11, 1, 0, 5))
    assert below.last_detail.startswith("Energy per inference 3 J over today so far (team time "
                                        "zone) (1 h of 24 h of the period)")


def test_the_fall_back_day_has_25_hours(paris):
    [day, *_] = rules_for(paris)
    seed(paris, at(2026, 10, 24, 0), at(2026, 10, 26, 0))
    evaluate.run(day, at(2026, 10, 25, 12, 10))
    # Local midnight was 22:00 UTC on the 24th: 14 whole hours to 12:00 UTC, of 25.
    assert "(14 h of 25 h of the period)" in day.last_detail


def make_host_seen(team, name: str, last_seen: dt.datetime) -> Host:
    host = Host(team=team, name=name, instance_type="p4d.24xlarge", region="us-east-1",
                provider="aws", last_seen=last_seen)
    host.set_new_token()
    host.save()
    return host


def test_no_data_means_the_hosts_stopped_reporting(team):
    now = at(2026, 11, 10, 10, 30)
    rule = make_rule(team, [email_channel(team)], nodata_grace_minutes=30)
    host = make_host_seen(team, "gpu-node-1", now - dt.timedelta(minutes=10))
    evaluate.run(rule, now)  # no rollup for 09:00, but the host reported 10 min ago
    assert rule.state == "ok" and not Notification.objects.exists()
    assert "gpu-node-1 reported in the last 30 min" in rule.last_detail
    Host.objects.filter(id=host.id).update(last_seen=now - dt.timedelta(minutes=45))
    evaluate.run(rule, now + dt.timedelta(minutes=1))
    assert rule.state == "nodata"
    assert rule.last_detail == ("no measurements in the window; no samples from gpu-node-1 "
                                "for over 30 min")
    assert Notification.objects.get().kind == "nodata"
