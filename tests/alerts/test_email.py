"""E-mail goes only to team members' addresses or addresses confirmed through a link, and a
team sends at most ALERTS_EMAIL_HOURLY_CAP alert e-mails an hour."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from greenops.alerts import channels, evaluate, notify
from greenops.alerts.models import Channel, EmailAddress, Notification
from tests.support.alerts import NOW, hour, make_rule, rollup

pytestmark = pytest.mark.django_db


def fire(team, ch, name="rule"):
    rule = make_rule(team, [ch], name=name)
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3 J > 2 J
    evaluate.run(rule, NOW)
    return rule


def test_outside_addresses_get_mail_only_after_confirming(team, client, users, mailoutbox,
                                                          django_capture_on_commit_callbacks):
    client.force_login(users["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/teams/vision/alerts/channels/new/", {
            "name": "mail", "kind": "email",
            "target": "member@example.com, pager@outside.example"})
    # One confirmation mail, to the outside address only (the member needs none).
    [confirm] = mailoutbox
    assert confirm.to == ["pager@outside.example"]
    link = re.search(r"http://testserver(/alerts/confirm/\S+/)", confirm.body).group(1)
    ch = Channel.objects.get()
    fire(team, ch)
    [n] = notify.deliver(ch)
    assert n.status == "sent" and mailoutbox[-1].to == ["member@example.com"]

    client.logout()  # the recipient may have no account
    assert "Nothing is sent to this address until you confirm" in client.get(link).content \
        .decode()  # opening the link (a mail scanner) confirms nothing
    assert EmailAddress.objects.get().confirmed_at is None
    assert "Confirmed: pager@outside.example" in client.post(link).content.decode()
    fire(team, ch, name="second")
    notify.deliver(ch)
    assert mailoutbox[-1].to == ["member@example.com", "pager@outside.example"]


def test_a_channel_with_only_unconfirmed_addresses_sends_nothing(team, mailoutbox):
    ch, _ = channels.create(team, {"name": "m", "kind": "email",
                                   "target": "stranger@outside.example"})
    fire(team, ch)
    [n] = notify.deliver(ch)
    assert n.status == "pending" and mailoutbox == []
    assert n.error.startswith("no recipient may receive it yet")


def test_hourly_cap_per_team_holds_the_rest(team, settings, mailoutbox):
    settings.ALERTS_EMAIL_HOURLY_CAP = 2
    chans = [channels.create(team, {"name": f"m{i}", "kind": "email",
                                    "target": "member@example.com"})[0] for i in range(3)]
    for i, ch in enumerate(chans):
        fire(team, ch, name=f"r{i}")
    now = timezone.now()
    assert [len(notify.deliver(ch, now=now)) for ch in chans[:2]] == [1, 1]
    assert len(mailoutbox) == 2
    # The third channel's message waits: 2 e-mails already went out in the last hour.
    [held] = notify.deliver(chans[2], now=now)
    assert held.status == "pending" and held.error_class == "HourlyCap"
    assert held.error.startswith("the team's cap of 2 alert e-mails an hour is reached")
    assert len(mailoutbox) == 2
    first_sent = Notification.objects.filter(status="sent").order_by("sent_at")[0].sent_at
    assert held.next_attempt_at == first_sent + dt.timedelta(hours=1)
    assert notify.due_channel_ids(now) == []  # not retried every 15 s meanwhile
    # An hour later the cap has room again.
    [n] = notify.deliver(chans[2], now=held.next_attempt_at + dt.timedelta(seconds=1))
    assert n.status == "sent" and len(mailoutbox) == 3


def test_too_many_addresses_is_a_field_error(team):
    from greenops.errors import FieldError

    with pytest.raises(FieldError) as exc:
        channels.create(team, {"name": "m", "kind": "email", "target": ", ".join(
            f"a{i}@example.com" for i in range(11))})
    assert exc.value.field == "target"
