"""Channels for real: a signed webhook to an HTTP server on loopback (ok, failing, gone), an
apprise json:// URL to loopback, grouping, retries, credentials encrypted and masked."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json

import pytest
from django.utils import timezone

from greenops.alerts import channels, crypto, evaluate, notify
from greenops.alerts.models import Channel, Notification
from greenops.errors import FieldError
from tests.support.alerts import NOW, Receiver, hour, make_rule, rollup

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_receivers_allowed(settings):
    """These tests talk to real receivers on 127.0.0.1, which the outbound guard refuses unless
    an operator allows it (tests/alerts/test_outbound.py proves the refusal)."""
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]


def webhook(team, url: str, name: str = "hook") -> tuple[Channel, str]:
    return channels.create(team, {"name": name, "kind": "webhook", "target": url + "/alerts",
                                  "send_resolved": True})


def firing(team, ch, name="Energy per inference too high", workload=None):
    rule = make_rule(team, [ch], name=name, workload=workload)
    rollup(team, hour(9), workload=workload, gpu_energy_j=3600, requests=1200)  # 3 J > 2 J
    evaluate.run(rule, NOW)
    return rule


def test_webhook_body_is_signed_with_hmac_over_timestamp_and_body(team):
    with Receiver() as rx:
        ch, secret = webhook(team, rx.url)
        rule = firing(team, ch)
        [n] = notify.deliver(ch)
    assert n.status == "sent" and n.sent_at is not None
    path, headers, body, _ = rx.requests[0]
    assert path == "/alerts"
    ts = headers["X-GreenOps-Timestamp"]
    expected = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers["X-GreenOps-Signature"] == "sha256=" + expected
    # A receiver with the wrong secret would reject it.
    wrong = hmac.new(b"other", ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers["X-GreenOps-Signature"] != "sha256=" + wrong
    doc = json.loads(body)
    [alert] = doc["alerts"]
    assert doc["team"] == "vision"
    assert alert["kind"] == "firing" and alert["rule_id"] == rule.id
    assert alert["kpi"] == "energy_per_inference_j" and alert["value"] == pytest.approx(3.0)
    assert alert["unit"] == "J" and alert["threshold"]["fire"] == 2.0
    assert alert["scope"] == "team Vision" and alert["measured"] is True
    assert alert["window"] == {"start": "2026-11-10T09:00:00+00:00",
                               "end": "2026-11-10T10:00:00+00:00", "label": "last whole hour"}
    ch.refresh_from_db()
    assert ch.last_delivery_at is not None


def test_failing_webhook_is_retried_with_backoff_then_failed(team, settings):
    settings.ALERTS_MAX_ATTEMPTS = 2
    with Receiver(status=500) as rx:
        ch, _ = webhook(team, rx.url)
        firing(team, ch)
        [n] = notify.deliver(ch)
        assert (n.status, n.attempts, n.error) == ("pending", 1, "HTTP 500 from the webhook")
        assert n.next_attempt_at > timezone.now()  # backs off: not due again yet
        assert notify.deliver(ch) == []
        [n] = notify.deliver(ch, now=timezone.now() + dt.timedelta(minutes=1))
        assert (n.status, n.attempts) == ("failed", 2)
    assert len(rx.requests) == 2
    ch.refresh_from_db()
    assert ch.enabled and ch.last_error == "HTTP 500 from the webhook"


def test_gone_webhook_disables_the_channel(team, client, users):
    with Receiver(status=410) as rx:
        ch, _ = webhook(team, rx.url)
        firing(team, ch)
        [n] = notify.deliver(ch)
    assert n.status == "failed" and n.error == "HTTP 410 from the webhook"
    ch.refresh_from_db()
    assert not ch.enabled and ch.disabled_reason == "HTTP 410 from the webhook"
    assert notify.due_channel_ids() == []  # nothing more is tried on a disabled channel
    client.force_login(users["member"])
    html = client.get("/teams/vision/alerts/channels/").content.decode()
    assert "Disabled: HTTP 410 from the webhook" in html


def test_apprise_json_url_delivers_to_loopback(team):
    with Receiver() as rx:
        port = rx.server.server_address[1]
        ch, secret = channels.create(team, {"name": "json", "kind": "apprise",
                                            "target": f"json://127.0.0.1:{port}/hook"})
        assert secret == ""
        firing(team, ch)
        [n] = notify.deliver(ch)
    assert n.status == "sent"
    path, _headers, body, _ = rx.requests[0]
    doc = json.loads(body)
    assert path == "/hook"
    assert doc["title"] == "[FIRING] Energy per inference too high · Vision"
    assert "Energy per inference: 3 J" in doc["message"]


def test_apprise_failure_is_retried_and_shown(team):
    with Receiver(status=503) as rx:
        port = rx.server.server_address[1]
        ch, _ = channels.create(team, {"name": "json", "kind": "apprise",
                                       "target": f"json://127.0.0.1:{port}/hook"})
        firing(team, ch)
        [n] = notify.deliver(ch)
    assert n.status == "pending" and n.error.startswith("apprise:")


def test_simultaneous_alerts_of_a_team_go_out_as_one_message(team):
    from greenops.workloads.models import Workload

    ranker = Workload.objects.create(team=team, name="Ranker", slug="ranker", kind="inference")
    with Receiver() as rx:
        ch, _ = webhook(team, rx.url)
        firing(team, ch, name="team energy")
        firing(team, ch, name="ranker energy", workload=ranker)
        sent = notify.deliver(ch)
    assert len(sent) == 2 and len(rx.requests) == 1
    doc = json.loads(rx.requests[0][2])
    assert [a["rule"] for a in doc["alerts"]] == ["team energy", "ranker energy"]


def test_resolved_messages_are_switchable_per_channel(team):
    ch = channels.create(team, {"name": "quiet", "kind": "email", "target": "a@example.com",
                                "send_resolved": False})[0]
    rule = firing(team, ch)
    rollup(team, hour(9), gpu_energy_j=600, requests=1200)  # 0.5 J: clears
    evaluate.run(rule, NOW + dt.timedelta(minutes=1))
    assert rule.state == "ok"
    assert list(Notification.objects.values_list("kind", flat=True)) == ["firing"]


def test_send_test_sends_live_figures(team, mailoutbox):
    ch = channels.create(team, {"name": "mail", "kind": "email",
                                "target": "member@example.com"})[0]  # a team member
    rollup(team, timezone.now().replace(minute=0, second=0, microsecond=0)
           - dt.timedelta(hours=2), gpu_energy_j=7.2e6)  # 2 kWh in the last 24 whole hours
    n = notify.send_test(ch)
    assert n.status == "sent" and n.kind == "test"
    assert "IT energy: 2 kWh" in mailoutbox[0].body
    assert mailoutbox[0].subject == "[TEST] Test message · Vision"


def test_credentials_are_encrypted_and_masked(team):
    ch, _ = channels.create(team, {"name": "slack", "kind": "apprise",
                                   "target": "slack://T1234ABCD/B5678EFGH/abcdefghijklmnop"})
    raw = Channel.objects.filter(id=ch.id).values_list("target_enc", flat=True).get()
    assert "T1234ABCD" not in raw and ch.target.startswith("slack://T1234ABCD")
    assert ch.target_masked == "slack://T12…/B56…/abc…"
    assert crypto.mask("https://hooks.example.com/services/SECRETPATH") == \
        "https://hooks.example.com/ser…/SEC…"


@pytest.mark.parametrize(("data", "field"), [
    ({"name": "", "kind": "email", "target": "a@example.com"}, "name"),
    ({"name": "x", "kind": "fax", "target": "a@example.com"}, "kind"),
    ({"name": "x", "kind": "email", "target": "not-an-address"}, "target"),
    ({"name": "x", "kind": "webhook", "target": "ftp://example.com"}, "target"),
    ({"name": "x", "kind": "apprise", "target": "nosuchservice://abc"}, "target"),
])
def test_bad_channel_input_names_the_field(team, data, field):
    with pytest.raises(FieldError) as exc:
        channels.create(team, data)
    assert exc.value.field == field and exc.value.status == 422
    assert not Channel.objects.exists()


def test_daily_digest_waits_for_its_hour_in_the_team_time_zone(team, mailoutbox):
    team.time_zone = "Europe/Paris"
    team.save()
    ch, _ = channels.create(team, {"name": "digest", "kind": "email",
                                   "target": "member@example.com",
                                   "digest": "daily", "digest_hour": 8})
    Channel.objects.filter(id=ch.id).update(created_at=NOW - dt.timedelta(days=2))
    ch.refresh_from_db()
    firing(team, ch, name="one")
    firing(team, ch, name="two", workload=None)
    Notification.objects.update(created_at=NOW, next_attempt_at=NOW)  # written at NOW
    # NOW is 10:30 UTC = 11:30 in Paris: today's 08:00 slot (07:00 UTC) has passed and no
    # digest was sent since the channel was made: due now, both alerts in one message.
    assert notify.due_channel_ids(NOW) == [ch.id]
    sent = notify.deliver(ch, now=NOW)
    assert len(sent) == 2 and len(mailoutbox) == 1
    assert mailoutbox[0].subject == "Daily digest: 2 alert notifications · Vision"
    # A new alert an hour later waits for tomorrow 08:00 Paris = 07:00 UTC.
    later = NOW + dt.timedelta(hours=1)
    Notification.objects.create(channel=ch, kind="firing", dedupe_key="later",
                                payload=sent[0].payload, created_at=later,
                                next_attempt_at=later)
    assert notify.due_channel_ids(later) == [] and notify.deliver(ch, now=later) == []
    tomorrow = dt.datetime(2026, 11, 11, 7, 0, tzinfo=dt.UTC)
    assert notify.due_channel_ids(tomorrow - dt.timedelta(minutes=1)) == []
    assert notify.due_channel_ids(tomorrow) == [ch.id]


def test_weekly_digest_slot_is_monday(team):
    ch = Channel(team=team, digest="weekly", digest_hour=8)  # team time zone UTC
    # Tuesday 10 Nov 2026 10:30 -> Monday 9 Nov 08:00
    assert ch.digest_slot(NOW) == dt.datetime(2026, 11, 9, 8, tzinfo=dt.UTC)
