"""State continuity: saving, disabling, deleting or muting a firing rule never leaves the
receiver's incident open, and never opens a second one for the same condition.

Seeded data throughout: 3600 J over 1200 inferences in the 09:00 hour = 3 J per inference,
against a rule that fires above 2 J; NOW is 10:30, so the rule's 1 h window is [09:00, 10:00).
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from greenops import windows
from greenops.alerts import evaluate, rules
from greenops.alerts.models import Notification, Rule
from tests.support.alerts import NOW, email_channel, hour, rollup

pytestmark = pytest.mark.django_db
MIN = dt.timedelta(minutes=1)


def base(**kw) -> dict:
    return {"name": "Energy per inference", "kind": "threshold", "kpi":
            "energy_per_inference_j", "window": "1h", "direction": "above", "fire_level": 2,
            "for_minutes": 0, "channels": ["oncall"], **kw}


def sent() -> list[tuple[str, str]]:
    """(kind, closed_by) of every notification written, oldest first."""
    return [(n.kind, n.payload.get("closed_by", ""))
            for n in Notification.objects.order_by("id")]


@pytest.fixture
def firing(team) -> Rule:
    email_channel(team)
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3 J per inference
    rule = rules.save(team, base(), now=NOW)  # judged at once: no wait for the next minute
    assert (rule.state, sent()) == ("firing", [("firing", "")])
    return rule


def test_edit_that_still_breaches_sends_nothing(team, firing):
    rule = rules.save(team, base(fire_level=2.5), firing, now=NOW + MIN)  # 3 J > 2.5 J
    assert rule.state == "firing" and sent() == [("firing", "")]


def test_edit_that_no_longer_breaches_resolves_at_once(team, firing):
    # keep_firing_minutes would hold a figure that cleared by itself; an edit is deliberate.
    rule = rules.save(team, base(fire_level=4, keep_firing_minutes=30), firing, now=NOW + MIN)
    assert rule.state == "ok"
    assert sent() == [("firing", ""), ("resolved", "")]
    resolved = Notification.objects.get(kind="resolved")
    assert resolved.payload["threshold"]["fire"] == 4.0 and resolved.status == "pending"


def test_a_different_alert_resolves_the_old_instance_and_opens_a_new_one(team, firing):
    # Direction flips to "below 5 J": 3 J breaches the new condition too, but it is a
    # different alert, so the receiver closes the old incident and opens a new one.
    rule = rules.save(team, base(direction="below", fire_level=5), firing, now=NOW + MIN)
    assert rule.state == "firing"
    assert sent() == [("firing", ""), ("resolved", "changed"), ("firing", "")]
    old, new = Notification.objects.filter(kind__in=["resolved", "firing"]).order_by("id")[1:]
    assert old.payload["threshold"]["direction"] == "above"
    assert new.payload["threshold"]["direction"] == "below"


def test_a_different_alert_that_does_not_hold_only_resolves(team, firing):
    rules.save(team, base(kpi="energy_kwh", fire_level=1e9), firing,
               now=NOW + MIN)
    assert [k for k, _ in sent()] == ["firing", "resolved"]


def test_api_put_without_clear_level_keeps_the_firing_state(team, firing, client, users):
    firing.clear_level = 1.5
    firing.save()
    # The API judges at the real clock: the same 3 J in the hours around it.
    top = windows.floor_hour(timezone.now())
    for h in (-2, -1, 0):
        rollup(team, top + dt.timedelta(hours=h), gpu_energy_j=3600, requests=1200)
    client.force_login(users["member"])
    # clear_level left out: it takes its default (the fire level). No repeat: the fixture's
    # FIRING went out at NOW, weeks before the real clock, so a reminder would be due.
    doc = base(repeat_minutes=0)
    r = client.put(f"/api/v1/teams/vision/alerts/{firing.id}", doc,
                   content_type="application/json")
    assert r.status_code == 200 and r.json()["state"]["state"] == "firing"
    assert r.json()["clear_level"] is None
    assert sent() == [("firing", "")]  # no reset to OK, no second FIRING


def test_disabling_a_firing_rule_resolves_it(team, firing):
    rule = rules.save(team, base(enabled=False), firing, now=NOW + MIN)
    assert rule.state == "ok" and sent() == [("firing", ""), ("resolved", "disabled")]
    assert "disabled" in Notification.objects.get(kind="resolved").payload["detail"]


def test_deleting_a_firing_rule_resolves_it_and_the_message_outlives_the_rule(team, firing):
    evaluate.delete(firing.id, NOW + MIN)
    assert not Rule.objects.exists()
    n = Notification.objects.get(kind="resolved")
    assert n.rule_id is None and n.status == "pending"
    assert n.payload["closed_by"] == "deleted" and n.payload["rule"] == "Energy per inference"


def test_muting_a_firing_rule_resolves_it_saying_so_and_unmuting_fires_again(team, firing):
    Rule.objects.filter(id=firing.id).update(silenced_until=NOW + dt.timedelta(hours=1))
    evaluate.reassess(firing.id, NOW + MIN)
    n = Notification.objects.get(kind="resolved")
    assert n.payload["closed_by"] == "muted"
    assert n.payload["detail"].startswith("silenced until 2026-11-10 11:30 UTC: notifications "
                                          "are paused")
    evaluate.reassess(firing.id, NOW + 2 * MIN)  # still silenced: nothing more
    assert len(sent()) == 2
    Rule.objects.filter(id=firing.id).update(silenced_until=None)
    rule = evaluate.reassess(firing.id, NOW + 3 * MIN)
    assert rule.state == "firing"
    assert sent() == [("firing", ""), ("resolved", "muted"), ("firing", "")]


def test_removing_a_channel_from_a_firing_rule_resolves_it_there_only(team, firing):
    other = email_channel(team, name="second")
    firing.channels.add(other)
    rules.save(team, base(channels=["second"]), firing, now=NOW + MIN)
    [n] = Notification.objects.filter(kind="resolved")
    assert n.channel.name == "oncall" and n.payload["closed_by"] == "changed"
    assert Rule.objects.get().state == "firing"
