"""Failures are recorded, not raised: every exception a send can meet ends on the Notification
row (class and a redacted message) and on the pages, and is retried with backoff and jitter up
to a limit; evaluation errors are written, not lost with a broken transaction."""

from __future__ import annotations

import datetime as dt
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.mail import BadHeaderError
from django.db import connection

from greenops import outbound
from greenops.alerts import channels, evaluate, notify, tasks
from greenops.alerts.models import Channel, Notification, Rule
from tests.support.alerts import (
    NOW,
    RaisingEmailBackend,
    Receiver,
    email_channel,
    hour,
    make_rule,
    rollup,
)

pytestmark = pytest.mark.django_db


def one_firing(team, ch) -> Rule:
    rule = make_rule(team, [ch], name="Energy per inference")
    rollup(team, hour(9), gpu_energy_j=3600, requests=1200)  # 3 J > 2 J
    evaluate.run(rule, NOW)
    return rule


def test_bad_header_is_recorded_and_failed_not_raised(team, settings, client, users):
    settings.EMAIL_BACKEND = "tests.support.alerts.RaisingEmailBackend"
    RaisingEmailBackend.exc = BadHeaderError("Header values can't contain newlines")
    ch = email_channel(team)
    one_firing(team, ch)
    [n] = notify.deliver(ch)  # returns: nothing escapes
    assert (n.status, n.error_class) == ("failed", "BadHeaderError")  # retrying cannot help
    assert n.error.startswith("the e-mail could not be built")
    ch.refresh_from_db()
    assert ch.enabled and ch.last_error == n.error
    client.force_login(users["member"])
    html = client.get(f"/teams/vision/alerts/{n.rule_id}/").content.decode()
    assert "Error (BadHeaderError): the e-mail could not be built" in html


def test_a_line_break_in_an_old_rule_name_no_longer_breaks_the_subject(team, mailoutbox):
    ch = email_channel(team)
    rule = one_firing(team, ch)
    Notification.objects.update(payload={**Notification.objects.get().payload,
                                         "rule": "Energy\nper inference"})
    [n] = notify.deliver(ch)
    assert n.status == "sent" and rule.name
    assert mailoutbox[0].subject == "[FIRING] Energy per inference · Vision"


def test_rotated_key_disables_the_channel_and_says_so(team, settings):
    ch = email_channel(team)
    one_firing(team, ch)
    settings.SECRET_KEY = "rotated-" + settings.SECRET_KEY  # target no longer decrypts
    [n] = notify.deliver(ch)
    assert (n.status, n.error_class) == ("failed", "KeyChanged")
    assert n.error == "cannot decrypt: ALERTS_CHANNEL_KEY or SECRET_KEY changed: re-enter " \
                      "the channel's target"
    ch.refresh_from_db()
    assert not ch.enabled and ch.disabled_reason == n.error


class Slow(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        time.sleep(2)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_timeout_is_retried_with_backoff(team, settings):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    settings.ALERTS_HTTP_TIMEOUT_S = 0.3
    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ch, _ = channels.create(team, {"name": "slow", "kind": "webhook",
                                       "target": f"http://127.0.0.1:{server.server_address[1]}/"})
        one_firing(team, ch)
        before = dt.datetime.now(dt.UTC)
        [n] = notify.deliver(ch)
    finally:
        server.shutdown()
        server.server_close()
    assert (n.status, n.error_class, n.error) == ("pending", "TransportError",
                                                  outbound.UNREACHABLE)
    # First retry: 30 s x a random 50-100 %.
    wait = (n.next_attempt_at - before).total_seconds()
    assert 15 - 1 <= wait <= 30 + 1


def test_http_500_is_retried_then_failed_at_the_limit(team, settings):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    settings.ALERTS_MAX_ATTEMPTS = 3
    with Receiver(status=500, body=b"stack trace with password=hunter2") as rx:
        ch, _ = channels.create(team, {"name": "h", "kind": "webhook", "target": rx.url})
        one_firing(team, ch)
        statuses = []
        [n] = notify.deliver(ch)
        statuses.append((n.status, n.attempts))
        for _ in range(2):  # each retry when it is due, not before
            assert notify.deliver(ch, now=n.next_attempt_at - dt.timedelta(seconds=1)) == []
            [n] = notify.deliver(ch, now=n.next_attempt_at)
            statuses.append((n.status, n.attempts))
    assert statuses == [("pending", 1), ("pending", 2), ("failed", 3)]
    assert n.error == "HTTP 500 from the webhook" and "hunter2" not in n.error
    assert len(rx.requests) == 3


def test_connection_refused_is_recorded(team, settings):
    settings.GREENOPS_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    ch, _ = channels.create(team, {"name": "closed", "kind": "webhook",
                                   "target": f"http://127.0.0.1:{port}/hook"})
    one_firing(team, ch)
    [n] = notify.deliver(ch)
    assert (n.status, n.error_class, n.error) == ("pending", "TransportError",
                                                  outbound.UNREACHABLE)


def test_an_unexpected_exception_is_redacted_and_retried(team, monkeypatch):
    ch, _ = channels.create(team, {"name": "slack", "kind": "apprise",
                                   "target": "slack://T1234ABCD/B5678EFGH/abcdefghijklmnop"})
    one_firing(team, ch)

    def boom(self, message):
        raise RuntimeError(f"library bug near {self.channel.target} (see https://x.example/"
                           "a?token=SECRET123)")

    monkeypatch.setattr(channels.Apprise, "send", boom)
    [n] = notify.deliver(ch)
    assert (n.status, n.error_class) == ("pending", "RuntimeError")
    assert "abcdefghijklmnop" not in n.error and "SECRET123" not in n.error
    assert "slack://T12…/B56…/abc…" in n.error


def test_backoff_grows_exponentially_with_jitter():
    assert notify.backoff(1, rand=lambda: 0.0) == dt.timedelta(seconds=15)
    assert notify.backoff(1, rand=lambda: 1.0) == dt.timedelta(seconds=30)
    assert notify.backoff(4, rand=lambda: 1.0) == dt.timedelta(seconds=240)  # 30 x 2^3
    assert notify.backoff(20, rand=lambda: 1.0) == dt.timedelta(hours=1)  # capped


def test_a_cancelled_query_is_written_as_the_error_state(team, monkeypatch):
    ch = email_channel(team)
    rule = make_rule(team, [ch])

    def slow(*args):
        with connection.cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = '20ms'")
            cur.execute("SELECT pg_sleep(1)")

    monkeypatch.setitem(evaluate.KINDS, "threshold", slow)
    evaluate.run(rule, NOW)  # the transaction is still usable: the state is written
    rule.refresh_from_db()
    assert rule.state == "error" and "statement timeout" in rule.last_error
    assert rule.events.get().to_state == "error"
    assert Notification.objects.get().kind == "error"


def test_a_failed_write_gives_the_minute_back(team, monkeypatch):
    rule = make_rule(team, [])
    tick = NOW.replace(second=0, microsecond=0)

    def fail(rule, now, edited=False):
        raise RuntimeError("canceling statement due to user request")

    monkeypatch.setattr(evaluate, "run", fail)
    assert tasks.evaluate_rule(rule.id, tick.isoformat()) == "error"
    rule.refresh_from_db()
    assert rule.last_tick is None  # released: a retry of this minute is evaluated
    assert rule.last_error == "RuntimeError: canceling statement due to user request"
    monkeypatch.undo()
    assert tasks.evaluate_rule(rule.id, tick.isoformat()) != "already evaluated"


def test_send_test_never_raises(team, settings):
    ch = email_channel(team)
    Channel.objects.filter(id=ch.id).update(target_enc="garbage")
    ch.refresh_from_db()
    n = notify.send_test(ch)
    assert (n.status, n.error_class) == ("failed", "KeyChanged")
