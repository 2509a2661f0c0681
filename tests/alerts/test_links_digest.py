"""Absolute links (SITE_URL, else the address the admin used) and one digest per local day,
daylight-saving days included."""

from __future__ import annotations

import datetime as dt

import pytest

from greenops.alerts import channels, checks, evaluate, notify
from greenops.alerts.models import Channel, Notification
from tests.support.alerts import NOW, hour, make_rule, rollup

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def fire(team, ch):
    rule = make_rule(team, [ch])
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3 J > 2 J
    evaluate.run(rule, NOW)
    return rule


def test_links_use_the_address_the_admin_used_when_site_url_is_unset(
        team, settings, client, users, mailoutbox):
    settings.SITE_URL = ""
    settings.ALLOWED_HOSTS = ["greenops.example.com"]
    client.force_login(users["owner"])
    client.post("/teams/vision/alerts/channels/new/", {
        "name": "mail", "kind": "email", "target": "owner@example.com",
        "send_resolved": "on"}, HTTP_HOST="greenops.example.com", secure=True)
    ch = Channel.objects.get()
    assert ch.site_url == "https://greenops.example.com"
    rule = fire(team, ch)
    notify.deliver(ch)
    body = mailoutbox[-1].body
    assert f"https://greenops.example.com/teams/vision/alerts/{rule.id}/" in body
    assert body.split("how figures are computed: ")[1].startswith("https://greenops.example.com/")


def test_site_url_wins(team, settings, mailoutbox):
    settings.SITE_URL = "https://ops.example.org"
    ch, _ = channels.create(team, {"name": "m", "kind": "email", "target": "owner@example.com"},
                            site_url="http://10.0.0.5:8000/")
    rule = fire(team, ch)
    notify.deliver(ch)
    assert f"https://ops.example.org/teams/vision/alerts/{rule.id}/" in mailoutbox[-1].body
    assert "10.0.0.5" not in mailoutbox[-1].body


def test_check_warns_when_no_base_is_known(team, settings):
    settings.SITE_URL = ""
    db = ["default"]
    assert checks.links(databases=db) == []  # no channel yet
    channels.create(team, {"name": "bare", "kind": "email", "target": "owner@example.com"})
    [w] = checks.links(databases=db)
    assert w.id == "alerts.W001" and "bare" in w.msg
    settings.SITE_URL = "https://ops.example.org"
    assert checks.links(databases=db) == [] and checks.links() == []


def digests_over(team, ch, start: dt.datetime, end: dt.datetime, step_min: int = 15) -> list:
    """Run beat's delivery every `step_min` minutes with an alert always waiting; the local
    times at which a digest went out."""
    sent, t = [], start
    payload = {"kind": "firing", "rule": "r", "scope": "team", "kpi_label": "x", "value": 1,
               "unit": "", "detail": "", "window": {"label": "", "start": "", "end": ""},
               "measured": True, "estimated": [], "url": "/", "explains": "/", "team": "vision"}
    while t < end:
        if not Notification.objects.filter(channel=ch, status="pending").exists():
            Notification.objects.create(channel=ch, kind="firing", payload=payload,
                                        dedupe_key=f"d{t.isoformat()}", created_at=t,
                                        next_attempt_at=t)
        ch.refresh_from_db()
        if ch.id in notify.due_channel_ids(t) and notify.deliver(ch, now=t):
            sent.append(t.astimezone(team.tz).strftime("%m-%d %H:%M %Z"))
        t += dt.timedelta(minutes=step_min)
    return sent


@pytest.mark.parametrize(("start", "end", "expected"), [
    # Autumn: 02:00-02:59 happens twice on 25 October; one digest that day, not two.
    (dt.datetime(2026, 10, 23, 12, tzinfo=UTC), dt.datetime(2026, 10, 26, 12, tzinfo=UTC),
     ["10-24 02:00 CEST", "10-25 02:00 CEST", "10-26 02:00 CET"]),
    # Spring: 02:00 does not exist on 29 March; the digest goes at 03:00 summer time, once.
    (dt.datetime(2026, 3, 27, 12, tzinfo=UTC), dt.datetime(2026, 3, 30, 12, tzinfo=UTC),
     ["03-28 02:00 CET", "03-29 03:00 CEST", "03-30 02:00 CEST"]),
])
def test_one_digest_per_local_day_across_clock_changes(team, start, end, expected):
    team.time_zone = "Europe/Paris"
    team.save()
    ch, _ = channels.create(team, {"name": "digest", "kind": "email",
                                   "target": "owner@example.com", "digest": "daily",
                                   "digest_hour": 2})
    Channel.objects.filter(id=ch.id).update(created_at=start - dt.timedelta(days=1),
                                            last_digest_at=start)
    assert digests_over(team, ch, start, end) == expected
